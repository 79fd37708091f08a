"""The float64 rule: is a disputed float32 element determined in float32 at all?

When glow's float32 outputs differ from the float32 reference's, the judge
evaluates the model again with ``onnx.reference`` in float64
(:func:`run_reference_float64`): every float32 input, initializer, constant,
declared type and float32 type attribute (``Cast.to``, ``dtype``,
``stash_type``, ...) of the model and its subgraphs becomes float64 (a ``stash_type`` left at its float32
default is set to float64), and the
float32 input values are widened exactly. Models with float64 tensors or
functions of their own are not re-evaluated (they stay ``wrong``).

The float64 value stands for the exact value of the whole graph on the given
inputs. Intermediate tensors are not rounded to float32 between nodes: glow,
like onnxruntime, folds constants across nodes (a BatchNormalization and the
scale layer after it into one factor, into the Conv before them), and such a
fold decides whether a node's float32 result would have overflowed; a judge
rounding every node's result would call those folds wrong.

It evaluates the model once as it is (``v64``), then :data:`PAIRS` antithetic
pairs of times with every float input and initializer element ``a`` replaced by
``a * (1 + f * 2**-24)`` and ``a * (1 - f * 2**-24)`` (``f`` random: a random
sign times a magnitude in [0.5, 1]). An element's *float32 uncertainty* ``s`` is
the largest, over the pairs, of the smaller of the pair's two changes of the
element: how much float32 rounding of the operands moves it (the smaller of
the two, so that a step function such as Floor of an exact integer, moved
one way only, gets no uncertainty; 0 when a perturbed run fails or changes
shapes).

Ops that compute constants of their own add their rounding to ``s``
(:data:`OP_SPREAD`): a DFT's twiddle factors are cosines and sines
that float32 (and float64) round by up to a unit roundoff, so a sum whose exact
twiddles are 0 (``sin(pi * n)``) is ``3e38 * 6e-17`` in float64 and another
residue in each float32 evaluation. For a DFT computing a graph output from a
graph input or initializer, each output element gets ``u * sum |x|`` over the
transformed axis (and the real / imaginary axis) added to ``s``. The spec does
not fix the order of a sum (MatMul "behaves like numpy.matmul", whose order is
its BLAS's): where a MatMul computing a graph output from graph inputs or
initializers has positive terms adding up past the float32 range (or negative
terms below it), some order overflows (the terms in that order, or a product
rounded to float32 before it is added), and ``s`` is infinite there: glow's
value must then be ``v64`` within the tolerance, or not finite (below).

Reference kernels that compute in float32 whatever their input type (its
LinearAttention casts query, key, value and its state to float32) would give
the float32 evaluation again; the float64 evaluation runs kernels of its own
for them (:mod:`glow_tools.fuzz.float64_kernels`).

A disputed element (glow and the float32 reference differ beyond the judge's
tolerance) is **not determined in float32** when both hold:

1. glow's value is in the float32 rounding of the interval
   ``v64 ± (atol + rtol * |v64| + s)`` (rounding is monotone, so: between the
   float32 values of its ends; a value beyond the float32 range rounds to
   ``±inf``, so an overflowing ``v64`` admits only the infinity unless the
   interval reaches back into range; NaN only where ``v64`` is NaN): glow gives
   the exactly evaluated answer, up to the tolerance and float32 rounding.
   Where ``s`` itself is past the float32 range (operands of 3e38 cancelling:
   the element's float32 evaluation overflows in some order), the interval is
   not widened by ``s``: glow's value must be ``v64`` within the tolerance, or
   not finite;
2. and float32 cannot pin the element down: the float32 reference's own value
   is outside that interval (its float32 evaluation order overflowed or
   cancelled where the exact evaluation does not), or ``s`` exceeds the
   tolerance ``atol + rtol * |v64|`` (float32 rounding of the operands alone
   moves the element by more than the judge allows).

3. and onnxruntime (when it answered, with an output of the same type and
   shape) does not agree with the float32 reference on the element: a
   difference on which onnx.reference and onnxruntime agree is never excused,
   whatever the float64 evaluation gives (two float32 evaluations agreeing is
   the answer float32 determines in practice; glow must give it), unless
   glow gives there the node-wise rounded evaluation's value (every node's
   correctly rounded float32 result, up to the rounding of the constants
   its op computes itself, :func:`own_spread`: a DFT's cancelling terms leave
   a residue of its twiddles' rounding) and the reference does not: two engines
   summing a reduction in similar orders share their rounding
   (:mod:`glow_tools.fuzz.float64_rounded`).

A case whose disputed elements are all of that kind is ``unjudged``; any other
disputed element (or a disputed integer, an output of another float type, shape
or dtype, or a sequence output) keeps the case ``wrong``. A glow answer far from the float64 value stays
wrong whatever the float32 reference gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from glow_tools.fuzz.cases import MODEL_FILE, read_inputs
from glow_tools.fuzz.runners import _real_input_names, default_opset
from glow_tools.nodetests import ATOL, RTOL

#: float32's unit roundoff: the relative size of the perturbation
UNIT_ROUNDOFF = 2.0**-24
#: integer attributes that name an element type (1 = FLOAT becomes 11 = DOUBLE)
TYPE_ATTRS = frozenset({"to", "dtype", "stash_type", "output_dtype"})
FLOAT, DOUBLE = 1, 11
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: antithetic pairs of perturbed evaluations (each pair: + and - the same random perturbation)
PAIRS = 3


def _widen_type(tp: Any) -> None:
    which = tp.WhichOneof("value")
    if which == "tensor_type" and tp.tensor_type.elem_type == FLOAT:
        tp.tensor_type.elem_type = DOUBLE
    elif which in ("sequence_type", "optional_type"):
        _widen_type(getattr(tp, which).elem_type)


def _widen_tensor(t: Any) -> None:
    from onnx import numpy_helper

    if t.data_type != FLOAT:
        return
    wide = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)
    t.CopyFrom(wide)


def _default_stash(node: Any) -> None:
    """A node whose schema has a ``stash_type`` (default float32: GroupNormalization, LayerNormalization) and
    that does not set it computes its first stage in float32 whatever its inputs: it gets float64 explicitly."""
    from onnx import defs, helper

    if node.domain not in ("", "ai.onnx") or any(a.name == "stash_type" for a in node.attribute):
        return
    try:
        schema = defs.get_schema(node.op_type)
    except Exception:  # noqa: BLE001  (not a standard op: nothing to widen)
        return
    if "stash_type" in schema.attributes:
        node.attribute.append(helper.make_attribute("stash_type", DOUBLE))


def _widen_attrs(node: Any) -> None:
    from onnx import AttributeProto, helper

    _default_stash(node)
    for a in list(node.attribute):
        if a.type == AttributeProto.INT and a.name in TYPE_ATTRS and a.i == FLOAT:
            a.i = DOUBLE
        elif a.type == AttributeProto.TENSOR:
            _widen_tensor(a.t)
        elif a.type == AttributeProto.GRAPH:
            _widen_graph(a.g)
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                _widen_graph(g)
        elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
            values = [a.f] if a.name == "value_float" else list(a.floats)
            dims = [] if a.name == "value_float" else [len(values)]
            wide = helper.make_attribute("value", helper.make_tensor("value", DOUBLE, dims, values))
            node.attribute.remove(a)
            node.attribute.append(wide)


def _widen_graph(g: Any) -> None:
    for v in (*g.input, *g.output, *g.value_info):
        _widen_type(v.type)
    for t in g.initializer:
        _widen_tensor(t)
    for n in g.node:
        _widen_attrs(n)


def widen_model(model: Any) -> Any:
    """A copy of ``model`` computing in float64 where it computed in float32."""
    import onnx

    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _widen_graph(wide.graph)
    return wide


def _perturbed(model: Any, factors: dict[str, np.ndarray], direction: float) -> Any:
    """A copy of the widened ``model`` whose float64 initializers are multiplied by ``1 + direction * factors * u``."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name in factors:
            a = numpy_helper.to_array(t) * (1.0 + direction * factors[t.name] * UNIT_ROUNDOFF)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    return m


def _evaluate(model: Any, names: Sequence[str], inputs: Sequence[np.ndarray], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    from glow_tools.fuzz.float64_kernels import FLOAT64_KERNELS
    from glow_tools.fuzz.reference_fixes import new_ops

    with np.errstate(all="ignore"):
        outs = ReferenceEvaluator(model, new_ops=new_ops(opset) + FLOAT64_KERNELS).run(
            None, dict(zip(names, inputs)))
    return [np.asarray(o) for o in outs]


def _spread(base: list[np.ndarray], up: list[np.ndarray] | None, down: list[np.ndarray] | None) -> list[np.ndarray]:
    """Per element, the smaller of the two antithetic runs' changes (0 where a run failed or changed shapes)."""
    spreads = [np.zeros(b.shape) for b in base]
    if up is None or down is None or not len(up) == len(down) == len(base):
        return spreads
    for k, (b, u, d) in enumerate(zip(base, up, down)):
        if not (b.dtype.kind == u.dtype.kind == d.dtype.kind == "f" and b.shape == u.shape == d.shape):
            continue
        with np.errstate(all="ignore"):
            b64 = b.astype(np.float64)
            moved = np.fmin(np.abs(u.astype(np.float64) - b64), np.abs(d.astype(np.float64) - b64))
        spreads[k] = np.where(np.isfinite(moved), moved, 0.0)
    return spreads


def _type_is_double(tp: Any) -> bool:
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return tp.tensor_type.elem_type == DOUBLE
    return which in ("sequence_type", "optional_type") and _type_is_double(getattr(tp, which).elem_type)


def uses_double(g: Any) -> bool:
    """Whether graph ``g`` (or a subgraph) has float64 tensors of its own (the float64 rule then does not apply)."""
    from onnx import AttributeProto

    if any(_type_is_double(v.type) for v in (*g.input, *g.output, *g.value_info)):
        return True
    if any(t.data_type == DOUBLE for t in g.initializer):
        return True
    for n in g.node:
        for a in n.attribute:
            if (a.type == AttributeProto.INT and a.name in TYPE_ATTRS and a.i == DOUBLE) or \
                    (a.type == AttributeProto.TENSOR and a.t.data_type == DOUBLE) or \
                    (a.type == AttributeProto.GRAPH and uses_double(a.g)) or \
                    (a.type == AttributeProto.GRAPHS and any(uses_double(x) for x in a.graphs)):
                return True
    return False


def _dft_spread(node: Any, values: dict[str, np.ndarray], opset: int) -> np.ndarray | None:
    """``u * sum |x|`` over the DFT's axis and its last (real / imaginary) axis (None: input not known)."""
    x = values.get(node.input[0])
    if x is None or x.ndim < 2 or x.dtype.kind != "f":
        return None
    if opset >= 20:
        given = values.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.array(-2)
        axis = None if given is None else int(np.asarray(given).reshape(-1)[0])
    else:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    if axis is None or not -x.ndim <= axis < x.ndim:
        return None
    total = np.abs(x.astype(np.float64)).sum(axis=axis, keepdims=True).sum(axis=-1, keepdims=True)
    return UNIT_ROUNDOFF * total


def _matmul_spread(node: Any, values: dict[str, np.ndarray], opset: int) -> np.ndarray | None:
    """``inf`` where some order of a MatMul's sum overflows float32 (its positive terms add up past the float32
    range, or its negative terms do), 0 elsewhere (None: an operand not known)."""
    a, b = values.get(node.input[0]), values.get(node.input[1])
    if a is None or b is None or a.dtype.kind != "f" or b.dtype.kind != "f":
        return None
    a, b = a.astype(np.float64), b.astype(np.float64)
    ap, an, bp, bn = np.maximum(a, 0), np.minimum(a, 0), np.maximum(b, 0), np.minimum(b, 0)
    try:
        with np.errstate(all="ignore"):
            up = np.matmul(ap, bp) + np.matmul(an, bn)
            down = np.matmul(ap, bn) + np.matmul(an, bp)
    except ValueError:
        return None
    return np.where((up > FLOAT32_MAX) | (down < -FLOAT32_MAX), np.inf, 0.0)


#: per op, float32 uncertainty that perturbing the operands cannot show, of an output it computes directly
#: from known values (graph inputs, initializers): the rounding of constants the op computes itself (a DFT's
#: twiddle factors), and a sum whose order (not fixed by the spec) decides whether float32 overflows (MatMul)
OP_SPREAD = {"DFT": _dft_spread, "MatMul": _matmul_spread}


def op_spread(model: Any, inputs: Sequence[np.ndarray], base: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per output of ``model``, the uncertainty its producing op adds (:data:`OP_SPREAD`; 0 where none is known)."""
    from onnx import numpy_helper

    values = dict(zip(_real_input_names(model), inputs))
    values |= {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {n.output[0]: n for n in model.graph.node if n.output}
    opset = default_opset(model)
    spreads = []
    for o, b in zip(model.graph.output, base):
        n = producer.get(o.name)
        rule = OP_SPREAD.get(n.op_type) if n is not None else None
        extra = rule(n, values, opset) if rule is not None else None
        try:
            spreads.append(np.broadcast_to(extra, b.shape) if extra is not None else np.zeros(b.shape))
        except ValueError:
            spreads.append(np.zeros(b.shape))
    return spreads


def own_spread(case_dir: str, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per output of the case (shaped as ``like``, the float64 evaluation's outputs), the uncertainty its
    producing op adds itself (:data:`OP_SPREAD`), without the operands' perturbation."""
    model, _names, inputs = widened_case(case_dir)
    return op_spread(model, inputs, like)


def widened_case(case_dir: str) -> tuple[Any, list[str], list[np.ndarray]]:
    """The case's model computing in float64 (:func:`widen_model`), its input names and its inputs widened
    exactly; raises for a model with float64 tensors or functions of its own."""
    import onnx

    folder = Path(case_dir)
    original = onnx.load(str(folder / MODEL_FILE))
    if uses_double(original.graph) or original.functions:
        raise ValueError("the model has float64 tensors or functions of its own: no float64 re-evaluation")
    model = widen_model(original)
    inputs = [a.astype(np.float64) if a.dtype == np.float32 else a for a in read_inputs(folder)]
    return model, _real_input_names(model), inputs


def run_reference_float64(case_dir: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(v64, s): the float64 reference's outputs and each element's float32 uncertainty (see the module)."""
    model, names, inputs = widened_case(case_dir)
    opset = default_opset(model)
    base = _evaluate(model, names, inputs, opset)
    rng = np.random.default_rng(0)
    spread = [np.zeros(b.shape) for b in base]
    for _ in range(PAIRS):
        factors = [_factors(rng, a.shape) for a in inputs]
        init_factors = {t.name: _factors(rng, tuple(t.dims)) for t in model.graph.initializer if t.data_type == DOUBLE}
        runs: list[list[np.ndarray] | None] = []
        for direction in (1.0, -1.0):
            moved = [a * (1.0 + direction * f * UNIT_ROUNDOFF) if a.dtype == np.float64 else a
                     for a, f in zip(inputs, factors)]
            try:
                runs.append(_evaluate(_perturbed(model, init_factors, direction), names, moved, opset))
            except Exception:  # noqa: BLE001  (a perturbed run that fails widens nothing)
                runs.append(None)
        spread = [np.fmax(a, b) for a, b in zip(spread, _spread(base, runs[0], runs[1]))]
    return base, [a + b for a, b in zip(spread, op_spread(model, inputs, base))]


def _factors(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random perturbation factors: a random sign times a magnitude in [0.5, 1]."""
    return rng.choice(np.array([-1.0, 1.0]), size=shape) * rng.uniform(0.5, 1.0, size=shape)


def _interval_ok(v64: np.ndarray, s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Where ``x`` (float32 values) lies in the float32 rounding of ``v64 ± (tolerance + s)``."""
    with np.errstate(all="ignore"):
        w = ATOL + RTOL * np.abs(np.where(np.isfinite(v64), v64, 0.0)) + s
        lo = (v64 - w).astype(np.float32).astype(np.float64)
        hi = (v64 + w).astype(np.float32).astype(np.float64)
        x = x.astype(np.float64)
        inside = (lo <= x) & (x <= hi)
    return np.where(np.isnan(v64), np.isnan(x), inside)


def _glow_ok(v64: np.ndarray, s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Where glow's ``x`` is a float32 answer for the exact ``v64`` with uncertainty ``s``: in the interval, or,
    where ``s`` is past the float32 range (the element's float32 evaluation overflows in some order), the
    exact value within the tolerance or a non-finite value."""
    huge = s > FLOAT32_MAX
    return np.where(huge, _interval_ok(v64, np.zeros_like(s), x) | ~np.isfinite(x), _interval_ok(v64, s, x))


def _disputed(ref32: np.ndarray, glow: np.ndarray) -> np.ndarray:
    """Where glow's float32 element differs from the float32 reference's (the judge's comparison)."""
    e, a = ref32.astype(np.float64), glow.astype(np.float64)
    with np.errstate(all="ignore"):
        close = np.abs(e - a) <= ATOL + RTOL * np.abs(np.where(np.isfinite(e), e, 0.0))
    same = (np.isnan(e) & np.isnan(a)) | (e == a) | (np.isfinite(e) & np.isfinite(a) & close)
    return ~same


def _agreed(ref32: np.ndarray, ort: Any) -> np.ndarray:
    """Where onnxruntime's output ``ort`` agrees with the float32 reference's (nowhere when it has another type
    or shape, or is missing)."""
    if not isinstance(ort, np.ndarray) or ort.dtype != ref32.dtype or ort.shape != ref32.shape:
        return np.zeros(ref32.shape, bool)
    return ~_disputed(ref32, ort)


def undetermined_reason(ref32: Sequence[Any], glow: Sequence[Any], v64: Sequence[np.ndarray],
                        spread: Sequence[np.ndarray], onnxruntime: Sequence[Any] | None = None,
                        rounded: Sequence[np.ndarray] | None = None, own: Sequence[np.ndarray] | None = None) -> str:
    """Why every disputed element of glow's outputs is not determined in float32 ('' when one is). With
    ``onnxruntime``'s outputs, an element on which it agrees with the reference is excused only where glow
    gives the node-wise ``rounded`` evaluation's value (up to ``own``, the rounding of constants the op computes
    itself: :func:`own_spread`) and the reference does not (``float64_rounded.py``)."""
    if not (len(ref32) == len(glow) == len(v64) == len(spread)):
        return ""
    ort = list(onnxruntime) if onnxruntime is not None and len(onnxruntime) == len(ref32) else [None] * len(ref32)
    nodewise = list(rounded) if rounded is not None and len(rounded) == len(ref32) else [None] * len(ref32)
    owns = list(own) if own is not None and len(own) == len(ref32) else [None] * len(ref32)
    counts = [0, 0, 0, 0]  # the reference missing v64, a large uncertainty, of them node-wise; an overflowing order
    for e, a, v, s, o, r, w in zip(ref32, glow, v64, spread, ort, nodewise, owns):
        if isinstance(e, list) or isinstance(a, list):
            return ""
        e, a = np.asarray(e), np.asarray(a)
        if e.dtype != a.dtype or e.shape != a.shape or v.shape != e.shape:
            return ""
        if e.dtype != np.float32:  # integers must be equal; float16 / bfloat16 outputs are not judged here
            if not (np.array_equal(e, a) or (e.dtype.kind == a.dtype.kind == "f" and not _disputed(e, a).any())):
                return ""
            continue
        bad = _disputed(e, a)
        if not bad.any():
            continue
        agreed = bad & _agreed(e, o)
        if agreed.any():  # the reference and onnxruntime agree there: only the node-wise answer is excused
            if not _nodewise(r, e, a, agreed, np.zeros(e.shape) if w is None else w):
                return ""
            counts[2] += int(agreed.sum())
        v, s = v.astype(np.float64)[bad], s[bad]
        if not _glow_ok(v, s, a[bad]).all():
            return ""
        ref_off = ~_interval_ok(v, s, e[bad])
        wide = s > ATOL + RTOL * np.abs(np.where(np.isfinite(v), v, 0.0))
        if not (ref_off | wide).all():
            return ""
        huge = s > FLOAT32_MAX
        counts[0] += int((ref_off & ~huge).sum())
        counts[1] += int((wide & ~ref_off & ~huge).sum())
        counts[3] += int(huge.sum())
    return _reason(counts)


def _reason(counts: list[int]) -> str:
    """The message of :func:`undetermined_reason` from its counts ('' when no element was explained)."""
    parts = []
    if counts[0] + counts[1]:
        parts.append(f"glow gives the float64 evaluation's value on {counts[0] + counts[1]} disputed element(s); "
                     f"the float32 reference misses it on {counts[0]}, and float32 rounding of the operands moves "
                     f"{counts[1]} more by over the tolerance")
    if counts[3]:
        parts.append(f"on {counts[3]} disputed element(s) some float32 order of the sum overflows, and glow gives "
                     f"the float64 evaluation's value or one that is not finite")
    if not parts:
        return ""
    agreed = (f"; onnxruntime agrees with the float32 reference on {counts[2]}, where glow gives every node's "
              f"correctly rounded result (up to the rounding of its own constants) and the reference does not") \
        if counts[2] else ""
    return "not determined in float32: " + "; ".join(parts) + agreed


def _nodewise(rounded: Any, ref32: np.ndarray, glow: np.ndarray, where: np.ndarray, own: np.ndarray) -> bool:
    """Whether, at every element of ``where``, glow gives the node-wise rounded evaluation's value up to the
    rounding of the op's own constants (``own``: a DFT's terms that cancel leave a residue of its twiddles'
    rounding, in float64 as in float32) and the float32 reference does not (False without that evaluation,
    or of another shape)."""
    if not isinstance(rounded, np.ndarray) or rounded.shape != ref32.shape or rounded.dtype.kind != "f":
        return False
    r64 = rounded.astype(np.float32).astype(np.float64)[where]
    s = np.broadcast_to(own, ref32.shape)[where]
    return bool((_glow_ok(r64, s, glow[where]) & ~_interval_ok(r64, s, ref32[where])).all())
