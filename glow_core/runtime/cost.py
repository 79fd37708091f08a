"""Cost estimates: running nodes on a backend, moving tensors between devices, a whole plan.

A backend may estimate the seconds one node takes on its device (``Backend.estimate_cost``, SDK API
2.1); one without the hook is estimated at :data:`DEFAULT_SECONDS_PER_COST` per unit of
:func:`glow_core.runtime.graphcut.node_cost` (elements moved plus multiply-adds). Moving a tensor
costs the producer's device its ``DeviceInfo.transfer_seconds`` out to the host and the consumer's
its transfer in (a device without a bandwidth computes in host memory: free).

:func:`costly_runs` is the partitioner's cost step: a run of one backend's nodes whose boundary
tensors cost more to move than running it on the next backend of the list costs there is not
offloaded (it goes to that backend, :func:`glow_core.runtime.assign.fall_back`). It only applies
to backends that estimate costs, so a backend without the hook is partitioned as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from glow_core.ir.graph import Function, Node, Value
from glow_core.runtime.assign import Claims, Exclusions, Labels
from glow_core.runtime.graphcut import boundary, node_cost
from glow_sdk.backend import Backend, DeviceInfo

#: seconds per unit of node_cost for a backend without estimate_cost (20 G units/s: the order of a
#: two-core vector CPU on convolutions; only the ratios to the backends' own estimates matter)
DEFAULT_SECONDS_PER_COST = 5e-11
#: the label of the host (model inputs and outputs live there)
HOST = ""


@dataclass(frozen=True)
class CostModel:
    """The backends of a device list with their devices' transfer figures."""

    backends: Mapping[str, Backend]
    devices: Mapping[str, DeviceInfo]
    #: backend without a cost hook -> seconds per unit of node_cost (calibrated: glow_core.runtime.measure);
    #: a backend not listed gets DEFAULT_SECONDS_PER_COST
    seconds_per_cost: Mapping[str, float] = field(default_factory=dict)
    #: (backend, node id) -> (node, seconds): the estimates made so far (the node kept, so its id stays its own)
    memo: dict[tuple[str, int], tuple[Node, float]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, backends: Sequence[Backend]) -> CostModel:
        return cls({b.name: b for b in backends}, {b.name: b.create_device() for b in backends})

    def estimates(self, backend: str) -> bool:
        """Whether ``backend`` implements the cost hook."""
        return type(self.backends[backend]).estimate_cost is not Backend.estimate_cost

    def informed(self) -> bool:
        """Whether any backend estimates costs or any device declares a transfer bandwidth."""
        return any(self.estimates(b) or self.devices[b].bandwidth_bytes_per_s is not None for b in self.backends)

    def node_seconds(self, backend: str, node: Node) -> float:
        known = self.memo.get((backend, id(node)))
        if known is not None and known[0] is node:
            return known[1]
        cost = self.backends[backend].estimate_cost(node)
        seconds = float(cost) if cost is not None else \
            node_cost(node) * self.seconds_per_cost.get(backend, DEFAULT_SECONDS_PER_COST)
        self.memo[(backend, id(node))] = (node, seconds)
        return seconds

    def run_seconds(self, backend: str, nodes: Sequence[Node]) -> float:
        return sum(self.node_seconds(backend, n) for n in nodes)

    def edge_seconds(self, src: str, dst: str, nbytes: int) -> float:
        """Moving ``nbytes`` from the device of ``src`` to that of ``dst`` (HOST: the host)."""
        if src == dst:
            return 0.0
        out = self.devices[src].transfer_seconds(nbytes) if src != HOST else 0.0
        return out + (self.devices[dst].transfer_seconds(nbytes) if dst != HOST else 0.0)


def _consumers(function: Function, value: Value, inside: set[int]) -> list[Node]:
    return [u for u in value.user_nodes() if id(u) not in inside]


def boundary_seconds(model: CostModel, function: Function, nodes: Sequence[Node], where: str,
                     label: Mapping[int, str]) -> float:
    """What moving the boundary tensors of ``nodes`` costs when they run on backend ``where``."""
    inside = {id(n) for n in nodes}
    ins, outs = boundary(function, nodes)
    total = 0.0
    for v in ins:
        src = label.get(id(v.producer), HOST) if v.producer is not None else HOST
        total += model.edge_seconds(src, where, v.type.nbytes)
    model_outs = {id(v) for v in function.output_values()}
    for o in outs:
        dsts = {label[id(u)] for u in _consumers(function, o, inside)} | ({HOST} if id(o) in model_outs else set())
        total += sum(model.edge_seconds(where, d, o.type.nbytes) for d in dsts)
    return total


def _alternative(nodes: Sequence[Node], backend: str, backends: Sequence[Backend], claims: Claims,
                 excluded: Exclusions) -> str | None:
    """The one later backend of the list that would take every node of ``nodes``, or None."""
    names = [b.name for b in backends]
    later = names[names.index(backend) + 1:]
    found = {next((b for b in later if claims.claims(b, n) and not excluded.excludes(b, n)), None) for n in nodes}
    return found.pop() if len(found) == 1 else None


def costly_runs(model: CostModel, function: Function, runs: Sequence[tuple[str, list[Node]]], label: Labels,
                backends: Sequence[Backend], claims: Claims,
                excluded: Exclusions) -> list[tuple[str, list[Node], str]]:
    """(backend, nodes, reason) for each run that is cheaper on the next backend, moves included."""
    out = []
    for backend, nodes in runs:
        if not model.estimates(backend):
            continue
        alt = _alternative(nodes, backend, backends, claims, excluded)
        if alt is None:
            continue
        here = model.run_seconds(backend, nodes) + boundary_seconds(model, function, nodes, backend, label)
        there = model.run_seconds(alt, nodes) + boundary_seconds(model, function, nodes, alt, label)
        if there < here:
            out.append((backend, nodes, f"moving its tensors costs more than running it on {alt}"))
    return out


@dataclass(frozen=True)
class PlanEstimate:
    """A plan's estimated time per request, run one partition after the other."""

    compute_s: float
    transfer_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.transfer_s


def estimate_plan(model: CostModel, function: Function, parts: Sequence[tuple[str, Sequence[Node]]]) -> PlanEstimate:
    """The estimate of running ``parts`` (backend, nodes) in order, with the moves the executor makes: a
    tensor crosses to the host once (its host copy is kept for every reader there), and is copied into each
    partition of another backend that reads it (a partition reads what its own backend's earlier partitions
    left on the device without a move)."""
    label = {id(n): b for b, nodes in parts for n in nodes}
    compute = sum(model.run_seconds(b, nodes) for b, nodes in parts)
    model_outs = {id(v) for v in function.output_values()}
    moved = 0.0
    for b, nodes in parts:
        inside = {id(n) for n in nodes}
        ins, outs = boundary(function, nodes)
        for v in ins:
            src = label.get(id(v.producer), HOST) if v.producer is not None else HOST
            moved += model.edge_seconds(HOST, b, v.type.nbytes) if src != b else 0.0
        for o in outs:
            dsts = {label[id(u)] for u in _consumers(function, o, inside)} | ({HOST} if id(o) in model_outs else set())
            moved += model.edge_seconds(b, HOST, o.type.nbytes) if dsts - {b} else 0.0
    return PlanEstimate(compute, moved)
