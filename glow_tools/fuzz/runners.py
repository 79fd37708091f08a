"""What runs inside the forked children, and how an outcome is classified.

Three runners, each given a case folder and run by :func:`glow_tools.fuzz.isolate.run_forked`:

- :func:`run_glow`: ``glow_core.onnx_backend`` on one backend, under a lowered
  memory budget (:data:`GLOW_BUDGET`), so that any allocation past the child's
  address-space limit means glow's budget missed it;
- :func:`run_reference`: ``onnx.reference.ReferenceEvaluator``, the judge;
- :func:`run_onnxruntime`: onnxruntime, for information only.

Classes (:data:`CLASSES`): ``match``, ``clean-error``, ``wrong``,
``internal-error``, ``crash``, ``hang``, ``memory``, and ``unjudged`` (glow
answered but the reference could not: it refused the model, crashed or hung).
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from glow_core.errors import GlowError, UnsupportedError
from glow_tools.fuzz.cases import MODEL_FILE, read_inputs
from glow_tools.fuzz.isolate import Outcome
from glow_tools.fuzz.quantized import QuantizedMasks, needed_values, quantized_masks, unexplained
from glow_tools.fuzz.reference_fixes import new_ops, unwrap_optional_outputs
from glow_tools.fuzz.reference_nonfinite import UNDETERMINED
from glow_tools.nodetests import ATOL, RTOL, compare

CLASSES = ("match", "clean-error", "unjudged", "wrong", "internal-error", "crash", "hang", "memory")
#: classes that are findings (each one is saved as a reproduction)
FINDINGS = ("wrong", "internal-error", "crash", "hang", "memory")
#: glow's limits inside a fuzz child: far below the child's address-space limit
GLOW_BUDGET = {"max_tensor_bytes": 256 << 20, "max_total_bytes": 1 << 30}


def _real_input_names(model: Any) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def warm_up(backends: Sequence[str], onnxruntime: bool = True) -> None:
    """Import in the worker what every child needs, so each fork starts warm (and all run the same code)."""
    import onnx.reference  # noqa: F401

    from onnx import TensorProto, helper

    from glow_core import onnx_backend
    from glow_core.importer.context import import_rules

    import_rules()
    os.environ["GLOW_CPU_CACHE"] = "0"
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm", [vi], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    for b in backends:  # every lazily imported module (passes, lowering, emitters) is loaded once, here
        onnx_backend.prepare(m, backend=b, threads=1).run([np.zeros(2, np.float32)])
    if onnxruntime:
        try:
            import onnxruntime as _ort  # noqa: F401
        except ImportError:
            pass


def run_glow(case_dir: str, backend: str) -> dict[str, Any]:
    """Compile and run the case on ``backend``; a dict says how it ended (never raises)."""
    os.environ["GLOW_CPU_CACHE"] = "0"  # every mutant is new: the object cache would only fill the disk
    from glow_core import onnx_backend

    folder = Path(case_dir)
    inputs = read_inputs(folder)
    try:
        rep = onnx_backend.prepare(str(folder / MODEL_FILE), backend=backend, threads=1, options=GLOW_BUDGET)
        outs = rep.run(inputs)
        return {"kind": "outputs", "outputs": [as_output(o) for o in outs]}
    except GlowError as e:
        cause = e.__cause__
        foreign = cause is not None and not isinstance(cause, GlowError)
        return {"kind": "glow-error", "type": type(e).__name__, "message": e.one_line(),
                "unsupported": isinstance(e, UnsupportedError),
                "cause": f"{type(cause).__name__}: {cause}" if foreign else ""}
    except MemoryError:
        return {"kind": "memory"}
    except Exception as e:  # noqa: BLE001  (anything else escaping glow is an internal error)
        tb = "".join(traceback.format_exception(e)[-6:])
        return {"kind": "exception", "type": type(e).__name__, "message": f"{type(e).__name__}: {e}"[:600],
                "traceback": tb[-3000:]}


#: ops whose ``onnx.reference`` kernels compute log(softmax(x)) as np.log of the softmax: where a
#: probability underflows to 0 they give inf or NaN where the spec's LogSoftmax-based definition is finite
LOG_OF_SOFTMAX_REFERENCE_OPS = frozenset({"SoftmaxCrossEntropyLoss"})


class ReferenceAnswer(list):  # type: ignore[type-arg]
    """The reference's outputs; per output, the :class:`~glow_tools.fuzz.quantized.QuantizedMasks` of a
    quantized one (None: exact comparison), and a mask of the elements the spec leaves undefined (None:
    none; NaN converted to an integer in a quantized output is added to it)."""

    def __init__(self, outputs: Sequence[np.ndarray], quantized: Sequence[QuantizedMasks | None | int] = (),
                 undefined: Sequence[np.ndarray | None] = ()) -> None:
        super().__init__(outputs)
        given = list(quantized) or [None] * len(self)
        self.quantized = [q if isinstance(q, QuantizedMasks) else None for q in given]
        self.undefined = list(undefined) or [None] * len(self.quantized)
        for k, q in enumerate(self.quantized):
            if q is not None and q.undefined.any() and k < len(self.undefined):
                u = self.undefined[k]
                self.undefined[k] = q.undefined if u is None else (np.asarray(u) | q.undefined)


#: integer ops whose element is undefined where the divisor element is 0 (the spec does not say what
#: integer division by zero gives; onnx.reference gives numpy's 0, glow gives x for Div)
INT_DIVISION_OPS = frozenset({"Div", "Mod"})


def division_by_zero_mask(model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """Per graph output, where it is an integer Div / Mod by a zero element (None where it is not one).

    Only a node producing a graph output directly from operands that are graph inputs or initializers
    is looked at: the mask is exactly the zero elements of the divisor, broadcast to the output."""
    from onnx import numpy_helper

    values = dict(zip(_real_input_names(model), inputs))
    values |= {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {n.output[0]: n for n in model.graph.node if n.op_type in INT_DIVISION_OPS and n.output}
    masks: list[np.ndarray | None] = []
    for o in model.graph.output:
        n = producer.get(o.name)
        x, y = (values.get(n.input[0]), values.get(n.input[1])) if n is not None and len(n.input) == 2 else (None, None)
        if x is None or y is None or y.dtype.kind not in "iu" or not (y == 0).any():
            masks.append(None)
            continue
        masks.append(np.broadcast_to(y == 0, np.broadcast_shapes(x.shape, y.shape)))
    return masks


class ReferenceUnreliable(Exception):
    """The reference is known to compute something else than the spec says for this model."""


#: ONNX element types that hold NaN (float8 / float4 outputs of QuantizeLinear define NaN's conversion)
_FLOAT_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 23})


def _elem_types(model: Any) -> dict[str, int]:
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    return types | {t.name: t.data_type for t in model.graph.initializer}


#: quantized ops with an integer output and where their scales are (input positions)
QLINEAR_SCALE_INPUTS = {"QLinearMatMul": (1, 4, 6), "QLinearConv": (1, 4, 6)}


def _nan_scale_op(n: Any, values: dict[str, np.ndarray], types: dict[str, int]) -> bool:
    """Whether node ``n`` converts a NaN scale (graph input or initializer) to an integer output."""
    if n.op_type == "QuantizeLinear" and len(n.input) >= 2:
        positions: tuple[int, ...] = (1,)
        zp_type = types.get(n.input[2], 2) if len(n.input) > 2 and n.input[2] else 2
        if next((a.i for a in n.attribute if a.name == "output_dtype" and a.i), zp_type) in _FLOAT_TYPES:
            return False  # a float8 / float4 output has a NaN of its own
    else:
        positions = QLINEAR_SCALE_INPUTS.get(n.op_type, ())
    for k in positions:
        scale = values.get(n.input[k]) if k < len(n.input) else None
        if scale is not None and scale.dtype.kind == "f" and bool(np.isnan(scale).any()):
            return True
    return False


def nan_to_integer_caveat(model: Any, inputs: Sequence[np.ndarray]) -> str:
    """Why a quantizing op's answer is undefined: a NaN scale converted to an integer type ('' if not).

    The spec leaves the conversion of NaN to an integer undefined; onnx.reference gives numpy's cast
    artefact (-8 for int4, 0 for int8). Looked at: QuantizeLinear with an integer output (no zero point,
    or an integer one: a float8 output has a NaN of its own), and QLinearMatMul / QLinearConv (their
    input, weight or output scale); only a scale given as a graph input or initializer."""
    from onnx import numpy_helper

    values = dict(zip(_real_input_names(model), inputs))
    values |= {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == 1}
    types = _elem_types(model)
    for n in model.graph.node:
        if _nan_scale_op(n, values, types):
            return (f"the spec does not define the conversion of NaN to an integer, and a {n.op_type}'s scale "
                    "holds NaN (onnx.reference gives numpy's cast artefact)")
    return ""


def reference_caveat(model: Any, inputs: Sequence[np.ndarray] = ()) -> str:
    """Why ``onnx.reference`` cannot judge ``model`` on ``inputs`` ('' when it can). (Its pooling over NaN
    and its Resize over infinities are corrected element by element instead: reference_nonfinite.py.)"""
    nan = any(a.dtype.kind == "f" and bool(np.isnan(a).any()) for a in inputs)
    if nan and nan_to_integer_caveat(model, inputs):
        return nan_to_integer_caveat(model, inputs)
    return ""


def default_opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def run_reference(case_dir: str) -> ReferenceAnswer:
    """The outputs of ``onnx.reference`` on the case (raises when the reference refuses the model)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    folder = Path(case_dir)
    model = onnx.load(str(folder / MODEL_FILE))
    names = _real_input_names(model)
    inputs = read_inputs(folder)
    caveat = reference_caveat(model, inputs)
    if caveat:
        raise ReferenceUnreliable(caveat)
    UNDETERMINED.clear()
    if len(names) != len(inputs):
        raise ValueError(f"{len(inputs)} inputs for {len(names)} model inputs")
    wanted = [o.name for o in model.graph.output]
    extra = [n for n in needed_values(model) if n not in wanted]  # the quantizing nodes' operands
    got = ReferenceEvaluator(model, new_ops=new_ops(default_opset(model))).run(wanted + extra, dict(zip(names, inputs)))
    outs = [as_output(o) for o in unwrap_optional_outputs(model, wanted, list(got[:len(wanted)]))]
    caveat = overflow_caveat(model, outs)
    if caveat:
        raise ReferenceUnreliable(caveat)
    values = {k: np.asarray(v) for k, v in zip(wanted + extra, got) if not isinstance(v, (list, tuple))}
    return ReferenceAnswer(outs, quantized_masks(model, values, outs), undefined_masks(model, inputs, outs))


def undefined_masks(model: Any, inputs: Sequence[np.ndarray], outputs: Sequence[Any]) -> list[np.ndarray | None]:
    """Per graph output, the elements the spec leaves undefined: integer division by zero, and the elements
    of a cubic Resize an infinity reaches (``reference_nonfinite.UNDETERMINED``, filled by the evaluation
    just run)."""
    masks = division_by_zero_mask(model, inputs)
    for k, (o, out) in enumerate(zip(model.graph.output, outputs)):
        reached = UNDETERMINED.pop(o.name, None)
        if reached is not None and isinstance(out, np.ndarray) and reached.shape == out.shape:
            masks[k] = reached if masks[k] is None else (np.asarray(masks[k]) | reached)
    UNDETERMINED.clear()
    return masks


def overflow_caveat(model: Any, outputs: Sequence[np.ndarray]) -> str:
    """Why the reference's non-finite ``outputs`` may be its own overflow ('' when they cannot be)."""
    ops = {n.op_type for n in model.graph.node} & LOG_OF_SOFTMAX_REFERENCE_OPS
    tensors = [t for o in outputs for t in (o if isinstance(o, list) else [o])]
    finite = all(not (t.dtype.kind == "f" and not np.isfinite(t).all()) for t in tensors)
    if ops and not finite:
        return (f"onnx.reference computes {sorted(ops)[0]} as log(softmax) and overflows where a probability "
                "underflows to 0; its output holds inf or NaN")
    return ""


def run_onnxruntime(case_dir: str) -> list[np.ndarray]:
    import onnxruntime as ort

    folder = Path(case_dir)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    sess = ort.InferenceSession(str(folder / MODEL_FILE), so, providers=["CPUExecutionProvider"])
    inputs = read_inputs(folder)
    outs = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), inputs)})
    return [as_output(o) for o in outs]


def as_output(value: Any) -> Any:
    """An output as an array, or a sequence output (a list or tuple of tensors) as a list of arrays."""
    if isinstance(value, (list, tuple)):
        return [np.asarray(t) for t in value]
    return np.asarray(value)


def _compare_sequences(k: int, e: list[np.ndarray], a: Any) -> str:
    if not isinstance(a, list) or len(a) != len(e):
        return f"output {k}: not a sequence of {len(e)} tensors like the reference's"
    for j, (ej, aj) in enumerate(zip(e, a)):
        ok, msg, _ = compare(ej, aj)
        if not ok:
            return f"output {k}, tensor {j}: {msg}"
    return ""


def _compare_quantized(k: int, e: np.ndarray, a: np.ndarray, q: QuantizedMasks) -> str:
    """'' when the quantized output ``a`` equals ``e`` but for one unit where the spec leaves the rounding
    open; else how many elements differ."""
    differ = int(np.count_nonzero(e.astype(np.int64) != a.astype(np.int64)))
    beyond = int(np.count_nonzero(unexplained(e, a, q)))
    if not beyond:
        return ""
    worst = int(np.abs(e.astype(np.int64) - a.astype(np.int64)).max())
    return (f"output {k}: {differ} of {e.size} quantized elements differ, {beyond} of them beyond the rounding "
            f"the spec leaves open (largest difference {worst})")


def _is_empty(value: Any) -> bool:
    """An empty optional output (None, as an object array after as_output)."""
    return value is None or (isinstance(value, np.ndarray) and value.dtype == object and value.shape == ()
                             and value.item() is None)


def compare_outputs(expected: list[np.ndarray], actual: list[np.ndarray]) -> str:
    """'' when every output matches (``glow_tools.nodetests.compare``; integer outputs of quantizing ops
    exactly, but for one unit where the spec leaves the rounding open: glow_tools.fuzz.quantized), else
    what differs."""
    if len(expected) != len(actual):
        return f"{len(actual)} outputs, the reference has {len(expected)}"
    quantized = getattr(expected, "quantized", [None] * len(expected))
    for k, (e, a) in enumerate(zip(expected, actual)):
        if _is_empty(e) or _is_empty(a):
            if _is_empty(e) != _is_empty(a):
                return f"output {k}: {'an empty optional' if _is_empty(a) else 'a value'} where the reference " \
                       f"has {'an empty optional' if _is_empty(e) else 'a value'}"
            continue
        if isinstance(e, list) or isinstance(a, list):
            diff = _compare_sequences(k, e, a) if isinstance(e, list) else f"output {k}: a sequence, not a tensor"
            if diff:
                return diff
            continue
        if e.dtype == object or a.dtype == object:
            return f"output {k}: not a tensor"
        q = quantized[k] if k < len(quantized) else None
        if q is not None and e.dtype == a.dtype and e.shape == a.shape and e.dtype.kind in "iu":
            diff = _compare_quantized(k, e, a, q)
            if diff:
                return diff
            continue
        ok, msg, _ = compare(e, a)
        if not ok:
            return f"output {k}: {msg}"
    return ""


def _glow_error_class(v: dict[str, Any]) -> tuple[str, str]:
    msg = f"{v['type']}: {v['message']}"
    if not v["message"].strip():
        return "internal-error", f"{v['type']} without a message"
    if v["unsupported"] and v["cause"]:
        return "internal-error", f"{msg} (raised from {v['cause']})"
    if "bug" in v["message"].lower():
        return "internal-error", msg
    if v["type"] == "BudgetError" and "out of memory" in v["message"]:
        return "memory", msg
    return "clean-error", msg


def classify(glow: Outcome, reference: Outcome | None) -> tuple[str, str]:
    """(class, message) of one backend's outcome, judged by the reference's outcome."""
    if glow.status in ("crash", "hang", "memory"):
        return glow.status, glow.message
    if glow.status != "ok":
        return "internal-error", glow.message
    v = glow.value
    if v["kind"] == "memory":
        return "memory", "MemoryError"
    if v["kind"] == "exception":
        return "internal-error", f"{v['message']} | {v['traceback'][-800:]}"
    if v["kind"] == "glow-error":
        return _glow_error_class(v)
    if reference is None or reference.status != "ok":
        why = "not run" if reference is None else f"{reference.status}: {reference.message[:300]}"
        return "unjudged", f"glow answered; no reference ({why})"
    diff = compare_outputs(reference.value, v["outputs"])
    if diff and only_undefined_differ(reference.value, v["outputs"]):
        return "unjudged", (f"undefined elements (integer division by zero, NaN converted to an integer, an infinity "
                            f"in a cubic Resize or a Fourier transform): the spec does not define them; glow differs "
                            f"only there ({diff})")
    return ("wrong", diff) if diff else ("match", "")


def _beyond_tolerance(e: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The elements where ``a`` differs from ``e`` as the comparison counts them: beyond rtol / atol for floats
    (NaN equal to NaN), any difference for integers. (Exact inequality called a float32 rounding outside
    the undefined elements a difference: case 69 of seed 1, a cubic Resize of infinities.)"""
    if e.dtype.kind == "f" and a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return ~np.isclose(a.astype(np.float64), e.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True)
    return e != a


def only_undefined_differ(expected: Any, actual: Sequence[Any]) -> bool:
    """Whether every element where ``actual`` differs from ``expected`` is one the spec leaves undefined
    (``ReferenceAnswer.undefined``): there is at least one such mask, and shapes and dtypes agree."""
    masks = getattr(expected, "undefined", [])
    quantized = getattr(expected, "quantized", [None] * len(masks))
    if not any(m is not None for m in masks) or len(actual) != len(expected):
        return False
    for e, a, m, q in zip(expected, actual, masks, quantized):
        if isinstance(e, list) or isinstance(a, list) or e.dtype != a.dtype or e.shape != a.shape:
            return False
        differ = unexplained(e, a, q) if q is not None else _beyond_tolerance(e, a)
        if differ.any() and (m is None or m.shape != e.shape or (differ & ~m).any()):
            return False
    return True


def onnxruntime_note(ort: Outcome | None, reference: Outcome | None) -> str:
    """How onnxruntime compares with the reference ('' when it was not run)."""
    if ort is None or reference is None or reference.status != "ok":
        return ""
    if ort.status != "ok":
        return f"onnxruntime {ort.status}"
    diff = compare_outputs(reference.value, ort.value)
    return f"onnxruntime disagrees with the reference: {diff}" if diff else "agrees"
