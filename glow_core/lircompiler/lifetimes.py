"""Lifetime analysis of the LIR: roots, first and last uses, live bytes, tight alloc/dealloc placement."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from glow_core.lir.instructions import ALLOC, DEALLOC, TENSORVIEW
from glow_core.lir.ir import Activation, Instr, LIRFunction, LValue, View, align, alloc, dealloc, tensorview
from glow_core.lir.memory import intervals, live_profile  # noqa: F401  (re-exported: analyses of the data)


def is_body(ins: Instr) -> bool:
    """Instructions that do work (compute, copy), as opposed to alloc, dealloc and tensorview."""
    return ins.kind not in (ALLOC, DEALLOC, TENSORVIEW)


def body(lir: LIRFunction) -> list[Instr]:
    return [i for i in lir.instrs if is_body(i)]


def roots_of(ins: Instr) -> list[LValue]:
    """The distinct roots an instruction touches, in operand order."""
    seen: dict[int, LValue] = {}
    for v in ins.values():
        r = v.root
        seen.setdefault(id(r), r)
    return list(seen.values())


def last_uses(instrs: Sequence[Instr]) -> dict[int, int]:
    """id(root activation) -> index of the last instruction using it (alloc/dealloc excluded)."""
    last: dict[int, int] = {}
    for k, ins in enumerate(instrs):
        if ins.kind in (ALLOC, DEALLOC):
            continue
        for v in ins.values():
            r = v.root
            if isinstance(r, Activation):
                last[id(r)] = k
    return last


def relayout(lir: LIRFunction, work: Iterable[Instr] | None = None) -> bool:
    """Rebuild ``lir.instrs`` from its compute and copy instructions (or ``work``, in that order).

    Each ``tensorview`` is placed right before the first use of its view, each
    ``alloc`` right before the first use of its activation and each ``dealloc``
    right after the last use; activations and views nothing uses are dropped.
    Returns whether the instruction list changed.
    """
    items = list(work) if work is not None else body(lir)
    last = last_uses(items)
    out: list[Instr] = []
    placed: set[int] = set()

    def define(v: LValue) -> None:
        if id(v) in placed:
            return
        if isinstance(v, View):
            define(v.base)
            out.append(tensorview(v))
        elif isinstance(v, Activation):
            out.append(alloc(v))
        placed.add(id(v))

    for k, ins in enumerate(items):
        for v in ins.values():
            define(v)
        out.append(ins)
        for r in roots_of(ins):
            if isinstance(r, Activation) and last.get(id(r)) == k:
                out.append(dealloc(r))
    changed = _signature(out) != _signature(lir.instrs)
    lir.instrs = out
    lir.prune_values()
    return changed


def _signature(instrs: Sequence[Instr]) -> list[tuple[object, ...]]:
    return [(i.kind, id(i) if is_body(i) else 0, *(id(v) for v in i.values())) for i in instrs]


def peak_of_order(items: Sequence[Instr]) -> int:
    """Peak live activation bytes if ``items`` (compute/copy only) ran in this order with tight lifetimes."""
    last = last_uses(items)
    seen: set[int] = set()
    live = peak = 0
    for k, ins in enumerate(items):
        dying = 0
        for r in roots_of(ins):
            if not isinstance(r, Activation):
                continue
            size = align(r.nbytes)
            if id(r) not in seen:
                seen.add(id(r))
                live += size
            if last[id(r)] == k:
                dying += size
        peak = max(peak, live)
        live -= dying
    return peak
