"""How the GEMM driver (``gemm.py``) calls its micro-kernel variants: by N tile (last or not), M panel (the
last one's rows, a compile-time or a run-time count), for B read in place by taps, by each tile's kind, and
with a symbolic N by the vectors of the run's last tile that hold data."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_backend_cpu.emit.vecops import c32, c64, const_table, module_of
from glow_backend_cpu.helpers import I64, smax, smin

if TYPE_CHECKING:
    from glow_backend_cpu.emit.gemm import GemmPlan

#: ``dispatch_rows``: the row counts of a symbolic M's last panel are rounded up to a multiple of this
ROW_STEP = 2


def kind_table(b: ir.IRBuilder, kinds: list[int] | None) -> ir.Value:
    """A constant table of each N tile's kind (bytes)."""
    assert kinds is not None
    return const_table(module_of(b), ir.IntType(8), kinds, "glow.tapkinds")


def dispatch_kind(b: ir.IRBuilder, plan: GemmPlan, uk: Callable[..., ir.Function], table: ir.Value,
                  nt: ir.Value, mp_last: ir.Value, args: list[ir.Value], m_tail: int) -> None:
    """Call the micro-kernel of N tile ``nt``'s kind (taps read in place), and of the last M panel's rows."""
    assert plan.tap_kinds is not None
    MR = plan.geo.mr
    kind = b.load(b.gep(table, [c32(0), nt]))
    fn = b.block.function
    done = fn.append_basic_block("kind.done")
    sw = b.switch(kind, done)
    for i, (nvec, tail, masked) in enumerate(plan.tap_kinds):
        blk = fn.append_basic_block(f"kind{i}")
        sw.add_case(ir.Constant(ir.IntType(8), i), blk)
        b.position_at_end(blk)
        variants = {(False, m_last): uk(m_tail if m_last else MR, nvec, tail, masked) for m_last in (False, True)}
        dispatch_variant(b, variants, nt, mp_last, args, True, m_tail == MR)
        b.branch(done)
    b.position_at_end(done)


def dispatch_rows(b: ir.IRBuilder, plan: GemmPlan, uk: Callable[..., ir.Function],
                  variants: dict[tuple[bool, bool], ir.Function], nt_last: ir.Value, rows: ir.Value,
                  args: list[ir.Value]) -> None:
    """Call a variant for ``rows`` rows (1..MR, a run-time value: a symbolic M's last panel) and the N tile
    (last or not). Variants exist for multiples of ``ROW_STEP`` rows only, the count rounded up: at most one
    row of padding is computed, and a GEMM's micro-kernels stay few (each is compiled once per module)."""
    steps = list(range(ROW_STEP, plan.geo.mr, ROW_STEP))

    def by_rows(nl: bool) -> None:
        nvec, tail = plan.tile_vectors(nl)
        fn = b.block.function
        done, full = fn.append_basic_block("rows.done"), fn.append_basic_block("rows.full")
        sw = b.switch(rows, full)
        for r in steps:
            blk = fn.append_basic_block(f"rows{r}")
            for count in range(r - ROW_STEP + 1, r + 1):
                sw.add_case(c64(count), blk)
            b.position_at_end(blk)
            b.call(uk(r, nvec, tail), args)
            b.branch(done)
        b.position_at_end(full)
        b.call(variants[(nl, False)], args)
        b.branch(done)
        b.position_at_end(done)

    by_tile(b, plan.n_tail == plan.geo.nr, nt_last, by_rows)


def by_tile(b: ir.IRBuilder, n_full: bool, nt_last: ir.Value, call: Callable[[bool], None]) -> None:
    """``call(last N tile?)`` under a branch on ``nt_last``, or ``call(False)`` alone when every tile is full."""
    if n_full:
        call(False)
        return
    with b.if_else(nt_last) as (then, other):
        with then:
            call(True)
        with other:
            call(False)


def dispatch_variant(b: ir.IRBuilder, variants: dict[tuple[bool, bool], ir.Function], nt_last: ir.Value,
                     mp_last: ir.Value, args: list[ir.Value], n_full: bool, m_full: bool) -> None:
    """Call the variant for (last N tile?, last M panel?), branching only where they differ."""

    def call_m(nl: bool) -> None:
        if m_full:
            b.call(variants[(nl, False)], args)
            return
        with b.if_else(mp_last) as (then, other):
            with then:
                b.call(variants[(nl, True)], args)
            with other:
                b.call(variants[(nl, False)], args)

    by_tile(b, n_full, nt_last, call_m)


#: (the item is the run's last valid N tile and a whole tile of the bound, the vectors that hold its data)
Narrow = tuple[ir.Value, ir.Value]


def narrow_tile(b: ir.IRBuilder, plan: GemmPlan, nt: ir.Value, n0: ir.Value, ntv: ir.Value) -> Narrow | None:
    """With a symbolic N (``GemmPlan.n_valid``) and a fixed M: whether N tile ``nt`` (starting at column ``n0``,
    of ``ntv`` valid tiles) is the run's last, a whole tile of the bound shape, and the vectors covering its
    valid columns (a decode step's scores over 65 keys: 2 vectors of its second tile, not 4). Its other
    vectors are padding: computing them read B's padding columns, which no run wrote (cold memory). None when
    no tile narrows."""
    geo = plan.geo
    if plan.n_valid is None or plan.m_valid is not None or plan.tap_kinds or plan.bf16 or geo.nvec == 1:
        return None
    left = b.sub(smin(b, plan.n_valid, c64(plan.N)), n0)
    vecs = smax(b, b.sdiv(b.add(left, c64(geo.lanes - 1)), c64(geo.lanes)), c64(1))
    cond = b.and_(b.icmp_signed("==", nt, b.sub(ntv, c64(1))), b.icmp_signed("<", vecs, c64(geo.nvec)))
    if plan.n_tail != geo.nr:  # the bound's last tile is narrower already (its own variant)
        cond = b.and_(cond, b.icmp_signed("!=", nt, c64(plan.tiles - 1)))
    return cond, vecs


def dispatch_narrow(b: ir.IRBuilder, plan: GemmPlan, uk: Callable[..., ir.Function], narrow: Narrow | None,
                    mp_last: ir.Value, args: list[ir.Value], call: Callable[[], None]) -> None:
    """``call()`` (the usual dispatch), or for the run's last tile of a symbolic N (``narrow_tile``) the
    variant of its valid vectors (whole vectors: the tile lies inside each row of the bound)."""
    if narrow is None:
        call()
        return
    cond, vecs = narrow
    MR, W, m_tail = plan.geo.mr, plan.geo.lanes, plan.m_tail
    with b.if_else(cond) as (then, other):
        with then:
            fn = b.block.function
            done = fn.append_basic_block("narrow.done")
            sw = b.switch(vecs, done)
            for v in range(1, plan.geo.nvec):
                blk = fn.append_basic_block(f"narrow{v}")
                sw.add_case(c64(v), blk)
                b.position_at_end(blk)
                variants = {(False, m_last): uk(m_tail if m_last else MR, v, W) for m_last in (False, True)}
                dispatch_variant(b, variants, cond, mp_last, args, True, m_tail == MR)
                b.branch(done)
            b.position_at_end(done)
        with other:
            call()


# -- K blocks ----------------------------------------------------------------------------------------------

def kblock_bounds(b: ir.IRBuilder, kbs: list[int], kb: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(k0, k1) of K block ``kb`` (a run-time index) of the bounds ``kbs`` (first 0, last K), read from a
    constant table, so a long K runs as a loop instead of one unrolled copy per block."""
    gv = const_table(module_of(b), I64, kbs, "glow.kblocks")
    return b.load(b.gep(gv, [c32(0), kb])), b.load(b.gep(gv, [c32(0), b.add(kb, c64(1))]))


def kblock_flags(b: ir.IRBuilder, kb: ir.Value, nkb: int | ir.Value) -> ir.Value:
    """The micro-kernel's flags for K block ``kb`` of ``nkb``: bit 0 first block, bit 1 last block."""
    first = b.zext(b.icmp_signed("==", kb, c64(0)), I64)
    last = c64(nkb - 1) if isinstance(nkb, int) else b.sub(nkb, c64(1))
    return b.or_(first, b.shl(b.zext(b.icmp_signed("==", kb, last), I64), c64(1)))


def valid_kblocks(b: ir.IRBuilder, kbs: list[int], k_valid: ir.Value) -> ir.Value:
    """How many K blocks (bounds ``kbs``) start before the run's K, at least one (an empty K still stores
    C: zero, plus the bias)."""
    n: ir.Value = c64(1)
    for k0 in kbs[1:-1]:
        n = b.add(n, b.zext(b.icmp_signed(">", k_valid, c64(k0)), I64))
    return n
