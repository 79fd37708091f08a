"""How the GEMM driver (``gemm.py``) calls its micro-kernel variants: by N tile (last or not), M panel (the
last one's rows, a compile-time or a run-time count) and, for B read in place by taps, by each tile's kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from glow_backend_cpu.emit.vecops import c32, c64, const_table, module_of

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
