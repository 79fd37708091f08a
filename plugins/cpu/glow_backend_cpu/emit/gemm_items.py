"""The work items of the GEMM driver (``emit/gemm.py``): how N splits into tiles, how the
``batches x N tiles x M panels`` items split over the threads by cost, and the loop over a thread's items."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.helpers import I64, i64, partition, smin

c64 = i64


@dataclass(frozen=True)
class NTiles:
    """How the N columns split into tiles of whole vectors: ``wide`` tiles of ``vw`` vectors, then tiles of
    ``vn`` vectors, the last of which has ``tail`` valid lanes in its last vector.

    Plain: every tile NR wide but the last (``wide = NT - 1``). Balanced: the vectors spread evenly over as
    many tiles, so no tile is much narrower than the others (14 x 14 pixels, 13 vectors: 4 + 3 + 3 + 3
    instead of 4 + 4 + 4 + 1, whose last tile reads the whole of A for 4 pixels at a fraction of the
    FMA rate)."""

    lanes: int
    NT: int
    wide: int
    vw: int
    vn: int
    tail: int

    @staticmethod
    def of(N: int, lanes: int, nvec: int, balanced: bool) -> NTiles:
        """The tiles of ``N`` columns at most ``nvec`` vectors of ``lanes`` wide."""
        W = lanes
        V = -(-N // W)
        NT = -(-V // nvec)
        tail = N - (V - 1) * W
        if balanced:
            return NTiles(W, NT, V % NT, V // NT + 1, V // NT, tail)
        return NTiles(W, NT, NT - 1, nvec, V - (NT - 1) * nvec, tail)

    def n0(self, b: ir.IRBuilder, nt: ir.Value) -> ir.Value:
        """The first column of tile ``nt`` (emitted :meth:`start`)."""
        W = self.lanes
        return b.add(b.mul(nt, c64(self.vn * W)), b.mul(smin(b, nt, c64(self.wide)), c64((self.vw - self.vn) * W)))

    def start(self, nt: int) -> int:
        """The first column of tile ``nt``, at compile time."""
        return (nt * self.vn + min(nt, self.wide) * (self.vw - self.vn)) * self.lanes

    def kinds(self) -> list[tuple[str, int, int]]:
        """(kind, vectors, valid lanes of the last vector) of each kind of tile present."""
        out = [("wide", self.vw, self.lanes)] if self.wide else []
        if self.NT - 1 > self.wide:
            out.append(("mid", self.vn, self.lanes))
        return out + [("last", self.vn, self.tail)]

    def costs(self) -> list[tuple[int, int]]:
        """(tiles, cost of one item) of each kind in order: 4 per vector, plus 1 for a narrower last tile."""
        counts = {"wide": self.wide, "mid": self.NT - 1 - self.wide, "last": 1}
        full = self.vw if self.wide else self.vn
        return [(counts[k], 4 * v + (1 if (v, t) != (full, self.lanes) and k == "last" else 0))
                for k, v, t in self.kinds()]


@dataclass
class Segment:
    """The M panels ``[mp0, mp1)`` of one (batch x group, N tile) pair of a thread's work items."""

    bg: ir.Value
    nt: ir.Value
    n0: ir.Value
    width: ir.Value
    mp0: ir.Value
    mp1: ir.Value


def for_segments(b: ir.IRBuilder, MP: int, N: int, tiles: NTiles, lo: ir.Value, hi: ir.Value,
                 body: Callable[[ir.IRBuilder, Segment], None]) -> None:
    """Run ``body`` for each segment of the work items ``[lo, hi)`` of ``batches x tiles x MP`` (M panels
    innermost; ``N`` columns)."""
    NT = tiles.NT
    fn = b.block.function
    pre = b.block
    hdr = fn.append_basic_block("gemm.items")
    item = fn.append_basic_block("gemm.item")
    done = fn.append_basic_block("gemm.done")
    b.branch(hdr)
    b.position_at_end(hdr)
    p = b.phi(I64, name="p")
    p.add_incoming(lo, pre)
    b.cbranch(b.icmp_signed("<", p, hi), item, done)
    b.position_at_end(item)
    pair = b.udiv(p, c64(MP))
    mp0 = b.sub(p, b.mul(pair, c64(MP)))
    cnt = smin(b, b.sub(c64(MP), mp0), b.sub(hi, p))
    bg = b.udiv(pair, c64(NT))
    nt = b.sub(pair, b.mul(bg, c64(NT)))
    n0 = tiles.n0(b, nt)
    wide = b.icmp_signed("<", nt, c64(tiles.wide))
    width = smin(b, b.select(wide, c64(tiles.vw * tiles.lanes), c64(tiles.vn * tiles.lanes)),
                 b.sub(c64(N), n0))
    body(b, Segment(bg, nt, n0, width, mp0, b.add(mp0, cnt)))
    p.add_incoming(b.add(p, cnt), b.block)
    b.branch(hdr)
    b.position_at_end(done)


def weighted_share(b: ir.IRBuilder, tid: ir.Value, nthreads: ir.Value, BG: int, MP: int,
                    costs: list[tuple[int, int]]) -> tuple[ir.Value, ir.Value]:
    """This thread's items ``[lo, hi)`` of ``BG x tiles x MP`` (M panels innermost) with equal shares of
    *cost*: ``costs`` lists (tiles, cost of one item) of each run of N tiles in order (a narrow tail tile
    is cheap, so an even split by count would leave the thread without it idle)."""
    NT = sum(n for n, _ in costs)
    if len({w for _, w in costs}) == 1:
        return partition(b, BG * NT * MP, tid, nthreads)
    per_bg = sum(n * MP * w for n, w in costs)

    def item_at(c: ir.Value) -> ir.Value:
        """The number of items whose cost starts before ``c`` (monotonic, 0 at 0, all items at the total)."""
        q = b.udiv(c, c64(per_bg))
        r = b.urem(c, c64(per_bg))
        within: ir.Value = c64(0)
        c_start = i_start = 0
        for n, w in costs:
            here = b.add(c64(i_start), b.udiv(b.add(b.sub(r, c64(c_start)), c64(w - 1)), c64(w)))
            within = here if c_start == 0 else b.select(b.icmp_signed(">", r, c64(c_start)), here, within)
            c_start += n * MP * w
            i_start += n * MP
        return b.add(b.mul(q, c64(NT * MP)), within)

    c0, c1 = partition(b, BG * per_bg, tid, nthreads)
    return item_at(c0), item_at(c1)
