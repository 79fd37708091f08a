"""Which backend runs each node: claims, exclusions, epilogues that follow their producer, minimum sizes.

The partitioner's first step (docs/runtime.md, "How a model is split"):

1. **Claims** -- each backend of the device list claims node groups (``Backend.claim``, SDK API 2.1;
   the default claims what its capabilities accept). A backend whose ``claim_level`` is
   ``"high-level"`` claims on the imported function, before lowering; its claim is carried to the
   prepared function by ONNX origin. Every node goes to the first backend of the list that claims it
   and has not refused it (:class:`Exclusions`: partitions refused at compile time, partitions too
   small for the backend).
2. **Epilogues follow their producer** -- an element-wise node of the :data:`EPILOGUES` table (Relu,
   Sigmoid, an Add of a bias, ...) whose operands all come from one other backend's nodes (or are
   constants) goes to that backend when it runs the node, instead of cutting the graph twice.
3. **Blocks stay whole** -- an attention or a layer normalization (:data:`WHOLE_BLOCKS`) that a later
   backend fuses into one kernel, and of which an earlier backend would take only some nodes (the matrix
   products of an attention, say), goes whole to the later backend, so that its fusion survives the cut.
4. **Minimum size** -- a run of nodes smaller than its backend's ``min_partition_nodes`` is not
   offloaded: its nodes are excluded from that backend and go to the next one that runs them.

A node excluded from a backend (too small a run, or refused at compile time) that no later backend
claims is lowered in place (the function was lowered only for what no backend of the list runs, so
a Relu the accelerator took may be one the next device runs as a Max), and the claims are made again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from glow_core.errors import BackendError
from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.kinds import Category
from glow_core.lowering.table import lower_node, lowerings
from glow_core.passes.fusion import FUSIONS
from glow_core.passes.rewrite import Fusion
from glow_core.runtime.errors import PartitionError
from glow_sdk.backend import Backend

#: node id -> backend name
Labels = dict[int, str]

#: claim levels a backend may declare (``Backend.claim_level``)
CLAIM_LEVELS = ("lowered", "high-level")


@dataclass
class Claims:
    """Backend name -> the ids of the nodes of one prepared function it claims (in the device list's order)."""

    nodes: dict[str, set[int]] = field(default_factory=dict)
    #: the high-level claims (backend name -> ONNX origins), to claim again after a node is lowered
    origins: dict[str, set[str]] = field(default_factory=dict)

    def claims(self, backend: str, node: Node) -> bool:
        return id(node) in self.nodes.get(backend, set())


@dataclass
class Exclusions:
    """Backend name -> node ids it must not take (it refused them, or they formed too small a partition)."""

    nodes: dict[str, set[int]] = field(default_factory=dict)

    def add(self, backend: str, nodes: Sequence[Node]) -> None:
        self.nodes.setdefault(backend, set()).update(id(n) for n in nodes)

    def excludes(self, backend: str, node: Node) -> bool:
        return id(node) in self.nodes.get(backend, set())


def _check_level(backend: Backend) -> str:
    level = backend.claim_level
    if level not in CLAIM_LEVELS:
        raise BackendError(f"backend '{backend.name}' declares claim_level {level!r}; choose one of: "
                           + ", ".join(CLAIM_LEVELS))
    return level


def high_level_origins(function: Function, backends: Sequence[Backend]) -> dict[str, set[str]]:
    """For each backend claiming before lowering: the ONNX origins of the nodes it claims in ``function``."""
    out: dict[str, set[str]] = {}
    for b in backends:
        if _check_level(b) == "high-level":
            out[b.name] = {n.origin or n.name for group in b.claim(function) for n in group}
    return out


def collect_claims(function: Function, backends: Sequence[Backend],
                   origins: Mapping[str, set[str]] | None = None) -> Claims:
    """The claims of every backend on the prepared ``function`` (``origins``: the high-level claims)."""
    claims = Claims()
    for b in backends:
        if _check_level(b) == "high-level":
            mine = (origins or {}).get(b.name, set())
            taken = [n for n in function.nodes if (n.origin or n.name) in mine and b.supports(n)]
        else:
            taken = [n for group in b.claim(function) for n in group]
        inside = {id(n) for n in function.nodes}
        bad = [n for n in taken if id(n) not in inside or not b.supports(n)]
        if bad:
            raise BackendError(f"backend '{b.name}' claims {len(bad)} node(s) it does not support or that are "
                               f"not in the function: " + "; ".join(n.where() for n in bad[:5]),
                               hint="claim() may return only nodes of the function it receives that supports() accepts")
        claims.nodes[b.name] = {id(n) for n in taken}
    claims.origins = dict(origins or {})
    return claims


def assign(function: Function, backends: Sequence[Backend], claims: Claims, excluded: Exclusions) -> Labels:
    """Node id -> the first backend that claims it and has not refused it; PartitionError lists the orphans."""
    out: Labels = {}
    orphans: list[Node] = []
    for n in function.nodes:
        name = next((b.name for b in backends if claims.claims(b.name, n) and not excluded.excludes(b.name, n)),
                    None)
        if name is None:
            orphans.append(n)
        else:
            out[id(n)] = name
    if orphans:
        refused = [f"{b}: {len(ids)} node(s)" for b, ids in excluded.nodes.items() if ids]
        listed = "; ".join(n.where() for n in orphans[:8]) + ("; ..." if len(orphans) > 8 else "")
        raise PartitionError(f"no device runs {len(orphans)} node(s): {listed}"
                             + (f" (refused by {', '.join(refused)})" if refused else ""),
                             hint="add a device whose backend runs them (cpu runs every kind)")
    return out


def _sources(node: Node) -> list[Value]:
    """The operands of ``node`` that are computed (not constants, not absent)."""
    return [v for v in node.inputs if v is not None and not isinstance(v, Constant)]


def _single_producer_backend(node: Node, label: Labels) -> str | None:
    """The one backend every computed operand of ``node`` comes from, or None (model inputs, several)."""
    found = {label.get(id(v.producer)) if v.producer is not None else None for v in _sources(node)}
    return found.pop() if len(found) == 1 else None


def _unary(node: Node) -> bool:
    return len(_sources(node)) == 1


def _bias(node: Node) -> bool:
    """A binary arithmetic node with a constant operand (a bias, a scale) or both operands from one side."""
    return 1 <= len(_sources(node)) <= 2


#: epilogue kinds -> the rule a node of that kind must meet to follow its producer's backend; the
#: element-wise activations are added from the kind table (Category.ACTIVATION) by :func:`_epilogue_rule`
EPILOGUES: dict[str, Callable[[Node], bool]] = {
    "Add": _bias, "Sub": _bias, "Mul": _bias, "Div": _bias,
    "Relu": _unary, "Sigmoid": _unary, "Tanh": _unary, "Clip": _unary, "LeakyRelu": _unary,
    "Elu": _unary, "Gelu": _unary, "HardSigmoid": _unary, "HardSwish": _unary, "Exp": _unary, "Erf": _unary,
}


def _epilogue_rule(node: Node) -> Callable[[Node], bool] | None:
    rule = EPILOGUES.get(node.kind.name)
    if rule is None and node.kind.is_(Category.ACTIVATION) and node.kind.is_(Category.ELEMENTWISE):
        return _unary
    return rule


def follow_producers(function: Function, backends: Sequence[Backend], label: Labels, claims: Claims,
                     excluded: Exclusions) -> int:
    """Move each epilogue to its producer's backend when that one runs it (module docstring); how many moved."""
    by_name = {b.name: b for b in backends}
    moved = 0
    for n in function.nodes:  # topological: chains of epilogues follow one after the other
        rule = _epilogue_rule(n)
        if rule is None or not rule(n):
            continue
        src = _single_producer_backend(n, label)
        if src is None or src == label[id(n)] or excluded.excludes(src, n):
            continue
        if claims.claims(src, n) or by_name[src].supports(n):
            label[id(n)] = src
            moved += 1
    return moved


#: fused kinds whose block (several nodes fused into one kernel: an attention, a layer normalization) a later
#: backend of the list keeps whole when an earlier one would take only part of it, so that the later
#: backend's fusion survives the cut (docs/runtime.md, "How a model is partitioned")
WHOLE_BLOCKS = frozenset({"FusedAttention", "FusedLayerNorm"})


def _blocks(function: Function) -> list[Fusion]:
    """The blocks of :data:`WHOLE_BLOCKS` kinds the fusion rules find in ``function``."""
    found = []
    for n in function.nodes:
        for rule in FUSIONS.get(n.kind.name, ()):
            fusion = rule(function, n)
            if fusion is not None and fusion.kind in WHOLE_BLOCKS:
                found.append(fusion)
                break
    return found


def keep_blocks_whole(function: Function, backends: Sequence[Backend], label: Labels, claims: Claims,
                      excluded: Exclusions) -> int:
    """A block split between backends goes whole to the first backend of the list that fuses its kind and
    takes every node of it (:data:`WHOLE_BLOCKS`); how many nodes moved."""
    moved = 0
    for block in _blocks(function):
        where = {label[id(n)] for n in block.nodes}
        if len(where) < 2:
            continue
        owner = next((b.name for b in backends if block.kind in b.supported_kinds()
                      and all(claims.claims(b.name, n) and not excluded.excludes(b.name, n) for n in block.nodes)),
                     None)
        if owner is None:
            continue
        for n in block.nodes:
            moved += label[id(n)] != owner
            label[id(n)] = owner
    return moved


def small_runs(runs: Sequence[tuple[str, list[Node]]], backends: Sequence[Backend]) -> list[tuple[str, list[Node]]]:
    """The runs smaller than their backend's ``min_partition_nodes``."""
    minimum = {b.name: max(1, int(b.min_partition_nodes)) for b in backends}
    return [(b, nodes) for b, nodes in runs if len(nodes) < minimum.get(b, 1)]


def _claimed_later(node: Node, backend: str, backends: Sequence[Backend], claims: Claims,
                   excluded: Exclusions) -> bool:
    names = [b.name for b in backends]
    return any(claims.claims(b, node) and not excluded.excludes(b, node) for b in names[names.index(backend) + 1:])


def _lowerable(node: Node) -> bool:
    return not node.kind.is_(Category.PRIMITIVE) and node.kind.name in lowerings()


#: rounds of lowering nodes no backend claims after a fallback (lowerings may produce high-level kinds)
LOWER_ROUNDS = 16


def fall_back(function: Function, nodes: Sequence[Node], backend: str, backends: Sequence[Backend],
              claims: Claims, excluded: Exclusions) -> bool:
    """Exclude ``nodes`` from ``backend`` so that they go to a later backend of the list; a node no later
    backend claims is lowered in place first (module docstring). False, changing nothing, when a node can
    neither move nor be lowered."""
    stuck = [n for n in nodes if not _claimed_later(n, backend, backends, claims, excluded)]
    if not all(_lowerable(n) for n in stuck):
        return False
    excluded.add(backend, nodes)
    if not stuck:
        return True
    for n in stuck:
        lower_node(function, n)
    lower_unclaimed(function, backends, claims)
    return True


def lower_unclaimed(function: Function, backends: Sequence[Backend], claims: Claims) -> None:
    """Lower, in place, the nodes no backend claims (a backend may support a kind it does not claim, so the
    function was not lowered for it), then claim again, until every node is claimed or none can be lowered."""
    for _ in range(LOWER_ROUNDS):
        claims.nodes = collect_claims(function, backends, claims.origins).nodes
        orphans = [n for n in function.nodes if not any(claims.claims(b.name, n) for b in backends) and _lowerable(n)]
        if not orphans or not any([lower_node(function, n) for n in orphans]):
            return
