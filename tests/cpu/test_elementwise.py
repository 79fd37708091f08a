"""Element-wise kinds on the cpu backend against the interpreter: every kind x element kind, broadcasting,
sizes around the vector width, several threads, and fused chains (operator stacking)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.ir.types import ElemKind
from tests.cpu.util import check, rand

E = ElemKind
FLOATS = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
INTS = [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint32, np.uint64]

BINARY_NUMERIC = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Mod"]
UNARY_FLOAT = ["Sqrt", "Floor", "Ceil", "Round", "Exp", "Log", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
               "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Sigmoid", "Abs", "Neg", "Sign", "IsNaN"]


def _operand(kind: str, dtype, shape, rng):  # type: ignore[no-untyped-def]
    x = rand(shape, dtype, rng, low=-4, high=4)
    if kind in ("Sqrt", "Log", "Acosh"):
        x = np.abs(x.astype(np.float64)).astype(dtype) + dtype(1) if kind == "Acosh" else np.abs(x)
    if kind in ("Asin", "Acos", "Atanh"):
        x = (x.astype(np.float64) / 4.5).astype(dtype)
    return x


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", BINARY_NUMERIC)
def test_binary(kind: str, dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    a = rand((3, 37), dtype, rng, low=-50, high=50)
    b = rand((3, 37), dtype, rng, low=-9, high=9)
    if np.dtype(dtype).kind == "u":
        a = rand((3, 37), dtype, rng, low=0, high=200)
        b = rand((3, 37), dtype, rng, low=0, high=9)
    b.reshape(-1)[:3] = 0  # division and modulo by zero
    check(kind, [a, b])
    if kind == "Mod":
        check(kind, [a, b], {"fmod": True})


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", UNARY_FLOAT)
def test_unary_float(kind: str, dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2)
    x = _operand(kind, dtype, (5, 41), rng)
    x.reshape(-1)[:4] = np.array([0.0, -0.0, np.nan, 2.5], dtype=np.float64).astype(dtype)
    check(kind, [x])


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["Abs", "Neg", "Sign", "BitwiseNot"])
def test_unary_int(kind: str, dtype) -> None:  # type: ignore[no-untyped-def]
    if kind == "Neg" and np.dtype(dtype).kind == "u":
        pytest.skip("Neg is not defined for unsigned kinds")
    rng = np.random.default_rng(3)
    x = rand((70,), dtype, rng, low=-100, high=100)
    x[0] = np.iinfo(dtype).min
    check(kind, [x])


@pytest.mark.parametrize("kind", ["And", "Or", "Xor"])
def test_logical(kind: str) -> None:
    rng = np.random.default_rng(4)
    check(kind, [rand((4, 33), np.bool_, rng), rand((1, 33), np.bool_, rng)])
    check("Not", [rand((4, 33), np.bool_, rng)])


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["Equal", "Less", "LessOrEqual"])
def test_comparisons(kind: str, dtype) -> None:  # type: ignore[no-untyped-def]
    if dtype is np.bool_ and kind != "Equal":
        pytest.skip("only Equal is defined for bool")
    rng = np.random.default_rng(5)
    a = rand((6, 19), dtype, rng, low=-3, high=3)
    b = rand((19,), dtype, rng, low=-3, high=3)
    check(kind, [a, b])


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64], ids=lambda d: np.dtype(d).name)
def test_bitwise_and_shifts(dtype) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(6)
    a = rand((40,), dtype, rng, low=-100, high=100)
    b = rand((40,), dtype, rng, low=0, high=70)
    for kind in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check(kind, [a, b])
    for d in ("LEFT", "RIGHT"):
        check("BitShift", [a, b], {"direction": d})


@pytest.mark.parametrize("base,exp", [(np.float32, np.float32), (np.float32, np.int64), (np.int32, np.int32),
                                      (np.int64, np.int64), (np.uint8, np.uint8), (np.int32, np.float32),
                                      (np.float16, np.float16), (np.float64, np.float64)])
def test_pow(base, exp) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    a = rand((50,), base, rng, low=-4, high=4) if np.dtype(base).kind != "u" else rand((50,), base, rng, low=0, high=4)
    e = rand((50,), exp, rng, low=-3, high=5) if np.dtype(exp).kind != "u" else rand((50,), exp, rng, low=0, high=5)
    check("Pow", [a, e])


def test_where_broadcasts_three_ways() -> None:
    rng = np.random.default_rng(8)
    for dtype in (np.float32, np.int64, np.bool_, np.float16):
        check("Where", [rand((2, 1, 5), np.bool_, rng), rand((3, 5), dtype, rng), rand((2, 3, 1), dtype, rng)])


CAST_TYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int16, np.int32,
              np.int64, np.uint32, np.uint64, np.bool_]


@pytest.mark.parametrize("src", CAST_TYPES, ids=lambda d: np.dtype(d).name)
def test_cast_every_pair(src) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.standard_normal(60) * 300, [0.5, 1.5, 2.5, -0.5, -1.5, 255.5, 65520.0, 1e-8]])
    if np.dtype(src).kind in "iub":
        with np.errstate(all="ignore"):
            xs = x.astype(np.int64).astype(src)
    else:
        with np.errstate(all="ignore"):
            xs = x.astype(src)
    for dst in CAST_TYPES:
        check("Cast", [xs], {"to": E.from_dtype(np.dtype(dst)) if np.dtype(dst).name != "bfloat16" else E.BFLOAT16})


@pytest.mark.parametrize("shape_a,shape_b", [
    ((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (2, 1, 4, 1)), ((1,), (7, 1)),
    ((16,), (16,)), ((17,), (1,)), ((15,), (15,)), ((), ()), ((3, 0, 2), (2,)), ((65, 1, 9), (1, 33, 1)),
])
def test_broadcasting_and_vector_tails(shape_a, shape_b) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(10)
    check("Add", [rand(shape_a, np.float32, rng), rand(shape_b, np.float32, rng)])
    check("Max", [rand(shape_b, np.int32, rng), rand(shape_a, np.int32, rng)])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_operands_split_over_threads(threads: int) -> None:
    rng = np.random.default_rng(11)
    a = rand((3, 64, 211), np.float32, rng)
    b = rand((64, 1), np.float32, rng)
    check("Mul", [a, b], threads=threads, parallel_threshold=0)
    check("Exp", [a], threads=threads, parallel_threshold=0)


def test_constant_operands_are_immediates_and_match() -> None:
    rng = np.random.default_rng(12)
    check("Max", [rand((8, 100), np.float32, rng), np.zeros((), np.float32)], consts=[1])
    check("Sub", [np.full((3, 1), 2.5, np.float32), rand((3, 40), np.float32, rng)], consts=[0])


def _chain_model(n: int = 1 << 15) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8, n // 32])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [8, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8, n // 32])
    nodes = [
        helper.make_node("Add", ["x", "b"], ["t1"]),
        helper.make_node("Relu", ["t1"], ["t2"]),
        helper.make_node("Mul", ["t2", "x"], ["t3"]),
        helper.make_node("Sigmoid", ["t3"], ["t4"]),
        helper.make_node("Sub", ["t4", "t3"], ["y"]),
    ]
    return helper.make_model(helper.make_graph(nodes, "chain", [x, b], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_chain_is_one_kernel_and_matches(threads: int) -> None:
    model = _chain_model()
    net = glow_core.compile(model, "cpu", threads=threads, options={"parallel_threshold": 0})
    lay = net.executable.layout
    assert lay.kernels == 1 and lay.fused == 4, (lay.kernels, lay.fused)
    ref = glow_core.compile(model, "interpreter")
    rng = np.random.default_rng(13)
    feeds = {"x": rand((4, 8, 1024), np.float32, rng), "b": rand((8, 1), np.float32, rng)}
    got, want = net.run(feeds)["y"], ref.run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_chain_stops_where_an_intermediate_is_read_again() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1000])
    nodes = [helper.make_node("Exp", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["y"]),
             helper.make_node("Abs", ["t"], ["z"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y, z]), opset_imports=[helper.make_opsetid("", 17)])
    net = glow_core.compile(model, "cpu")
    assert net.executable.layout.fused == 0
    xs = np.linspace(-3, 3, 1000, dtype=np.float32)
    out = net.run({"x": xs})
    np.testing.assert_allclose(out["y"], -np.exp(xs), rtol=1e-6)
    np.testing.assert_allclose(out["z"], np.exp(xs), rtol=1e-6)
    assert math.isfinite(float(out["z"].sum()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, -1.0, 0.5, 0.75, 1.25])
def test_pow_by_a_constant_exponent(exponent: float, dtype) -> None:  # type: ignore[no-untyped-def]
    """Exponents 1, 2, 3, -1, 0.5 and 0.75 (LRN's beta) are computed without libm; special values agree."""
    rng = np.random.default_rng(14)
    x = np.concatenate([rng.random(100) * 10, [0.0, -0.0, np.inf, -np.inf, np.nan, -2.0, 1e-30]])
    with np.errstate(over="ignore"):
        check("Pow", [x.astype(dtype), np.array(exponent, dtype)], consts=[1])
