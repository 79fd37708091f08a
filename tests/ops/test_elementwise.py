"""Element-wise ops: the interpreter against onnxruntime (and exact references where ORT has no kernel)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from glow_core.errors import ModelError, UnsupportedError
from glow_core.importer import import_model, schema_types
from glow_core.ir.graph import Constant
from tests.ops.oputil import assert_same, run_glow, run_ort

DT = np.dtype[Any]
BF16: DT = np.dtype(ml_dtypes.bfloat16)
F16: DT = np.dtype(np.float16)
F32: DT = np.dtype(np.float32)
F64: DT = np.dtype(np.float64)
BOOL: DT = np.dtype(np.bool_)
FLOATS: list[DT] = [F16, F32, F64]
SINTS: list[DT] = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UINTS: list[DT] = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
INTS: list[DT] = SINTS + UINTS
ALL: list[DT] = FLOATS + [BF16] + INTS + [BOOL]

def ids(dt: np.dtype) -> str:
    return "bfloat16" if dt == BF16 else dt.name


def model(op: str, inputs: Mapping[str, np.ndarray], *, opset: int = 22, initializers: Mapping[str, np.ndarray] = {},
          order: Sequence[str] | None = None, n_out: int = 1, **attrs: Any) -> onnx.ModelProto:
    """A one-node model over any dtype (bfloat16 included)."""
    names = list(order) if order is not None else list(inputs) + list(initializers)
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **attrs)
    g_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()]
    g_out = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in initializers.items()]
    graph = helper.make_graph([node], "g", g_in, g_out, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m)


def rand(rng: np.random.Generator, dt: np.dtype, shape: tuple[int, ...], lo: float = -5, hi: float = 5) -> np.ndarray:
    if dt == np.bool_:
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        lo_i = max(math.floor(lo), 0) if dt.kind == "u" else math.floor(lo)
        return rng.integers(lo_i, max(math.ceil(hi), lo_i + 2), shape).astype(dt)
    return rng.uniform(lo, hi, shape).astype(dt)


def tol(dt: np.dtype) -> dict[str, float]:
    return {"rtol": 2e-3, "atol": 2e-3} if dt.itemsize == 2 else {"rtol": 2e-5, "atol": 1e-6}


def against_ort(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], **kw: float) -> list[np.ndarray]:
    got = run_glow(m, feeds)
    assert_same(got, run_ort(m, feeds), **kw)
    return got


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# -- unary float ops ------------------------------------------------------------------------

#: op -> (opset, input range, attributes)
UNARY_FLOAT: dict[str, tuple[int, tuple[float, float], dict[str, Any]]] = {
    "Abs": (13, (-5, 5), {}), "Neg": (13, (-5, 5), {}), "Sign": (13, (-5, 5), {}),
    "Ceil": (13, (-5, 5), {}), "Floor": (13, (-5, 5), {}), "Round": (22, (-5, 5), {}),
    "Sqrt": (13, (0, 9), {}), "Reciprocal": (13, (0.5, 5), {}), "Exp": (13, (-5, 5), {}),
    "Log": (13, (0.01, 9), {}), "Erf": (13, (-4, 4), {}), "Sin": (22, (-5, 5), {}), "Cos": (22, (-5, 5), {}),
    "Tan": (22, (-1.4, 1.4), {}), "Asin": (22, (-1, 1), {}), "Acos": (22, (-1, 1), {}), "Atan": (22, (-5, 5), {}),
    "Sinh": (22, (-4, 4), {}), "Cosh": (22, (-4, 4), {}), "Asinh": (22, (-5, 5), {}), "Acosh": (22, (1, 5), {}),
    "Atanh": (22, (-0.95, 0.95), {}), "Tanh": (13, (-5, 5), {}), "Sigmoid": (13, (-8, 8), {}),
    "Relu": (14, (-5, 5), {}), "Softplus": (22, (-8, 8), {}), "Softsign": (22, (-5, 5), {}),
    "Mish": (22, (-5, 5), {}), "HardSwish": (22, (-5, 5), {}), "LeakyRelu": (16, (-5, 5), {"alpha": 0.3}),
    "Elu": (22, (-5, 5), {"alpha": 0.7}), "Celu": (12, (-5, 5), {"alpha": 2.0}),
    "Selu": (22, (-5, 5), {"alpha": 2.0, "gamma": 3.0}), "HardSigmoid": (22, (-5, 5), {"alpha": 0.3, "beta": 0.4}),
    "ThresholdedRelu": (22, (-5, 5), {"alpha": 1.5}), "Swish": (24, (-5, 5), {"alpha": 0.5}),
    "Gelu": (20, (-5, 5), {}), "Shrink": (9, (-5, 5), {"lambd": 1.5, "bias": 0.5}),
}
def ort_or_none(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray] | None:
    """onnxruntime's outputs, or None when it has no CPU kernel for the op and dtype (or the opset
    version it implements does not list the dtype)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidGraph, NotImplemented

    try:
        return run_ort(m, feeds)
    except NotImplemented:
        return None
    except InvalidGraph as e:
        if "Type Error" in str(e):
            return None
        raise


def refused_by_schema(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> bool:
    """Whether the op's schema at the model's opset does not take the operand's type: then glow must refuse the
    model as invalid (ModelError naming the opset), and onnxruntime refuses it too (a type error)."""
    node = m.graph.node[0]
    op_types = schema_types.op_types(node.op_type, m.opset_import[0].version)
    elem = helper.tensor_dtype_to_string(m.graph.input[0].type.tensor_type.elem_type).removeprefix("TensorProto.")
    name = {"FLOAT": "float", "DOUBLE": "double"}.get(elem, elem.lower())
    if op_types is None or f"tensor({name})" in op_types.allowed[op_types.inputs[0]]:
        return False
    with pytest.raises(ModelError, match=rf"\({node.op_type}, opset \d+\).* which {node.op_type} does not accept"):
        run_glow(m, feeds)
    assert ort_or_none(m, feeds) is None, "onnxruntime ran a model its schema refuses"
    return True


@pytest.mark.parametrize("dt", FLOATS, ids=ids)
@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_unary_float(op: str, dt: np.dtype, rng: np.random.Generator) -> None:
    opset, (lo, hi), attrs = UNARY_FLOAT[op]
    x = rand(rng, dt, (3, 4, 5), lo, hi)
    x.flat[:2] = [min(max(2.5, lo), hi), min(max(-0.5, lo), hi)]  # a half for Round
    m = model(op, {"x": x}, opset=opset, **attrs)
    if refused_by_schema(m, {"x": x}):
        return
    got = run_glow(m, {"x": x})
    want = ort_or_none(m, {"x": x})
    if want is None:
        # no ORT kernel (float64 trig, ...): the same op in float32 on glow, itself checked against ORT
        x32 = x.astype(F32)
        ref = run_glow(model(op, {"x": x32}, opset=opset, **attrs), {"x": x32})[0]
        assert got[0].dtype == dt
        np.testing.assert_allclose(got[0].astype(F64), ref.astype(F64), rtol=1e-5 if dt == F64 else 2e-3, atol=1e-6)
    else:
        assert_same(got, want, **tol(dt))


@pytest.mark.parametrize("op", list(UNARY_FLOAT))
def test_unary_bfloat16_is_float32_rounded(op: str, rng: np.random.Generator) -> None:
    """bfloat16 is computed in float32 and rounded once."""
    opset, (lo, hi), attrs = UNARY_FLOAT[op]
    x = rand(rng, F32, (4, 6), lo, hi).astype(BF16)
    m = model(op, {"x": x}, opset=opset, **attrs)
    if refused_by_schema(m, {"x": x}):
        return
    got = run_glow(m, {"x": x})[0]
    x32 = x.astype(F32)
    ref = run_glow(model(op, {"x": x32}, opset=opset, **attrs), {"x": x32})[0].astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(F32), ref.astype(F32))


def test_erf_is_double_precision() -> None:
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, -0.0, 1e-300, 1.999999, 2.0, 2.000001, np.inf, -np.inf]])
    got = run_glow(model("Erf", {"x": x}, opset=13), {"x": x})[0]
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, want, rtol=4e-15, atol=0)
    nan = run_glow(model("Erf", {"x": np.array([np.nan])}, opset=13), {"x": np.array([np.nan])})[0]
    assert np.isnan(nan).all()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dt", FLOATS, ids=ids)
def test_gelu(approximate: str, dt: np.dtype, rng: np.random.Generator) -> None:
    x = rand(rng, dt, (5, 7), -6, 6)
    m = model("Gelu", {"x": x}, opset=20, approximate=approximate)
    got = run_glow(m, {"x": x})
    want = ort_or_none(m, {"x": x})
    if want is None:  # float64: onnxruntime has no float64 Erf
        c = math.sqrt(2 / math.pi)
        f = (lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2)))) if approximate == "none" else (
            lambda v: 0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v ** 3))))
        want = [np.array([f(float(v)) for v in x.ravel()], dt).reshape(x.shape)]
    assert_same(got, want, **tol(dt))


def test_activation_defaults_match_ort(rng: np.random.Generator) -> None:
    x = rand(rng, F32, (4, 8), -4, 4)
    for op, opset in [("LeakyRelu", 16), ("Elu", 22), ("Selu", 22), ("Celu", 12), ("HardSigmoid", 22),
                      ("ThresholdedRelu", 22), ("Shrink", 9), ("Swish", 24), ("Gelu", 20)]:
        against_ort(model(op, {"x": x}, opset=opset), {"x": x})


def test_special_values_float32() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1e30, -1e30, 88.0, -88.0, 2.5, -2.5], np.float32)
    for op in ["Relu", "Sigmoid", "Tanh", "Softplus", "Exp", "Abs", "Round", "Sign", "Elu", "Selu", "IsNaN"]:
        opset = 13 if op in ("Sigmoid", "Tanh", "Exp", "Abs", "Sign", "IsNaN") else 22
        against_ort(model(op, {"x": x}, opset=opset), {"x": x})


@pytest.mark.parametrize("dt", [F16, F32, F64], ids=ids)
def test_isinf_isnan(dt: np.dtype) -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -3.5, 7.0], dt)
    for neg in (0, 1):
        for pos in (0, 1):
            against_ort(model("IsInf", {"x": x}, opset=20, detect_negative=neg, detect_positive=pos), {"x": x})
    against_ort(model("IsNaN", {"x": x}, opset=20), {"x": x})


# -- unary integer ops ------------------------------------------------------------------------

UNARY_INT: dict[str, tuple[int, list[DT]]] = {"Abs": (13, INTS), "Neg": (13, SINTS), "Sign": (13, INTS), "Relu": (14, [np.dtype(np.int8), np.dtype(np.int32)]),
             "BitwiseNot": (18, INTS)}


@pytest.mark.parametrize("op", list(UNARY_INT))
def test_unary_int(op: str, rng: np.random.Generator) -> None:
    opset, dts = UNARY_INT[op]
    for dt in dts:
        x = rand(rng, dt, (3, 5), -100, 100)
        against_ort(model(op, {"x": x}, opset=opset), {"x": x})


@pytest.mark.parametrize("dt", INTS, ids=ids)
def test_shrink_int(dt: np.dtype, rng: np.random.Generator) -> None:
    x = rand(rng, dt, (4, 6), -10, 10)
    against_ort(model("Shrink", {"x": x}, opset=9, lambd=1.5, bias=0.5), {"x": x})


def test_int_wraps() -> None:
    x = np.array([-128, 127, 0, -1], np.int8)
    np.testing.assert_array_equal(run_glow(model("Abs", {"x": x}, opset=13), {"x": x})[0], np.array([-128, 127, 0, 1], np.int8))
    np.testing.assert_array_equal(run_glow(model("Neg", {"x": x}, opset=13), {"x": x})[0], np.array([-128, -127, 0, 1], np.int8))
    a, b = np.array([250, 3], np.uint8), np.array([10, 5], np.uint8)
    np.testing.assert_array_equal(run_glow(model("Add", {"a": a, "b": b}, opset=14), {"a": a, "b": b})[0], [4, 8])
    np.testing.assert_array_equal(run_glow(model("Sub", {"a": b, "b": a}, opset=14), {"a": b, "b": a})[0], [16, 2])


# -- binary ops -------------------------------------------------------------------------------

BINARY = {"Add": 14, "Sub": 14, "Mul": 14, "Div": 14, "Max": 13, "Min": 13, "Equal": 19, "Less": 13,
          "LessOrEqual": 16, "Greater": 13, "GreaterOrEqual": 16}
#: dtypes onnxruntime has no kernel for
BINARY_ORT_MISSING = {("Max", np.dtype(np.int16)), ("Max", np.dtype(np.uint16)), ("Min", np.dtype(np.int16)),
                      ("Min", np.dtype(np.uint16))}


@pytest.mark.parametrize("dt", FLOATS + INTS, ids=ids)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(op: str, dt: np.dtype, rng: np.random.Generator) -> None:
    a, b = rand(rng, dt, (2, 3, 4), -20, 20), rand(rng, dt, (3, 1), -20, 20)
    if op == "Div" and dt.kind in "iu":
        b[b == 0] = 3
    a.flat[:3] = b.flat[:3]  # some equal elements for the comparisons
    m = model(op, {"a": a, "b": b}, opset=BINARY[op])
    if (op, dt) in BINARY_ORT_MISSING:
        fn = {"Max": np.maximum, "Min": np.minimum}[op]
        assert_same(run_glow(m, {"a": a, "b": b}), [fn(a, b)])
    else:
        against_ort(m, {"a": a, "b": b}, **tol(dt))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_bfloat16_is_float32_rounded(op: str, rng: np.random.Generator) -> None:
    a, b = rand(rng, F32, (3, 4), 0.5, 9).astype(BF16), rand(rng, F32, (4,), 0.5, 9).astype(BF16)
    got = run_glow(model(op, {"a": a, "b": b}, opset=14), {"a": a, "b": b})[0]
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum, "Min": np.minimum}[op]
    want = fn(a.astype(F32), b.astype(F32)).astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(F32), want.astype(F32))


@pytest.mark.parametrize("dt", SINTS, ids=ids)
def test_div_int_truncates(dt: np.dtype) -> None:
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dt)
    b = np.array([2, 2, -2, -2, 3, 4, 5, -3], dt)
    got = run_glow(model("Div", {"a": a, "b": b}, opset=14), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, np.array([3, -3, -3, 3, 2, -1, 0, 0], dt))
    if dt in (np.int32, np.int64):
        against_ort(model("Div", {"a": a, "b": b}, opset=14), {"a": a, "b": b})


@pytest.mark.parametrize("dt", FLOATS + INTS, ids=ids)
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(fmod: int, dt: np.dtype, rng: np.random.Generator) -> None:
    a, b = rand(rng, dt, (3, 4), -20, 20), rand(rng, dt, (4,), -7, 7)
    b[b == 0] = 3
    m = model("Mod", {"a": a, "b": b}, opset=13, fmod=fmod)
    if fmod == 0 and dt.kind == "f":
        # onnxruntime refuses fmod=0 on floats (ONNX Mod-28 defines it as floor modulo)
        want = np.mod(a.astype(F64), b.astype(F64)).astype(dt)
        assert_same(run_glow(m, {"a": a, "b": b}), [want], **tol(dt))
    else:
        against_ort(m, {"a": a, "b": b})


def test_mod_signs() -> None:
    a = np.array([-4, 7, -7, 7, -7, 0], np.int32)
    b = np.array([3, -3, 3, 3, -3, -5], np.int32)
    got = run_glow(model("Mod", {"a": a, "b": b}, opset=13), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, [2, -2, 2, 1, -1, 0])  # sign of the divisor
    got = run_glow(model("Mod", {"a": a, "b": b}, opset=13, fmod=1), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, [-1, 1, -1, 1, -1, 0])  # sign of the dividend


def test_logical(rng: np.random.Generator) -> None:
    a, b = rand(rng, BOOL, (2, 3, 4)), rand(rng, BOOL, (3, 1))
    for op in ["And", "Or", "Xor", "Equal"]:
        against_ort(model(op, {"a": a, "b": b}, opset=13), {"a": a, "b": b})
    against_ort(model("Not", {"a": a}, opset=13), {"a": a})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op: str, rng: np.random.Generator) -> None:
    for dt in INTS:
        a, b = rand(rng, dt, (2, 3, 4), -100, 100), rand(rng, dt, (4,), -100, 100)
        against_ort(model(op, {"a": a, "b": b}, opset=18), {"a": a, "b": b})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(direction: str, rng: np.random.Generator) -> None:
    for dt in [UINTS[0], UINTS[2], UINTS[3]]:
        a, b = rand(rng, dt, (3, 4), 0, 200), rand(rng, dt, (4,), 0, 8)
        against_ort(model("BitShift", {"a": a, "b": b}, opset=11, direction=direction), {"a": a, "b": b})


def test_bitshift_signed_and_out_of_range() -> None:
    """BitShift-28: arithmetic right shift for signed kinds; shifts past the width give 0 / -1."""
    a = np.array([1, -8, 127, -128, -5, 5], np.int8)
    b = np.array([8, 1, 1, 9, -1, 9], np.int8)
    left = run_glow(model("BitShift", {"a": a, "b": b}, opset=28, direction="LEFT"), {"a": a, "b": b})[0]
    right = run_glow(model("BitShift", {"a": a, "b": b}, opset=28, direction="RIGHT"), {"a": a, "b": b})[0]
    np.testing.assert_array_equal(left, [0, -16, -2, 0, 0, 0])
    np.testing.assert_array_equal(right, [0, -4, 63, -1, -1, 0])


# -- Pow ----------------------------------------------------------------------------------------

POW_TYPES = [F16, F32, F64, np.dtype(np.int32), np.dtype(np.int64)]


@pytest.mark.parametrize("base", POW_TYPES, ids=ids)
def test_pow_mixed_types(base: np.dtype, rng: np.random.Generator) -> None:
    for exp in POW_TYPES:
        a, b = rand(rng, base, (3, 4), -4, 4), rand(rng, exp, (4,), 0, 4)
        got = against_ort(model("Pow", {"a": a, "b": b}, opset=15), {"a": a, "b": b}, **tol(base))
        assert got[0].dtype == base


def test_pow_int_negative_exponent() -> None:
    a = np.array([-3, -2, -1, -1, 1, 2, 3, 5], np.int64)
    b = np.array([-1, -2, -3, -2, -1, -2, -1, -1], np.int64)
    got = against_ort(model("Pow", {"a": a, "b": b}, opset=15), {"a": a, "b": b})
    np.testing.assert_array_equal(got[0], [0, 0, -1, 1, 1, 0, 0, 0])


def test_pow_bfloat16_exponent_int(rng: np.random.Generator) -> None:
    a = rand(rng, F32, (5,), 0.5, 3).astype(BF16)
    b = np.array([0, 1, 2, 3, -1], np.int32)
    got = run_glow(model("Pow", {"a": a, "b": b}, opset=15), {"a": a, "b": b})[0]
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(F32), np.power(a.astype(F64), b).astype(BF16).astype(F32))


# -- PRelu, Where, Clip -------------------------------------------------------------------------


@pytest.mark.parametrize("dt", [F16, F32, F64, np.dtype(np.int32), np.dtype(np.int64)], ids=ids)
def test_prelu(dt: np.dtype, rng: np.random.Generator) -> None:
    x = rand(rng, dt, (2, 3, 4), -5, 5)
    for slope_shape in [(4,), (3, 1), (1,), (2, 3, 4)]:
        s = rand(rng, dt, slope_shape, -2, 2)
        against_ort(model("PRelu", {"x": x, "s": s}, opset=16), {"x": x, "s": s}, **tol(dt))


def test_prelu_slope_must_broadcast_to_input() -> None:
    x, s = np.zeros((3,), np.float32), np.zeros((2, 3), np.float32)
    with pytest.raises(Exception, match="Slope"):
        import_model(model("PRelu", {"x": x, "s": s}, opset=16))


@pytest.mark.parametrize("dt", [F16, F32, F64, np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64),
                                np.dtype(np.uint8), np.dtype(np.uint32)], ids=ids)
def test_where(dt: np.dtype, rng: np.random.Generator) -> None:
    c, a, b = rand(rng, BOOL, (3, 1)), rand(rng, dt, (2, 3, 4)), rand(rng, dt, (4,))
    against_ort(model("Where", {"c": c, "a": a, "b": b}, opset=16), {"c": c, "a": a, "b": b})


def test_where_bool_and_bfloat16() -> None:
    c = np.array([True, False, True])
    for dt in [BOOL, BF16, np.dtype(np.uint16)]:
        a, b = np.array([1, 0, 1]).astype(dt), np.array([0, 1, 0]).astype(dt)
        got = run_glow(model("Where", {"c": c, "a": a, "b": b}, opset=16), {"c": c, "a": a, "b": b})[0]
        assert got.dtype == dt
        np.testing.assert_array_equal(got.astype(np.int64), [1, 1, 1])


@pytest.mark.parametrize("dt", [F16, F32, F64, np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64),
                                np.dtype(np.uint8), np.dtype(np.uint32), np.dtype(np.uint64)], ids=ids)
def test_clip_operands(dt: np.dtype, rng: np.random.Generator) -> None:
    x = rand(rng, dt, (3, 4), -10, 10)
    lo, hi = np.array(rand(rng, dt, (), -3, 1)), np.array(rand(rng, dt, (), 2, 5))
    against_ort(model("Clip", {"x": x, "lo": lo, "hi": hi}, opset=13), {"x": x, "lo": lo, "hi": hi})
    against_ort(model("Clip", {"x": x, "hi": hi}, opset=13, order=["x", "", "hi"]), {"x": x, "hi": hi})
    against_ort(model("Clip", {"x": x, "lo": lo}, opset=13), {"x": x, "lo": lo})
    against_ort(model("Clip", {"x": x}, opset=13), {"x": x})
    against_ort(model("Clip", {"x": x}, opset=13, initializers={"lo": lo, "hi": hi}), {"x": x})
    # min > max: everything becomes max
    against_ort(model("Clip", {"x": x}, opset=13, initializers={"lo": hi, "hi": lo}), {"x": x})


@pytest.mark.parametrize("opset", [7, 10])
@pytest.mark.parametrize("dt", [F16, F32], ids=ids)
def test_clip_attributes(opset: int, dt: np.dtype, rng: np.random.Generator) -> None:
    x = rand(rng, dt, (3, 4), -10, 10)
    x.flat[:2] = [np.inf, -np.inf]
    against_ort(model("Clip", {"x": x}, opset=opset, min=-1.5), {"x": x})
    against_ort(model("Clip", {"x": x}, opset=opset, max=2.0), {"x": x})
    against_ort(model("Clip", {"x": x}, opset=opset, min=-1.0, max=1.0), {"x": x})
    against_ort(model("Clip", {"x": x}, opset=opset), {"x": x})  # defaults: the float32 limits


def test_clip_nan_bound_does_not_clip() -> None:
    x = np.array([np.nan, -3.0, 0.5, 4.0], np.float32)
    lo, hi = np.array(np.nan, np.float32), np.array(1.0, np.float32)
    against_ort(model("Clip", {"x": x}, opset=13, initializers={"lo": lo, "hi": hi}), {"x": x})


# -- variadic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_variadic(op: str, n: int, rng: np.random.Generator) -> None:
    dts: list[DT] = [F32, F16, F64] + ([np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)] if op in ("Max", "Min") else [])
    shapes = [(3, 1, 4), (2, 1), (4,), (1,)][:n]
    fold = {"Sum": np.add, "Mean": np.add, "Max": np.maximum, "Min": np.minimum}[op]
    for dt in dts:
        feeds = {f"x{i}": rand(rng, dt, s) for i, s in enumerate(shapes)}
        m = model(op, feeds, opset=13)
        got = run_glow(m, feeds)
        arrays = [a.astype(F64) if dt.kind == "f" else a for a in feeds.values()]
        ref = arrays[0]
        for a in arrays[1:]:
            ref = fold(ref, a)
        ref = (ref / n if op == "Mean" else ref).astype(dt)
        assert_same(got, [ref], **tol(dt))
        want = ort_or_none(m, feeds)
        if want is not None:
            assert_same(got, want, **tol(dt))
    feeds = {f"x{i}": rand(rng, F32, s) for i, s in enumerate(shapes)}
    against_ort(model(op, feeds, opset=8), feeds)


def test_sum_imports_as_add_chain() -> None:
    feeds = {f"x{i}": np.ones((2, 3), np.float32) for i in range(4)}
    fn = import_model(model("Sum", feeds, opset=13))
    assert fn.count_by_kind() == {"Add": 3}


def test_greater_is_less_with_swapped_operands() -> None:
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((3,), np.float32)}
    fn = import_model(model("Greater", feeds, opset=13))
    (node,) = fn.nodes
    assert node.kind.name == "Less"
    assert [v.name for v in node.inputs if v is not None] == ["b", "a"]


def test_constant_operands_fold() -> None:
    x = np.array([1.0, -2.0], np.float32)
    m = model("Add", {"x": x}, opset=14, initializers={"c1": np.array([3.0, 4.0], np.float32)},
              order=["c1", "c1"])
    m.graph.input.pop()  # no runtime inputs at all
    fn = import_model(m)
    assert fn.nodes == []
    out = fn.outputs[0][1]
    assert isinstance(out, Constant)
    np.testing.assert_array_equal(out.payload, [6.0, 8.0])


# -- Cast ---------------------------------------------------------------------------------------


def _cast_source(dt: np.dtype, rng: np.random.Generator) -> np.ndarray:
    x = rand(rng, dt, (4, 5), -300, 300)
    if dt.kind == "f":
        x.flat[:6] = [0.0, -0.0, 1.5, -2.7, 0.5, -0.5]
    return x


@pytest.mark.parametrize("src", [d for d in ALL if d != BF16], ids=ids)
def test_cast(src: np.dtype, rng: np.random.Generator) -> None:
    x = _cast_source(src, rng)
    for to in ALL:
        if to == BF16:
            continue  # onnxruntime has no CPU bfloat16 cast: see test_cast_bfloat16
        if src.kind == "f" and to.kind in "iu":
            # out of range float -> int is undefined in ONNX: keep in range
            info = np.iinfo(to)
            x = np.clip(x, max(info.min, -60000), min(info.max, 60000)).astype(src)
        m = model("Cast", {"x": x}, opset=21, to=helper.np_dtype_to_tensor_dtype(to))
        got = against_ort(m, {"x": x})
        assert got[0].dtype == to
        like = np.zeros((1,), to)
        against_ort(model("CastLike", {"x": x, "like": like}, opset=21), {"x": x, "like": like})


def test_cast_bfloat16() -> None:
    x = np.array([1.0, 1.00390625, 1.01171875, -2.7, 3e38, np.inf, np.nan, 0.0], np.float32)
    got = run_glow(model("Cast", {"x": x}, opset=21, to=TensorProto.BFLOAT16), {"x": x})[0]
    assert got.dtype == BF16
    # round to nearest even: 1 + 2^-8 (a tie) -> 1.0; 1 + 3*2^-8 (a tie) -> 1 + 2^-6
    np.testing.assert_array_equal(got.astype(F32)[:4], np.array([1.0, 1.0, 1.015625, -2.703125], np.float32))
    assert np.isinf(got[5].astype(F32)) and np.isnan(got[6].astype(F32))
    back = run_glow(model("Cast", {"x": got}, opset=21, to=TensorProto.INT32), {"x": got})[0]
    np.testing.assert_array_equal(back[:4], [1, 1, 1, -2])
    i = np.array([0, 1, -3, 257, 259], np.int64)
    got = run_glow(model("Cast", {"x": i}, opset=21, to=TensorProto.BFLOAT16), {"x": i})[0]
    np.testing.assert_array_equal(got.astype(F32), [0, 1, -3, 256, 260])  # ties to even


def test_cast_float_to_int_truncates_and_to_bool() -> None:
    x = np.array([2.7, -2.7, 0.5, -0.5, 0.0, -0.0, np.nan], np.float32)
    got = run_glow(model("Cast", {"x": x[:6]}, opset=13, to=TensorProto.INT32), {"x": x[:6]})[0]
    np.testing.assert_array_equal(got, [2, -2, 0, 0, 0, 0])
    got = run_glow(model("Cast", {"x": x}, opset=13, to=TensorProto.BOOL), {"x": x})[0]
    np.testing.assert_array_equal(got, [True, True, True, True, False, False, True])
    i = np.array([200, -200, 255, 256], np.int32)
    got = run_glow(model("Cast", {"x": i}, opset=13, to=TensorProto.INT8), {"x": i})[0]
    np.testing.assert_array_equal(got, [-56, 56, -1, 0])  # wraps


def test_cast_to_same_type_is_identity() -> None:
    x = np.ones((2,), np.float32)
    fn = import_model(model("Cast", {"x": x}, opset=13, to=TensorProto.FLOAT))
    assert fn.nodes == []


# -- unsupported --------------------------------------------------------------------------------


# (float8, float4e2m1, int4 / int2 targets are tested in test_lowprec.py)
@pytest.mark.parametrize("to", [TensorProto.STRING, TensorProto.COMPLEX64])
def test_cast_unsupported_targets(to: int) -> None:
    x = np.ones((2,), np.float32)
    with pytest.raises(UnsupportedError, match="not supported"):
        import_model(model("Cast", {"x": x}, opset=21, to=to))


@pytest.mark.parametrize("op, dt, opset, attrs", [
    ("Erf", np.int32, 9, {}),
    ("Gelu", np.float32, 20, {"approximate": "exact"}),
])
def test_unsupported(op: str, dt: type, opset: int, attrs: dict[str, Any]) -> None:
    """Valid models (the schema takes the type) that glow does not run."""
    x: np.ndarray = np.ones((2, 3), dt)
    with pytest.raises(UnsupportedError):
        import_model(model(op, {"x": x}, opset=opset, **attrs))


@pytest.mark.parametrize("op, dt, opset, attrs, since", [
    ("Sqrt", np.int64, 13, {}, ""),
    ("Neg", np.uint8, 13, {}, ""),
    ("Mean", np.int32, 13, {}, ""),
    ("Clip", np.int32, 10, {"min": 0.0}, " (int32 is allowed from opset 12)"),
])
def test_a_type_the_schema_does_not_take_is_an_invalid_model(op: str, dt: type, opset: int, attrs: dict[str, Any],
                                                           since: str) -> None:
    """These once counted as unsupported; the op's schema at that opset does not take the type, so the model
    breaks the op's definition: a ModelError naming the op, the type, the opset (and the first opset that
    takes it)."""
    x: np.ndarray = np.ones((2, 3), dt)
    with pytest.raises(ModelError, match=rf"\({op}, opset {opset}\).* which {op} does not accept at opset {opset}"
                       + since.replace("(", r"\(").replace(")", r"\)")):
        import_model(model(op, {"x": x}, opset=opset, **attrs))


def test_mod_with_fmod_outside_0_1_is_an_invalid_model() -> None:
    """The spec allows fmod 0 or 1 only: another value is a model error (the importer's flag check), not a
    valid model glow cannot run."""
    a = np.ones((2,), np.int32)
    with pytest.raises(ModelError, match="'fmod' = 2 must be 0 or 1"):
        import_model(model("Mod", {"a": a, "b": a}, opset=13, fmod=2))
