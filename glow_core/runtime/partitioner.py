"""The partitioner: a prepared function -> a DAG of partitions, each for one backend and one device.

Three steps (docs/runtime.md):

1. **By claims** -- every node goes to the first backend of the device list that claims it
   (:mod:`glow_core.runtime.assign`: claims, epilogues following their producer, minimum partition
   sizes, partitions a backend refused at compile time); nodes are ordered so that runs of one
   backend stay together (a topological order that prefers the backend of the previous node), and
   each maximal run becomes a partition. Runs are intervals of a topological order, so the
   partitions always form an acyclic graph.
2. **By memory** -- a partition whose estimated need exceeds a device of its backend is split along
   that order into the fewest pieces that fit, each cut placed near the point that balances the
   estimated cost, at the position that cuts the fewest bytes.
3. **Placement** -- partitions go to devices of their backend, each to the one with the most free
   memory that holds it; when none does, :class:`PartitionError` names the partition, its need and
   the capacities.

A user-defined assignment (node name -> device id) replaces steps 1 and 2 and is validated: the
device's backend must run the node, the partitions must fit their devices and form a DAG.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from glow_core.ir.graph import Function, Node, Value
from glow_core.runtime.assign import (
    Claims,
    Exclusions,
    Labels,
    assign,
    collect_claims,
    fall_back,
    follow_producers,
    keep_blocks_whole,
    lower_unclaimed,
    small_runs,
)
from glow_core.runtime.cost import CostModel, PlanEstimate, costly_runs, estimate_plan
from glow_core.runtime.devices import DeviceConfig, backend_order, format_bytes
from glow_core.runtime.errors import PartitionError
from glow_core.runtime.graphcut import MemoryEstimate, boundary, node_cost, segment_memory
from glow_sdk.backend import Backend

#: share of a device's capacity the memory split aims to fill (the compiled memory plan may exceed the
#: graph's activation estimate a little; the device manager checks the real figure when loading)
SPLIT_BUDGET = 0.9


@dataclass
class Partition:
    """One partition: its nodes (topological order), backend, device, boundary tensors and estimates."""

    id: int
    backend: str
    nodes: list[Node]
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    memory: MemoryEstimate = MemoryEstimate(0, 0, 0)
    cost: int = 0
    device: str = ""
    deps: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"p{self.id}"


@dataclass(frozen=True)
class Refusal:
    """Nodes a backend did not take: it refused their partition at compile time, or the run was too small."""

    backend: str
    nodes: int
    reason: str
    #: the refused partition's name at the time (compile-time refusals), "" for a run below the minimum
    partition: str = ""


@dataclass
class PartitionPlan:
    """The partitions of one function (topologically ordered) and the devices they were placed on."""

    function: Function
    partitions: list[Partition]
    devices: list[DeviceConfig]
    #: nodes that did not go to the first backend of the list: node -> the backend they fell back to
    fallback: list[tuple[Node, str]] = field(default_factory=list)
    #: what backends did not take, and why (compile-time refusals, runs below a backend's minimum)
    refusals: list[Refusal] = field(default_factory=list)
    #: the estimated time per request (compute and transfers, one partition after the other); None when no
    #: backend of the list estimates costs or declares a transfer bandwidth
    estimate: PlanEstimate | None = None

    def cut_tensors(self) -> list[tuple[Value, int, list[int]]]:
        """(tensor, producing partition, consuming partitions) for every tensor passed between partitions."""
        producer = {id(v): p.id for p in self.partitions for v in p.outputs}
        out: dict[int, tuple[Value, int, list[int]]] = {}
        for p in self.partitions:
            for v in p.inputs:
                if id(v) in producer:
                    out.setdefault(id(v), (v, producer[id(v)], []))[2].append(p.id)
        return list(out.values())


def label_nodes(function: Function, backends: Sequence[Backend], claims: Claims, excluded: Exclusions,
                refusals: list[Refusal]) -> Labels:
    """Assign by claims, let epilogues follow their producer, then push to the next backend the runs below
    their backend's minimum size and, for backends with costs, the runs cheaper there, moves included
    (recorded in ``refusals``), until no run moves; when a backend estimates costs, finish with a local
    search on the plan's estimate (:func:`refine`)."""
    model = CostModel.of(backends)
    minimum = {b.name: b.min_partition_nodes for b in backends}
    by_cost = Exclusions()  # runs moved by the cost step: the local search may bring them back
    while True:
        both = Exclusions({b.name: excluded.nodes.get(b.name, set()) | by_cost.nodes.get(b.name, set())
                           for b in backends})
        label = assign(function, backends, claims, both)
        follow_producers(function, backends, label, claims, both)
        keep_blocks_whole(function, backends, label, claims, both)
        found = runs(grouped_order(function, label), label)
        todo = [(b, nodes, f"fewer than {minimum[b]} node(s) (min_partition_nodes)", excluded)
                for b, nodes in small_runs(found, backends)]
        costly = [(b, nodes, reason, by_cost)
                  for b, nodes, reason in costly_runs(model, function, found, label, backends, claims, both)]
        moved = False
        for b, nodes, reason, into in todo or costly:
            if fall_back(function, nodes, b, backends, claims, into):
                refusals.append(Refusal(b, len(nodes), reason))
                moved = True
        if not moved:
            if any(model.estimates(b.name) for b in backends):
                refine(model, function, label, [b.name for b in backends], claims, excluded, minimum)
            return label


#: the most rounds of :func:`refine` (each tries every choice once)
REFINE_ROUNDS = 8
#: functions with more nodes than this are refined by whole runs only (a round tries each run, not each node)
REFINE_NODES = 400


def _plan_seconds(model: CostModel, function: Function, label: Mapping[int, str],
                  minimum: Mapping[str, int], deps: Dependencies) -> float:
    """The estimate of the plan ``label`` makes (infinite when a run is below its backend's minimum size)."""
    parts = runs(grouped_order(function, label, deps), label)
    if any(len(nodes) < minimum.get(b, 1) for b, nodes in parts):
        return math.inf
    return estimate_plan(model, function, parts).total_s


def _closures(function: Function, label: Mapping[int, str]) -> list[list[Node]]:
    """Each producer-consumer pair of one label, and for each node the nodes of its label it reaches through
    nodes of that label (downstream, then upstream): the groups a local search moves together."""
    down: dict[int, list[Node]] = {id(n): [] for n in function.nodes}
    up: dict[int, list[Node]] = {id(n): [] for n in function.nodes}
    for n in function.nodes:
        for v in n.inputs:
            p = v.producer if v is not None else None
            if p is not None and id(p) in down and label[id(p)] == label[id(n)]:
                down[id(p)].append(n)
                up[id(n)].append(p)
    out = [[p, n] for n in function.nodes for p in up[id(n)]]  # every edge inside one label
    for edges in (down, up):
        for n in function.nodes:
            seen, todo = {id(n): n}, [n]
            while todo:
                for m in edges[id(todo.pop())]:
                    if id(m) not in seen:
                        seen[id(m)] = m
                        todo.append(m)
            if len(seen) > 1:
                out.append(list(seen.values()))
    return out


def refine(model: CostModel, function: Function, label: Labels, names: Sequence[str], claims: Claims,
           excluded: Exclusions, minimum: Mapping[str, int]) -> float:
    """Improve ``label`` in place by the cost model's estimate: move a run (and, in functions of at most
    :data:`REFINE_NODES` nodes, a single node, a producer-consumer pair or a chain, :func:`_closures`) to
    another backend that claims all of it whenever the plan's estimate drops, until no move helps (local
    search; the claims, exclusions and minimum sizes hold). Returns the final estimate."""
    def takers(nodes: Sequence[Node]) -> list[str]:
        return [b for b in names if all(claims.claims(b, n) and not excluded.excludes(b, n) for n in nodes)]

    deps = Dependencies.of(function)
    best = _plan_seconds(model, function, label, minimum, deps)
    for _ in range(REFINE_ROUNDS):
        improved = False
        groups = [nodes for _, nodes in runs(grouped_order(function, label, deps), label)]
        if len(function.nodes) <= REFINE_NODES:
            groups += [[n] for n in function.nodes] + _closures(function, label)
        for nodes in groups:
            before = {id(n): label[id(n)] for n in nodes}
            for b in takers(nodes):
                if all(before[id(n)] == b for n in nodes):
                    continue
                label.update({id(n): b for n in nodes})
                seconds = _plan_seconds(model, function, label, minimum, deps)
                if seconds < best * (1 - 1e-9):
                    best, improved = seconds, True
                    before = {id(n): b for n in nodes}
                else:
                    label.update(before)
        if not improved:
            break
    return best


@dataclass(frozen=True)
class Dependencies:
    """The dependencies of a function's nodes: position, number of distinct producers, consumers."""

    index: dict[int, int]
    preds: dict[int, int]
    succs: dict[int, list[Node]]

    @classmethod
    def of(cls, function: Function) -> Dependencies:
        index = {id(n): i for i, n in enumerate(function.nodes)}
        preds: dict[int, set[int]] = {id(n): set() for n in function.nodes}
        succs: dict[int, list[Node]] = {id(n): [] for n in function.nodes}
        for n in function.nodes:
            for v in n.inputs:
                p = v.producer if v is not None else None
                if p is not None and id(p) in preds and id(p) not in preds[id(n)]:
                    preds[id(n)].add(id(p))
                    succs[id(p)].append(n)
        return cls(index, {k: len(v) for k, v in preds.items()}, succs)


def grouped_order(function: Function, label: Mapping[int, str], deps: Dependencies | None = None) -> list[Node]:
    """A topological order of the nodes that keeps nodes of one label together when it can: the next node is
    the first ready one (in function order) of the previous node's label, else the first ready one. ``deps``:
    the function's dependencies when already known (:meth:`Dependencies.of`)."""
    deps = deps or Dependencies.of(function)
    index, succs = deps.index, deps.succs
    waiting = dict(deps.preds)
    nodes = function.nodes
    ready_all: list[int] = []  # heaps of function positions: every ready node, and per label
    ready: dict[str, list[int]] = {}
    for n in nodes:
        if waiting[id(n)] == 0:
            heapq.heappush(ready_all, index[id(n)])
            heapq.heappush(ready.setdefault(label[id(n)], []), index[id(n)])
    order: list[Node] = []
    taken: set[int] = set()
    current = label[id(nodes[ready_all[0]])] if ready_all else ""
    while len(order) < len(nodes) and ready_all:
        mine = ready.get(current, [])
        while mine and mine[0] in taken:
            heapq.heappop(mine)
        if mine:
            i = heapq.heappop(mine)
        else:
            while ready_all[0] in taken:
                heapq.heappop(ready_all)
            i = heapq.heappop(ready_all)
        taken.add(i)
        pick = nodes[i]
        current = label[id(pick)]
        order.append(pick)
        for s in succs[id(pick)]:
            waiting[id(s)] -= 1
            if waiting[id(s)] == 0:
                heapq.heappush(ready_all, index[id(s)])
                heapq.heappush(ready.setdefault(label[id(s)], []), index[id(s)])
    return order


def runs(order: Sequence[Node], label: Mapping[int, str]) -> list[tuple[str, list[Node]]]:
    """Maximal runs of consecutive nodes with one label."""
    out: list[tuple[str, list[Node]]] = []
    for n in order:
        if out and out[-1][0] == label[id(n)]:
            out[-1][1].append(n)
        else:
            out.append((label[id(n)], [n]))
    return out


def _cut_bytes(function: Function, nodes: Sequence[Node], pos: int) -> int:
    _, outs = boundary(function, nodes[:pos])
    later = {id(v) for n in nodes[pos:] for v in n.inputs if v is not None}
    return sum(v.type.nbytes for v in outs if id(v) in later)


def split_by_memory(function: Function, nodes: list[Node], budget: int, max_pieces: int) -> list[list[Node]]:
    """Split ``nodes`` into the fewest pieces (at most ``max_pieces``) whose estimates fit ``budget``.

    For k pieces, cut j is placed within a window around the node where the cumulative cost reaches
    j/k of the total, at the position with the fewest bytes cut (ties: the most balanced position).
    """
    if segment_memory(function, nodes).total <= budget:
        return [nodes]
    for single in nodes:
        need = segment_memory(function, [single]).total
        if need > budget:
            raise PartitionError(f"{single.where()} alone needs {format_bytes(need)}, more than a device holds "
                                 f"({format_bytes(budget)} usable)", hint="give the devices more memory (@SIZE)")
    prefix = [0]
    for n in nodes:
        prefix.append(prefix[-1] + node_cost(n))
    total = prefix[-1] or 1
    m = len(nodes)
    k0 = max(2, math.ceil(segment_memory(function, nodes).total / budget))
    for k in range(k0, min(m, max_pieces) + 1):
        cuts = _place_cuts(function, nodes, prefix, total, k, budget)
        if cuts is not None:
            bounds = [0, *cuts, m]
            return [nodes[a:b] for a, b in zip(bounds, bounds[1:])]
    return _greedy_split(function, nodes, budget)


def _place_cuts(function: Function, nodes: list[Node], prefix: list[int], total: int, k: int,
                budget: int) -> list[int] | None:
    """Cut positions for k pieces, or None when this k does not fit (see :func:`split_by_memory`).

    Cut j goes where the piece before it fits ``budget`` and what follows still fits the remaining
    pieces, minimizing the imbalance of estimated cost plus the bytes cut (both as shares).
    """
    m = len(nodes)
    need_after = _pieces_needed(function, nodes, budget)
    cut_scale = max(1, max(_cut_bytes(function, nodes, pos) for pos in range(1, m)))
    cuts: list[int] = []
    start = 0
    for j in range(1, k):
        target = prefix[start] + (total - prefix[start]) / (k - j + 1)
        best: tuple[float, int] | None = None
        for pos in range(start + 1, m - (k - j) + 1):
            if segment_memory(function, nodes[start:pos]).total > budget:
                break
            if need_after[pos] > k - j:
                continue
            score = abs(prefix[pos] - target) / total + _cut_bytes(function, nodes, pos) / cut_scale / k
            if best is None or score < best[0]:
                best = (score, pos)
        if best is None:
            return None
        cuts.append(best[1])
        start = best[1]
    if segment_memory(function, nodes[start:]).total > budget:
        return None
    return cuts


def _pieces_needed(function: Function, nodes: list[Node], budget: int) -> list[int]:
    """need[i]: the fewest pieces that hold ``nodes[i:]`` (greedy from i, exact for intervals)."""
    m = len(nodes)
    need = [0] * (m + 1)
    end = m
    for i in range(m - 1, -1, -1):
        while end > i + 1 and segment_memory(function, nodes[i:end]).total > budget:
            end -= 1
        need[i] = 1 + need[end] if end < m or i < m else 1
    return need


def _greedy_split(function: Function, nodes: list[Node], budget: int) -> list[list[Node]]:
    pieces: list[list[Node]] = [[]]
    for n in nodes:
        if pieces[-1] and segment_memory(function, [*pieces[-1], n]).total > budget:
            pieces.append([])
        pieces[-1].append(n)
    return pieces


def _make_partitions(function: Function, groups: Sequence[tuple[str, list[Node]]]) -> list[Partition]:
    parts = []
    for i, (backend, nodes) in enumerate(groups):
        ins, outs = boundary(function, nodes)
        parts.append(Partition(i, backend, nodes, ins, outs, segment_memory(function, nodes),
                               sum(node_cost(n) for n in nodes)))
    producer = {id(v): p.id for p in parts for v in p.outputs}
    for p in parts:
        p.deps = sorted({producer[id(v)] for v in p.inputs if id(v) in producer})
    return parts


def place(parts: list[Partition], devices: Sequence[DeviceConfig]) -> None:
    """Put each partition on the device of its backend with the most free memory that holds it."""
    free = {d.id: d.memory_bytes for d in devices}
    for p in sorted(parts, key=lambda p: -p.memory.total):
        if p.device:  # user-defined
            free[p.device] -= p.memory.total
            continue
        mine = [d for d in devices if d.backend == p.backend]
        fits = [d for d in mine if free[d.id] >= p.memory.total]
        if not fits:
            caps = ", ".join(f"{d.id} {format_bytes(free[d.id])} free of {format_bytes(d.memory_bytes)}"
                             for d in mine)
            raise PartitionError(f"no device holds partition {p.name} ({p.backend}, {len(p.nodes)} nodes): it needs "
                                 f"{format_bytes(p.memory.total)}; {caps}",
                                 hint=f"add {p.backend} devices or give them more memory (@SIZE)")
        best = max(fits, key=lambda d: (free[d.id], -d.index))
        p.device = best.id
        free[best.id] -= p.memory.total


def partition(function: Function, devices: Sequence[DeviceConfig], backends: Sequence[Backend],
              claims: Claims | None = None, excluded: Exclusions | None = None,
              refusals: list[Refusal] | None = None) -> PartitionPlan:
    """Partition a prepared function by claims, then by memory, and place the partitions (module docstring).

    ``claims`` defaults to each backend's ``claim`` of ``function``; ``excluded`` holds the nodes backends
    refused (compile-time refusals, recorded in ``refusals``); the plan keeps ``refusals`` with the runs
    this call found too small appended.
    """
    if claims is None:
        claims = collect_claims(function, backends)
        lower_unclaimed(function, backends, claims)
    excluded = excluded if excluded is not None else Exclusions()
    told = refusals if refusals is not None else []
    label = label_nodes(function, backends, claims, excluded, told)
    order = grouped_order(function, label)
    groups: list[tuple[str, list[Node]]] = []
    for backend, nodes in runs(order, label):
        mine = [d for d in devices if d.backend == backend]
        budget = int(max(d.memory_bytes for d in mine) * SPLIT_BUDGET)
        for piece in split_by_memory(function, nodes, budget, max_pieces=max(len(mine), 1) * 4):
            groups.append((backend, piece))
    parts = _make_partitions(function, groups)
    place(parts, devices)
    first = backend_order(list(devices))[0]
    fallback = [(n, label[id(n)]) for n in order if label[id(n)] != first]
    model = CostModel.of(backends)
    estimate = estimate_plan(model, function, [(p.backend, p.nodes) for p in parts]) if model.informed() else None
    return PartitionPlan(function, parts, list(devices), fallback, told, estimate)


def partition_user(function: Function, devices: Sequence[DeviceConfig], backends: Sequence[Backend],
                   assignment: Mapping[str, str]) -> PartitionPlan:
    """Partition by a user-defined node name -> device id assignment; validate it (module docstring)."""
    by_id = {d.id: d for d in devices}
    by_name = {b.name: b for b in backends}
    names = {n.name for n in function.nodes}
    unknown = sorted(set(assignment) - names)
    if unknown:
        raise PartitionError(f"the assignment names {len(unknown)} unknown node(s): {', '.join(unknown[:5])}",
                             hint="'glow partition MODEL --devices ...' lists the node names of the prepared graph")
    missing = [n.name for n in function.nodes if n.name not in assignment]
    if missing:
        raise PartitionError(f"the assignment leaves {len(missing)} node(s) without a device: "
                             + ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else ""))
    bad_dev = sorted({d for d in assignment.values() if d not in by_id})
    if bad_dev:
        raise PartitionError(f"the assignment names unknown device(s) {', '.join(bad_dev)}; "
                             f"choose one of: {', '.join(by_id)}")
    label = {id(n): assignment[n.name] for n in function.nodes}
    refused = [f"{n.where()} on {label[id(n)]}" for n in function.nodes
               if not by_name[by_id[label[id(n)]].backend].supports(n)]
    if refused:
        raise PartitionError(f"{len(refused)} node(s) assigned to a device whose backend cannot run them: "
                             + "; ".join(refused[:5]))
    order = grouped_order(function, label)
    groups = runs(order, label)
    parts = _make_partitions(function, [(by_id[dev].backend, nodes) for dev, nodes in groups])
    for p, (dev, _) in zip(parts, groups):
        p.device = dev
    _check_acyclic_devices(parts)
    for d in devices:
        need = sum(p.memory.total for p in parts if p.device == d.id)
        if need > d.memory_bytes:
            raise PartitionError(f"the assignment puts {format_bytes(need)} on device {d.id}, which holds "
                                 f"{format_bytes(d.memory_bytes)}", hint="move nodes to other devices")
    first = backend_order(list(devices))[0]
    fallback = [(n, by_id[label[id(n)]].backend) for n in order if by_id[label[id(n)]].backend != first]
    return PartitionPlan(function, parts, list(devices), fallback)


def _check_acyclic_devices(parts: list[Partition]) -> None:
    """Partitions are intervals of one topological order, so their DAG is acyclic; check it anyway."""
    for p in parts:
        if any(d >= p.id for d in p.deps):
            raise PartitionError(f"partition {p.name} depends on a later partition; the assignment forms a cycle")
