"""``batch-shared-matmuls``: matrix products of a few rows that share one large constant weight.

An unrolled recurrent layer (an LSTM exported step by step, as CRNN text recognizers are)
multiplies every time step's input by the same weight: ``T`` products ``x_t @ W`` of one row each.
Each such product reads all of ``W`` once for one row of output, so for a weight larger than the
caches it costs the memory traffic of ``W``, ``T`` times over. When the rows do not depend on
each other's products (the inputs of every step are known before the recurrence starts) the pass
computes them as one product::

    y_i = MatMul(a_i, W)  (i = 1..n)   ->   y = MatMul(Concat(a_1, ..., a_n, axis 0), W)
                                            y_i = Slice(y, rows of a_i)

(``FusedMatMul`` likewise, with the same bias and activation for every member.) Every element is
the same dot product as before; the weight is read once. A member is left out when its left
operand depends on the product of a member taken before it (the recurrent half of the cell:
``h_t @ R`` needs ``h_{t-1}``), so the batched product never waits for its own result. The nodes
are then put back in a topological order that keeps the original order wherever it can.

Only 2-D float products whose weight is a constant of at least :data:`MIN_WEIGHT_BYTES` and whose
members have at most :data:`MAX_MEMBER_ROWS` rows are batched (smaller weights stay in cache, larger
left operands already reuse the weight), at most :data:`MAX_BATCH_ROWS` rows per batch.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable

from glow_core.ir.graph import Constant, Function, Node, NodeOutput
from glow_core.ir.types import FLOAT_KINDS
from glow_core.passes.rewrite import erase_if_dead, replace_value
from glow_core.passinfra import PassContext, graph_pass

#: weights smaller than this stay in the caches between the separate products
MIN_WEIGHT_BYTES = 128 * 1024
#: members with more rows than this already reuse each weight element enough
MAX_MEMBER_ROWS = 16
#: rows of one batched product (bounds the concatenated operand)
MAX_BATCH_ROWS = 256
#: the kinds batched: a matrix product with its weight as operand 1 (FusedMatMul: bias operand 2)
KINDS = ("MatMul", "FusedMatMul")


def _group_key(node: Node) -> Hashable | None:
    """What members of one batch share (kind, weight, bias, attributes), or None when ``node`` is no candidate."""
    if node.kind.name not in KINDS:
        return None
    a, w = node.inputs[0], node.inputs[1]
    if a is None or not isinstance(w, Constant) or len(a.type.shape) != 2 or len(w.type.shape) != 2:
        return None
    if a.type.elem not in FLOAT_KINDS or w.type.nbytes < MIN_WEIGHT_BYTES or a.type.shape[0] > MAX_MEMBER_ROWS:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    n = w.type.shape[1]
    if bias is not None and (not isinstance(bias, Constant) or bias.type.shape not in ((n,), (1, n))):
        return None  # a per-row bias would have to be concatenated too
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
    return (node.kind.name, id(w), id(bias), a.type.elem, a.type.scale, a.type.offset, attrs)


def _descendants(node: Node) -> set[int]:
    """ids of ``node`` and every node that reads, directly or not, one of its results."""
    seen = {id(node)}
    stack = [node]
    while stack:
        for out in stack.pop().outputs:
            for user in out.user_nodes():
                if id(user) not in seen:
                    seen.add(id(user))
                    stack.append(user)
    return seen


def _batches(fn: Function) -> list[list[Node]]:
    """Groups of at least two independent members, in node order."""
    groups: dict[Hashable, list[list[Node]]] = {}
    reach: dict[Hashable, set[int]] = {}
    for node in fn.nodes:
        key = _group_key(node)
        if key is None:
            continue
        a = node.inputs[0]
        if isinstance(a, NodeOutput) and id(a.node) in reach.get(key, set()):
            continue  # depends on an earlier member's product
        chunks = groups.setdefault(key, [[]])
        if sum(m.inputs[0].type.shape[0] for m in chunks[-1]) + a.type.shape[0] > MAX_BATCH_ROWS:  # type: ignore[union-attr]
            chunks.append([])
        chunks[-1].append(node)
        reach.setdefault(key, set()).update(_descendants(node))
    return [c for chunks in groups.values() for c in chunks if len(c) > 1]


def _batch(fn: Function, members: list[Node]) -> list[Node]:
    """Replace ``members`` by one product; returns the new nodes (appended, to be ordered)."""
    first = members[0]
    lhs = [m.inputs[0] for m in members]
    cat = fn.create("Concat", lhs, {"axis": 0}, name=f"{first.name}.batched.concat", origin=first.origin)
    prod = fn.create(first.kind.name, [cat.result, *first.inputs[1:]], dict(first.attrs),
                     name=f"{first.name}.batched", origin=first.origin)
    new = [cat, prod]
    row = 0
    n = prod.result.type.shape[1]
    for m in members:
        rows = m.result.type.shape[0]
        s = fn.create("Slice", [prod.result], {"starts": (row, 0), "sizes": (rows, n), "steps": (1, 1)},
                      name=f"{m.name}.rows", origin=m.origin)
        new.append(s)
        replace_value(fn, m.result, s.result)
        erase_if_dead(fn, m)
        row += rows
    return new


def _reorder(fn: Function, placed: Iterable[tuple[Node, float]]) -> None:
    """A topological order of ``fn.nodes``: the original one, with each new node as early as its
    operands allow (``placed``: new node -> the position it should take, among the old ones)."""
    rank = {id(n): float(i) for i, n in enumerate(fn.nodes)}
    for k, (n, pos) in enumerate(placed):
        rank[id(n)] = pos + 1e-6 * (k + 1)
    by_id = {id(n): n for n in fn.nodes}
    waiting: dict[int, int] = {}
    for n in fn.nodes:
        waiting[id(n)] = len({id(v.node) for v in n.inputs if isinstance(v, NodeOutput)})
    ready = [(rank[i], i) for i, w in waiting.items() if w == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, i = heapq.heappop(ready)
        node = by_id[i]
        order.append(node)
        for user in {id(u): u for o in node.outputs for u in o.user_nodes()}.values():
            waiting[id(user)] -= 1
            if waiting[id(user)] == 0:
                heapq.heappush(ready, (rank[id(user)], id(user)))
    assert len(order) == len(fn.nodes), "batch-shared-matmuls made a cycle"
    fn.nodes[:] = order


@graph_pass("batch-shared-matmuls")
def batch_shared_matmuls(fn: Function, ctx: PassContext) -> bool:
    """One product for the few-row products that share a large constant weight (see the module doc)."""
    batches = _batches(fn)
    if not batches:
        return False
    position = {id(n): float(i) for i, n in enumerate(fn.nodes)}
    placed: list[tuple[Node, float]] = []
    for members in batches:
        at = position[id(members[0])] - 0.5
        placed.extend((n, at) for n in _batch(fn, members))
    _reorder(fn, placed)
    return True
