"""Every batch size from one compile: a model whose samples never meet runs a batch one sample at a time.

Most networks treat the samples of a batch independently: convolutions, pooling, normalization in
inference, matrix products whose rows are samples, element-wise arithmetic. For such a model, a batch of
N is N runs of the batch-1 network, and the outputs are its N results one after another along axis 0,
exactly (each sample's numbers are computed by the same code either way). So a
:class:`~glow_core.pipeline.specialize.DynamicNetwork` whose inputs have a symbolic leading axis compiles
the batch-1 network once and runs any batch size with it, instead of compiling one network per batch size.

Whether a model is separable is proved, not assumed, from its graph imported at batch 1 and at batch 2
(:func:`check_separable`):

- the two graphs have the same nodes and the same constants (a constant that depends on the batch size,
  such as a shape computation, makes the model not separable);
- every value is either **batched** (its leading axis is the batch's multiple, 1 -> 2, the other axes
  equal: in memory, one contiguous block per sample, as a reshape keeps) or **unbatched** (the same type at
  both sizes, computed from constants alone, with the same attributes);
- every node that reads a batched value produces batched values, and its kind is known to compute each
  block from the same block of its batched operands: :data:`BATCH_RULES`, one rule per kind (an element-wise
  kind whose batched operands have the result's rank; a convolution of a batched input with unbatched
  weights; a softmax or reduction that leaves axis 0 alone; a transpose that keeps axis 0 first; a matrix
  product whose rows are samples; ...). A kind without a rule is not separable (so new kinds are safe);
- every graph output is batched.

A model that is not separable (or whose batched inputs are fed different leading sizes) is compiled per
signature as before; :attr:`Separability.reason` says why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from glow_core.errors import GlowError
from glow_core.importer.symbols import ModelSymbols
from glow_core.ir.graph import Function, Node
from glow_core.ir.kinds import Category, KindTable
from glow_core.ir.types import TensorType

#: (node at batch 1, which operands are batched) -> does the node treat each batch block independently?
BatchRule = Callable[[Node, Sequence[bool]], bool]
BATCH_RULES = KindTable("batch rules")


@dataclass(frozen=True)
class Separability:
    """Can a batch run one sample at a time? ``reason`` is None when it can, else why not."""

    reason: str | None

    @property
    def separable(self) -> bool:
        return self.reason is None


def _rank(node: Node) -> int:
    return node.outputs[0].type.rank


def _axes_leave_0(axes: Sequence[int], rank: int) -> bool:
    return bool(axes) and all(a % max(rank, 1) != 0 for a in axes)


def _axis_not_0(name: str = "axis") -> BatchRule:
    return lambda n, b: n.attrs[name] % max(n.inputs[0].type.rank, 1) != 0


def _elementwise(n: Node, batched: Sequence[bool]) -> bool:
    """Batched operands have the result's rank, so their axis 0 is the result's axis 0."""
    return all(v is not None and v.type.rank == _rank(n) for v, b in zip(n.inputs, batched) if b)


def _first_only(n: Node, batched: Sequence[bool]) -> bool:
    """The data operand (the first) batched, the others (weights, statistics) not."""
    return batched[0] and not any(batched[1:])


def _first_and(*also: int) -> BatchRule:
    """The first operand batched; the operands ``also`` may be batched too (a residual, a mask)."""
    return lambda n, b: b[0] and not any(x for i, x in enumerate(b[1:], 1) if i not in also)


def _product(n: Node, batched: Sequence[bool]) -> bool:
    """LHS batched with rank >= 2 (its rows or its leading batch axis are samples); RHS constant-like, or batched
    with the same rank >= 3 (a product per sample); a bias may be batched."""
    lhs, rhs = n.inputs[0], n.inputs[1]
    if not batched[0] or lhs is None or rhs is None or lhs.type.rank < 2:
        return False
    return not batched[1] or (rhs.type.rank == lhs.type.rank >= 3)


def _gemm(n: Node, batched: Sequence[bool]) -> bool:
    return batched[0] and not batched[1] and not n.attrs["trans_a"]


def _gather(n: Node, batched: Sequence[bool]) -> bool:
    axis = n.attrs["axis"] % max(n.inputs[0].type.rank, 1)
    if batched[0]:
        return axis != 0 and not batched[1]
    return axis == 0 and batched[1]  # rows of a table picked by batched indices


def _slice(n: Node, batched: Sequence[bool]) -> bool:
    return n.attrs["starts"][0] == 0 and n.attrs["steps"][0] == 1


def _pad(n: Node, batched: Sequence[bool]) -> bool:
    pads, rank = n.attrs["pads"], n.inputs[0].type.rank
    return _first_only(n, batched) and pads[0] == 0 and pads[rank] == 0


def _resize(n: Node, batched: Sequence[bool]) -> bool:
    return _first_only(n, batched) and n.attrs["coordinate_transformation_mode"] != "tf_crop_and_resize"


for _kind in ("Conv", "ConvTranspose", "MaxPool", "AvgPool", "LpPool", "BatchNormalization",
              "InstanceNormalization", "LRN", "DepthToSpace", "SpaceToDepth", "FusedLayerNorm", "GroupNormalization"):
    BATCH_RULES.add(_kind, _first_only)
for _kind in ("LayerNormalization", "RMSNormalization"):  # over the axes from `axis` on
    BATCH_RULES.add(_kind, lambda n, b: _first_only(n, b) and _axis_not_0()(n, b))
BATCH_RULES.add("MeanVarianceNormalization",
                lambda n, b: _first_only(n, b) and _axes_leave_0(n.attrs["axes"], n.inputs[0].type.rank))
BATCH_RULES.add("FusedConv", _first_and(3))
BATCH_RULES.add("FusedAttention", lambda n, b: all(b[:3]) and n.inputs[0].type.rank >= 3)
for _kind in ("MatMul", "FusedMatMul", "DequantMatMul"):
    BATCH_RULES.add(_kind, _product)
BATCH_RULES.add("Gemm", _gemm)
for _kind in ("Reshape", "Identity", "Dropout", "Broadcast"):
    BATCH_RULES.add(_kind, lambda n, b: True)  # memory order kept: one block per sample (see the module doc)
BATCH_RULES.add("Transpose", lambda n, b: n.attrs["perm"][0] == 0)
for _kind in ("Softmax", "LogSoftmax", "Hardmax", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
              "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"):
    BATCH_RULES.add(_kind, lambda n, b: _axes_leave_0(n.attrs["axes"], n.inputs[0].type.rank))
for _kind in ("Concat", "Split", "ArgMax", "ArgMin", "TopK", "CumSum"):
    BATCH_RULES.add(_kind, _axis_not_0())
BATCH_RULES.add("Gather", _gather)
BATCH_RULES.add("Slice", _slice)
BATCH_RULES.add("Pad", _pad)
BATCH_RULES.add("Resize", _resize)
BATCH_RULES.add("Tile", lambda n, b: n.attrs["repeats"][0] == 1)


def _rule(node: Node) -> BatchRule | None:
    rule = BATCH_RULES.get(node.kind.name)
    if rule is None and Category.ELEMENTWISE in node.kind.categories:
        return _elementwise
    return rule


def _classify(one: TensorType, two: TensorType) -> bool | None:
    """True: batched (axis 0 doubles, the rest equal); False: unbatched (the same type); None: neither."""
    if one == two:
        return False
    if one.elem == two.elem and one.rank == two.rank >= 1 and one.shape[0] >= 1 and \
            two.shape[0] == 2 * one.shape[0] and one.shape[1:] == two.shape[1:]:
        return True
    return None


def _same_constants(one: Function, two: Function) -> str | None:
    if len(one.constants) != len(two.constants):
        return "the graph has other constants at batch 2 than at batch 1"
    for a, b in zip(one.constants, two.constants):
        if a.type != b.type or not np.array_equal(a.payload, b.payload, equal_nan=True):
            return f"constant '{a.name}' depends on the batch size (a shape computed from the inputs)"
    return None


def _check_node(n1: Node, n2: Node, state: dict[int, bool]) -> str | None:
    """The reason ``n1`` (batch 1) / ``n2`` (batch 2) breaks separability, or None; records its outputs."""
    if n1.kind is not n2.kind or len(n1.outputs) != len(n2.outputs):
        return f"{n1.where()} differs between batch 1 and batch 2"
    batched = [state.get(id(v), False) if v is not None else False for v in n1.inputs]
    kinds = [_classify(o1.type, o2.type) for o1, o2 in zip(n1.outputs, n2.outputs)]
    if not any(batched):
        if any(k is not False for k in kinds) or n1.attrs != n2.attrs:
            return f"{n1.where()} computes something else at batch 2 from constants alone"
    elif not all(kinds):
        return f"{n1.where()} reads batched values but its result is not one block per sample"
    else:
        rule = _rule(n1)
        if rule is None:
            return f"{n1.where()}: no batch rule for {n1.kind.name} (it may mix the samples)"
        if not rule(n1, batched):
            return f"{n1.where()} mixes the samples of a batch ({n1.kind.name} over the batch axis)"
    for o, k in zip(n1.outputs, kinds):
        state[id(o)] = bool(k)
    return None


def check_separable(one: Function, two: Function, batched_inputs: set[str]) -> Separability:
    """Is the model whose graphs at batch 1 (``one``) and batch 2 (``two``) are given separable by samples,
    the inputs named in ``batched_inputs`` carrying the batch on axis 0? (Module doc.)"""
    if len(one.nodes) != len(two.nodes) or len(one.inputs) != len(two.inputs):
        return Separability("the graph has other nodes at batch 2 than at batch 1")
    reason = _same_constants(one, two)
    if reason is not None:
        return Separability(reason)
    state: dict[int, bool] = {}
    for p1, p2 in zip(one.inputs, two.inputs):
        kind = _classify(p1.type, p2.type)
        if kind is None or kind != (p1.name in batched_inputs):
            return Separability(f"input '{p1.name}' is not batched on its leading axis")
        state[id(p1)] = kind
    for n1, n2 in zip(one.nodes, two.nodes):
        reason = _check_node(n1, n2, state)
        if reason is not None:
            return Separability(reason)
    for name, v in one.outputs:
        if not state.get(id(v), False):
            return Separability(f"output '{name}' is not one block per sample")
    return Separability(None)


def leading_symbols(symbols: ModelSymbols) -> set[str]:
    """The inputs whose leading axis is a symbol the dims leave open (where a batch goes)."""
    out = set()
    for name, inp in symbols.inputs.items():
        first = inp.dims[0] if inp.dims else None
        if first is not None and first.size is None and not isinstance(symbols.dims.get(first.symbol or ""), int):
            out.add(name)
    return out


#: imports the model at the given input shapes (no compile)
Importer = Callable[[dict[str, tuple[int, ...]]], Function]


class BatchSplitter:
    """Whether a batch can run one sample at a time, decided once per sample shape (thread-safe)."""

    def __init__(self, symbols: ModelSymbols, importer: Importer) -> None:
        self.batched = leading_symbols(symbols)
        self._importer = importer
        self._known: dict[Hashable, Separability] = {}
        self._lock = threading.Lock()

    def count(self, arrays: Mapping[str, np.ndarray]) -> int:
        """The batch size of ``arrays``: the leading size of the batched inputs (1 when they differ)."""
        sizes = {arrays[n].shape[0] for n in self.batched if n in arrays and arrays[n].ndim}
        return sizes.pop() if len(sizes) == 1 else 1

    def separability(self, arrays: Mapping[str, np.ndarray], extra: Hashable = ()) -> Separability:
        """Can ``arrays`` run one sample at a time (``extra``: what else tells models apart, e.g. the outputs)?"""
        names = [n for n in self.batched if n in arrays and arrays[n].ndim]
        if not names or len({arrays[n].shape[0] for n in names}) != 1:
            return Separability("no batch to split: no input's leading axis is an open symbol of one size")
        at = {k: {n: ((k, *a.shape[1:]) if n in names else tuple(a.shape)) for n, a in arrays.items()}
              for k in (1, 2)}
        key = (extra, tuple(sorted(at[1].items())))
        with self._lock:
            known = self._known.get(key)
        if known is None:
            try:
                known = check_separable(self._importer(at[1]), self._importer(at[2]), set(names))
            except GlowError as e:
                known = Separability(f"the model does not import at batch 1 and 2: {e}")
            with self._lock:
                self._known[key] = known
        return known


def run_by_sample(run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], feeds: dict[str, np.ndarray],
                  batched: set[str], count: int) -> dict[str, np.ndarray]:
    """``count`` runs of the batch-1 network ``run``, sample i of each batched input in run i, the outputs
    concatenated along axis 0."""
    results: list[dict[str, np.ndarray]] = []
    for i in range(count):
        one = {n: (a[i:i + 1] if n in batched else a) for n, a in feeds.items()}
        results.append(run(one))
    return {name: np.concatenate([r[name] for r in results], axis=0) for name in results[0]}


__all__ = ["BATCH_RULES", "BatchSplitter", "Separability", "check_separable", "leading_symbols", "run_by_sample"]

