"""How the GEMM driver (``gemm.py``) splits its work items ``batch x N tiles x M panels`` (M panels innermost)
over the threads: contiguous ranges of equal cost, a narrow last N tile weighing less."""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.emit.vecops import c64
from glow_backend_cpu.helpers import partition


def weighted_share(b: ir.IRBuilder, tid: ir.Value, nthreads: ir.Value, BG: int, NT: int, MP: int, nvec: int,
                   tail_nvec: int) -> tuple[ir.Value, ir.Value]:
    """This thread's items ``[lo, hi)`` of ``BG x NT x MP`` (M panels innermost) with equal shares of *cost*:
    an item weighs 4 per vector of its tile, ``nvec`` vectors, and an item of the last tile, ``tail_nvec``
    vectors, one more (a narrow tail tile is cheap, so an even split by count would leave the thread without
    it idle)."""
    w_full, w_tail = 4 * nvec, 4 * tail_nvec + 1
    if NT == 1:
        return partition(b, BG * NT * MP, tid, nthreads)
    full_cost = (NT - 1) * MP * w_full
    per_bg = full_cost + MP * w_tail
    total = BG * per_bg

    def item_at(c: ir.Value) -> ir.Value:
        """The number of items whose cost starts before ``c`` (monotonic, 0 at 0, all items at ``total``)."""
        q = b.udiv(c, c64(per_bg))
        r = b.urem(c, c64(per_bg))
        in_full = b.udiv(b.add(r, c64(w_full - 1)), c64(w_full))
        in_tail = b.add(c64((NT - 1) * MP), b.udiv(b.add(b.sub(r, c64(full_cost)), c64(w_tail - 1)), c64(w_tail)))
        within = b.select(b.icmp_signed("<=", r, c64(full_cost)), in_full, in_tail)
        return b.add(b.mul(q, c64(NT * MP)), within)

    c0, c1 = partition(b, total, tid, nthreads)
    return item_at(c0), item_at(c1)


def weighted_share_dyn(b: ir.IRBuilder, tid: ir.Value, nthreads: ir.Value, BG: ir.Value, NT: int, MP: ir.Value,
                       nvec: int, tail_nvec: int) -> tuple[ir.Value, ir.Value]:
    """:func:`weighted_share` with run-time counts of problems ``BG`` and M panels ``MP`` (symbolic dims)."""
    w_full, w_tail = 4 * nvec, 4 * tail_nvec + 1
    if NT == 1:
        return partition(b, b.mul(MP, BG), tid, nthreads)
    full_cost = b.mul(MP, c64((NT - 1) * w_full))
    per_bg = b.mul(MP, c64((NT - 1) * w_full + w_tail))
    full_items = b.mul(MP, c64(NT - 1))

    def item_at(c: ir.Value) -> ir.Value:
        q = b.udiv(c, per_bg)
        r = b.urem(c, per_bg)
        in_full = b.udiv(b.add(r, c64(w_full - 1)), c64(w_full))
        in_tail = b.add(full_items, b.udiv(b.add(b.sub(r, full_cost), c64(w_tail - 1)), c64(w_tail)))
        within = b.select(b.icmp_signed("<=", r, full_cost), in_full, in_tail)
        return b.add(b.mul(q, b.mul(MP, c64(NT))), within)

    c0, c1 = partition(b, b.mul(per_bg, BG), tid, nthreads)
    return item_at(c0), item_at(c1)
