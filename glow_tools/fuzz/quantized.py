"""How the judge compares quantized integer outputs: exactly, except where the spec leaves the rounding open.

The quantizing ops round a real value to an integer: QuantizeLinear's
``y = saturate((x / y_scale) + y_zero_point)`` ("For (x / y_scale), it rounds
to the nearest even"), QLinearMatMul's and QLinearConv's requantization of the
integer accumulator by ``a_scale * b_scale / y_scale``, DynamicQuantizeLinear's
``y = saturate(round(x / y_scale) + y_zero_point)`` with a zero point
``round(qmin - min(x) / y_scale)``. The rounding itself is defined (to the
nearest, ties to even); the precision of the real value before it is not: the
spec does not say in which type ``x / y_scale`` or the product of the scales is
computed (float16 scales: onnx.reference computes in float16, onnxruntime in
float32). So one unit of difference is allowed exactly where the real value,
computed here in float64 from the reference's own operands, lies within the
rounding error of that arithmetic of a tie (``k + 0.5``): ``TIE_ULPS`` units in
the last place of the operands' float type, times the value's magnitude; for a
QuantizeLinear whose ``x`` is computed by other nodes (not a graph input or
initializer), also the judge's float tolerance on ``x`` (glow's ``x`` may
differ from the reference's by that much). Elsewhere quantized outputs compare
exactly; the judge reports how many elements differ.

An element whose real value is NaN (``0 / 0`` for a scale of 0, a NaN input or
scale) converts NaN to an integer, which the spec leaves undefined: such
elements are *undefined* (not compared; a case differing only there is
``unjudged``).

Only graph outputs produced by a quantizing node of the main graph are looked
at (other integer outputs compare exactly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_tools.nodetests import ATOL, RTOL

QUANTIZED_OPS = frozenset({"QuantizeLinear", "QLinearMatMul", "QLinearConv", "DynamicQuantizeLinear"})
#: units in the last place of the operands' float type (several roundings: a quotient, a product of scales)
TIE_ULPS = 4.0


@dataclass
class QuantizedMasks:
    """Per element of one quantized output: where one unit of difference is rounding the spec leaves open,
    and where the value is undefined (NaN converted to an integer)."""

    open: np.ndarray
    undefined: np.ndarray


def needed_values(model: Any) -> list[str]:
    """Names whose reference values :func:`quantized_masks` reads (operands and outputs of the quantizing
    nodes that produce graph outputs)."""
    outs = {o.name for o in model.graph.output}
    names: list[str] = []
    for n in model.graph.node:
        if n.op_type in QUANTIZED_OPS and outs & set(n.output):
            names += [v for v in (*n.input, *n.output) if v and v not in names]
    return names


def _eps(*arrays: np.ndarray) -> float:
    return max((float(np.finfo(a.dtype).eps) for a in arrays if a.dtype.kind == "f"), default=2.0**-23)


def _near_tie(real: np.ndarray, band: np.ndarray | float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.abs(real - np.floor(real) - 0.5) <= band


def _quantize_linear(n: Any, v: Mapping[str, np.ndarray], given: set[str]) -> QuantizedMasks:
    from onnx.reference.ops._quant_utils import reshape_input

    x, scale = v[n.input[0]], v[n.input[1]]
    attrs = {a.name: a.i for a in n.attribute}
    s = reshape_input(scale, x.shape, attrs.get("axis", 1), attrs.get("block_size", 0)).astype(np.float64)
    with np.errstate(all="ignore"):
        real = x.astype(np.float64) / s
        band = TIE_ULPS * _eps(x, scale) * np.abs(real)
        if n.input[0] not in given:  # glow's x may differ from the reference's within the float tolerance
            band = band + (RTOL * np.abs(x.astype(np.float64)) + ATOL) / np.abs(s)
    return QuantizedMasks(_near_tie(real, band), np.isnan(real))


def _requantize(acc: np.ndarray, multiplier: np.ndarray, scales: Sequence[np.ndarray]) -> QuantizedMasks:
    with np.errstate(all="ignore"):
        real = acc * multiplier
        band = TIE_ULPS * _eps(*scales) * (np.abs(real) + 1.0)
    return QuantizedMasks(_near_tie(real, band), np.isnan(real))


def _qlinear_matmul(n: Any, v: Mapping[str, np.ndarray], given: set[str]) -> QuantizedMasks:
    a, a_s, a_zp, b, b_s, b_zp, y_s = (v[n.input[k]] for k in range(7))
    a_s64, b_s64 = a_s.astype(np.float64), b_s.astype(np.float64)
    if a_s64.ndim == 1 and a_s64.size > 1:  # per row of a
        a_s64 = a_s64[:, None]
    a_zp64 = a_zp.astype(np.int64)[:, None] if a_zp.ndim == 1 and a_zp.size > 1 else a_zp.astype(np.int64)
    acc = np.matmul(a.astype(np.int64) - a_zp64, b.astype(np.int64) - b_zp.astype(np.int64)).astype(np.float64)
    return _requantize(acc, a_s64 * b_s64 / y_s.astype(np.float64), (a_s, b_s, y_s))


def _qlinear_conv(n: Any, v: Mapping[str, np.ndarray], given: set[str]) -> QuantizedMasks:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    x, x_s, x_zp, w, w_s, w_zp, y_s = (v[n.input[k]] for k in range(7))
    bias = v.get(n.input[8]) if len(n.input) > 8 and n.input[8] else None
    wz = w_zp.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1)) if w_zp.size > 1 else w_zp.astype(np.float64)
    conv = helper.make_node("Conv", ["x", "w"], ["y"])
    conv.attribute.extend(n.attribute)
    g = helper.make_graph([conv], "acc", [helper.make_tensor_value_info(k, 11, None) for k in ("x", "w")],
                          [helper.make_tensor_value_info("y", 11, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    acc = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float64) - x_zp.astype(np.float64),
                                               "w": w.astype(np.float64) - wz})[0]
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    ws = w_s.astype(np.float64).reshape((1, -1) + (1,) * (acc.ndim - 2)) if w_s.size > 1 else w_s.astype(np.float64)
    return _requantize(acc, x_s.astype(np.float64) * ws / y_s.astype(np.float64), (x_s, w_s, y_s))


def _dynamic_quantize(n: Any, v: Mapping[str, np.ndarray], index: int, given: set[str]) -> QuantizedMasks:
    """y = saturate(round(x / y_scale) + y_zero_point), y_zero_point = round(0 - min(0, min(x)) / y_scale)
    (uint8); for an ``x`` computed by other nodes, the scale moves with glow's ``x`` within the tolerance."""
    x = v[n.input[0]].astype(np.float64)
    scale = float(v[n.output[1]])
    slack = RTOL if n.input[0] not in given else 0.0
    with np.errstate(all="ignore"):
        zp_real = np.asarray(0.0 - float(np.min(x, initial=0.0)) / scale)
        zp_open = bool(_near_tie(zp_real, (TIE_ULPS * 2.0**-23 + slack) * (abs(zp_real) + 1.0)))
        if index == 2:
            return QuantizedMasks(np.asarray(zp_open), np.isnan(zp_real))
        real = x / scale
        open_ = _near_tie(real, (TIE_ULPS * 2.0**-23 + slack) * (np.abs(real) + 1.0)) | zp_open
    return QuantizedMasks(open_, np.isnan(real) | bool(np.isnan(zp_real)))


def _masks_of(n: Any, index: int, v: Mapping[str, np.ndarray], given: set[str]) -> QuantizedMasks | None:
    if n.op_type == "DynamicQuantizeLinear":
        return _dynamic_quantize(n, v, index, given) if index in (0, 2) else None
    if index != 0:
        return None
    rules = {"QuantizeLinear": _quantize_linear, "QLinearMatMul": _qlinear_matmul, "QLinearConv": _qlinear_conv}
    return rules[n.op_type](n, v, given)


#: the 4-bit (and 2-bit) integer kinds, which numpy holds as ml_dtypes types of kind "V"
NARROW_INTS = frozenset({"int4", "uint4", "int2", "uint2"})


def is_integer(dtype: np.dtype) -> bool:
    """An integer element type, the narrow ones of ``ml_dtypes`` included."""
    return dtype.kind in "iu" or dtype.name in NARROW_INTS


def quantized_masks(model: Any, values: Mapping[str, np.ndarray],
                    outputs: Sequence[Any]) -> list[QuantizedMasks | None]:
    """Per graph output, its :class:`QuantizedMasks` when a quantizing node produces it as integers (None
    otherwise, or when its operands are not all known: then it compares exactly)."""
    producer = {o: (n, k) for n in model.graph.node if n.op_type in QUANTIZED_OPS for k, o in enumerate(n.output)}
    given = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    masks: list[QuantizedMasks | None] = []
    for o, out in zip(model.graph.output, outputs):
        found = producer.get(o.name)
        if found is None or not isinstance(out, np.ndarray) or not is_integer(out.dtype):
            masks.append(None)
            continue
        try:
            m = _masks_of(found[0], found[1], values, given)
        except (KeyError, ValueError, IndexError, TypeError):
            m = None  # an operand the reference did not give (an optional one, a subgraph's): exact comparison
        masks.append(m if m is not None and m.open.shape == out.shape and m.undefined.shape == out.shape else None)
    return masks


def unexplained(expected: np.ndarray, actual: np.ndarray, masks: QuantizedMasks | None) -> np.ndarray:
    """Where ``actual`` differs from ``expected`` other than by one unit of open rounding."""
    e, a = expected.astype(np.int64), actual.astype(np.int64)
    differ = e != a
    if masks is None:
        return differ
    return differ & ~((np.abs(e - a) == 1) & masks.open)
