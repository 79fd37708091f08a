"""Static memory allocation: every activation at a compile-time offset in one arena.

Placement is NP-hard in general (dynamic storage allocation), so the planner
tries several heuristics and keeps the smallest arena:

- ``size-first-fit`` / ``size-best-fit``: largest buffers first, each at the
  lowest (first-fit) or tightest (best-fit) gap left by the already placed
  buffers whose lifetimes overlap it (TFLite's "greedy by size");
- ``breadth``: buffers of the most crowded instructions first (greedy by breadth);
- ``time-first-fit`` / ``time-best-fit``: in allocation order, like a
  run-time allocator would.

The plan's data types (``MemoryPlan``, ``MemoryReport``) and its checker live in
``glow_core.lir.memory``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from glow_core.lir.ir import LIRFunction, align
from glow_core.lir.memory import MemoryPlan, MemoryReport, intervals, live_profile


@dataclass(frozen=True)
class _Buf:
    index: int
    start: int  # index of the alloc instruction
    end: int  # index of the dealloc instruction
    size: int  # aligned bytes


Placement = Callable[[Sequence[_Buf], Sequence[int]], list[int]]


def _place(order: Sequence[_Buf], n: int, best_fit: bool) -> list[int]:
    """Place buffers in ``order``, each in a gap among placed buffers whose lifetimes overlap it."""
    offsets = [0] * n
    starts = np.empty(len(order), dtype=np.int64)
    ends = np.empty(len(order), dtype=np.int64)
    offs = np.empty(len(order), dtype=np.int64)
    sizes = np.empty(len(order), dtype=np.int64)
    k = 0
    for b in order:
        if b.size == 0:
            offsets[b.index] = 0
            continue
        mask = (starts[:k] <= b.end) & (ends[:k] >= b.start)
        idx = np.nonzero(mask)[0]
        placed = sorted(zip(offs[idx].tolist(), sizes[idx].tolist()))
        cur, best, best_gap = 0, -1, None
        for o, s in placed:
            gap = o - cur
            if gap >= b.size:
                if not best_fit:
                    best = cur
                    break
                if best_gap is None or gap < best_gap:
                    best, best_gap = cur, gap
            cur = max(cur, o + s)
        off = best if best >= 0 else cur
        offsets[b.index] = off
        starts[k], ends[k], offs[k], sizes[k] = b.start, b.end, off, b.size
        k += 1
    return offsets


def _by_size(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    return sorted(bufs, key=lambda b: (-b.size, b.start))


def _by_time(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    return sorted(bufs, key=lambda b: b.start)


def _by_breadth(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    prof = np.asarray(profile, dtype=np.int64)
    breadth = {b.index: int(prof[b.start:b.end + 1].max()) if b.end >= b.start else 0 for b in bufs}
    return sorted(bufs, key=lambda b: (-breadth[b.index], -b.size, b.start))


def _by_area(bufs: Sequence[_Buf], profile: Sequence[int]) -> list[_Buf]:
    return sorted(bufs, key=lambda b: (-b.size * (b.end - b.start + 1), b.start))


#: name -> (order of placement, best fit?)
HEURISTICS: Mapping[str, tuple[Callable[[Sequence[_Buf], Sequence[int]], list[_Buf]], bool]] = {
    "size-first-fit": (_by_size, False),
    "size-best-fit": (_by_size, True),
    "breadth": (_by_breadth, False),
    "area": (_by_area, False),
    "time-first-fit": (_by_time, False),
    "time-best-fit": (_by_time, True),
}


def plan_memory(lir: LIRFunction, heuristics: Sequence[str] | None = None) -> MemoryPlan:
    """Assign arena offsets to every activation of ``lir`` (sets and returns ``lir.plan``)."""
    spans = intervals(lir)
    acts = [a for a in lir.activations if id(a) in spans]
    bufs = [_Buf(i, spans[id(a)][1], spans[id(a)][2], align(a.nbytes)) for i, a in enumerate(acts)]
    profile = live_profile(lir)
    lower = max(profile, default=0)
    naive = sum(b.size for b in bufs)
    best: tuple[int, str, list[int]] | None = None
    candidates: dict[str, int] = {}
    for name in heuristics or list(HEURISTICS):
        order_fn, best_fit = HEURISTICS[name]
        offsets = _place(order_fn(bufs, profile), len(bufs), best_fit)
        arena = align(max((o + a.nbytes for o, a in zip(offsets, acts)), default=0))
        candidates[name] = arena
        if best is None or arena < best[0]:
            best = (arena, name, offsets)
    arena, name, offsets = best if best is not None else (0, "", [])
    report = MemoryReport(
        arena_bytes=arena, naive_bytes=naive, lower_bound_bytes=lower, activations=len(acts), heuristic=name,
        candidates=candidates,
        constant_bytes=sum(w.nbytes for w in lir.constants),
        io_bytes=sum(w.nbytes for w in lir.inputs + lir.outputs),
    )
    plan = MemoryPlan({id(a): o for a, o in zip(acts, offsets)}, report)
    lir.plan = plan
    return plan


