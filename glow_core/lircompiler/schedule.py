"""The ``schedule`` pass: reorder independent instructions to lower the peak of live bytes.

The dependency DAG of the compute and copy instructions is built per root
buffer (read after write, write after write, write after read; allocs,
deallocs and tensorviews are re-placed afterwards by
:func:`~glow_core.lircompiler.lifetimes.relayout`). A list scheduler then picks, among
the ready instructions, the best by a policy:

- ``net-free``: most bytes freed (operands whose last remaining access this is)
  minus bytes newly allocated (results), then the original order;
- ``net-free-lifo``: the same, then the most recently readied (depth first);
- ``lifo``: the most recently readied (finish one branch before starting the next).

Priorities change only when a buffer's remaining-access count drops to one or
a buffer gets allocated; the affected ready instructions are re-pushed on a
heap with a version stamp (lazy deletion), so a schedule costs
O((instructions + operands) log instructions). The pass keeps the order with
the lowest peak (the original one on ties) and reports a change only when it
improves the peak.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from glow_core.lir.ir import Activation, Instr, LIRFunction, align
from glow_core.lircompiler.lifetimes import body, peak_of_order, relayout, roots_of
from glow_core.lircompiler.passes import LIRPassContext, lir_pass


def dependencies(items: Sequence[Instr]) -> list[set[int]]:
    """preds[k]: the instructions that must run before instruction k."""
    preds: list[set[int]] = [set() for _ in items]
    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for k, ins in enumerate(items):
        reads: dict[int, None] = {}
        writes: dict[int, None] = {}
        for op in ins.operands:
            if op.value is None:
                continue
            r = id(op.value.root)
            if op.dir.reads:
                reads[r] = None
            if op.dir.writes:
                writes[r] = None
        for r in reads:
            if r in writer:
                preds[k].add(writer[r])
        for r in writes:
            if r in writer:
                preds[k].add(writer[r])
            preds[k].update(readers.get(r, ()))
        for r in writes:
            writer[r] = k
            readers[r] = []
        for r in reads:
            if r not in writes:
                readers.setdefault(r, []).append(k)
        preds[k].discard(k)
    return preds


Key = Callable[[int, int, int], tuple[int, ...]]  # (instruction, score, ready sequence) -> heap key

POLICIES: dict[str, Key] = {
    "net-free": lambda i, score, seq: (-score, i),
    "net-free-lifo": lambda i, score, seq: (-score, -seq),
    "lifo": lambda i, score, seq: (-seq,),
}


def list_schedule(items: Sequence[Instr], preds: Sequence[set[int]], key: Key) -> list[int]:
    """One list schedule of ``items`` under the priority ``key``."""
    n = len(items)
    succs: list[list[int]] = [[] for _ in range(n)]
    npred = [len(p) for p in preds]
    for k, ps in enumerate(preds):
        for p in ps:
            succs[p].append(k)
    roots = [[r for r in roots_of(ins) if isinstance(r, Activation)] for ins in items]
    size: dict[int, int] = {}
    accessors: dict[int, list[int]] = {}
    for k, rs in enumerate(roots):
        for r in rs:
            size[id(r)] = align(r.nbytes)
            accessors.setdefault(id(r), []).append(k)
    remaining = {r: len(a) for r, a in accessors.items()}
    allocated: set[int] = set()
    ready: set[int] = set()
    done = [False] * n
    version = [0] * n
    seq = [0] * n
    heap: list[tuple[tuple[int, ...], int, int]] = []
    counter = 0

    def score(i: int) -> int:
        s = 0
        for r in roots[i]:
            rid = id(r)
            if rid not in allocated:
                s -= size[rid]
            if remaining[rid] == 1:
                s += size[rid]
        return s

    def push(i: int) -> None:
        version[i] += 1
        heapq.heappush(heap, (key(i, score(i), seq[i]), version[i], i))

    for i in range(n):
        if npred[i] == 0:
            ready.add(i)
            push(i)
    order: list[int] = []
    while heap:
        _, ver, i = heapq.heappop(heap)
        if done[i] or ver != version[i]:
            continue
        done[i] = True
        ready.discard(i)
        order.append(i)
        touched: set[int] = set()
        for r in roots[i]:
            rid = id(r)
            remaining[rid] -= 1
            if rid not in allocated:
                allocated.add(rid)
                touched.update(a for a in accessors[rid] if a in ready)
            if remaining[rid] == 1:
                touched.update(a for a in accessors[rid] if a in ready)
        for s in succs[i]:
            npred[s] -= 1
            if npred[s] == 0:
                counter += 1
                seq[s] = counter
                ready.add(s)
                touched.add(s)
        for t in touched:
            push(t)
    if len(order) != n:  # pragma: no cover  (a dependency cycle cannot come from a valid order)
        return list(range(n))
    return order


@lir_pass("schedule")
def schedule(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """Reorder independent instructions to lower the peak of live activation bytes (kept only if it does)."""
    items = body(lir)
    if len(items) < 3:
        return False
    preds = dependencies(items)
    best_peak, best = peak_of_order(items), None
    for key in POLICIES.values():
        order = list_schedule(items, preds, key)
        peak = peak_of_order([items[i] for i in order])
        if peak < best_peak:
            best_peak, best = peak, order
    if best is None:
        return False
    relayout(lir, [items[i] for i in best])
    return True
