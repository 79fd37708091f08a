"""Lowering of the reduction, scan and softmax kinds: the primitives-only interpreter against the interpreter.

Each case builds one node in a Function, runs it natively on ``interpreter``
and lowered on ``interpreter-primitives``, asserts the results agree (exactly
for integers, within rounding for floats) and that the lowered function holds
primitive kinds only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from glow_core.pipeline import compile_options, prepare_function
from glow_core.ir.graph import Function
from glow_core.ir.kinds import Category
from glow_core.ir.types import TensorType
from glow_core.plugin_host import get_backend

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)
I8, U8, I32, I64, U64 = (np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.int64, np.uint64))
FLOATS = [F32, F16, BF16, F64]
INTS = [I8, U8, I32, I64, U64]

#: (rtol, atol) by result dtype: float16/bfloat16 results may differ by one rounding
TOLERANCES = {F16: (2e-3, 1e-4), BF16: (1.6e-2, 1e-3), F32: (2e-5, 1e-6), F64: (1e-12, 1e-14)}


# -- harness (shared with test_norm) -----------------------------------------------------------------

def build(kind: str, operands: Sequence[np.ndarray | None], attrs: dict[str, Any]) -> Function:
    """A function of one ``kind`` node whose operands are inputs in0, in1, ... (None: omitted)."""
    fn = Function("main")
    values = [None if a is None else fn.add_input(f"in{i}", TensorType.of(a)) for i, a in enumerate(operands)]
    node = fn.create(kind, values, attrs, name=kind.lower())
    for i, out in enumerate(node.outputs):
        fn.set_output(f"out{i}", out)
    return fn


def run(kind: str, operands: Sequence[np.ndarray | None], attrs: dict[str, Any],
        backend: str) -> tuple[list[np.ndarray], Function]:
    """Prepare (optimize + lower) and run the one-node function on ``backend``."""
    fn = build(kind, operands, attrs)
    n_out = len(fn.outputs)
    be = get_backend(backend)
    prepare_function(fn, be, debug=True)
    exe = be.compile(fn, compile_options())
    out = exe.execute({f"in{i}": a for i, a in enumerate(operands) if a is not None})
    return [out[f"out{i}"] for i in range(n_out)], fn


def assert_primitive_only(fn: Function) -> None:
    others = [n.where() for n in fn.nodes if not n.kind.is_(Category.PRIMITIVE)]
    assert not others, f"non-primitive nodes left after lowering: {others}"


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], tol: tuple[float, float] | None = None) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype in TOLERANCES:
            rtol, atol = tol or TOLERANCES[w.dtype]
            np.testing.assert_allclose(g.astype(F64), w.astype(F64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def check_lowering(kind: str, operands: Sequence[np.ndarray | None], attrs: dict[str, Any],
                   tol: tuple[float, float] | None = None) -> list[np.ndarray]:
    """Lowered (primitives) == native (interpreter); the lowered function is primitive-only."""
    want, native = run(kind, operands, attrs, "interpreter")
    assert native.nodes_of(kind), f"{kind} should run natively on the interpreter"
    got, lowered = run(kind, operands, attrs, "interpreter-primitives")
    assert_primitive_only(lowered)
    assert_close(got, want, tol)
    return got


def rand(shape: Sequence[int], dtype: np.dtype, lo: float = -3, hi: float = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype == BF16:
        return rng.uniform(lo, hi, tuple(shape)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, tuple(shape)).astype(dtype)


# -- reductions --------------------------------------------------------------------------------------

ARITH = ["ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare"]
LOGS = ["ReduceLogSum", "ReduceLogSumExp"]
AXES = [(1,), (0, 2), (0, 1, 2), ()]


def _reduce_input(kind: str, dtype: np.dtype, shape: Sequence[int] = (2, 3, 4)) -> np.ndarray:
    if kind == "ReduceLogSum":
        return rand(shape, dtype, 0.1, 3)
    if dtype.kind in "iu":
        return rand(shape, dtype, -100, 100)  # large enough that x*x and the sums wrap in 8 bits
    return rand(shape, dtype)


def _cases(dtypes: Sequence[np.dtype]) -> list[Any]:
    """(kind, dtype) pairs; the log reductions are defined for floats only."""
    return [pytest.param(k, d, id=f"{k}-{d}") for k in ARITH + LOGS for d in dtypes if k in ARITH or d in FLOATS]


@pytest.mark.parametrize("kind,dtype", _cases(FLOATS + INTS))
def test_reduction(kind: str, dtype: np.dtype) -> None:
    x = _reduce_input(kind, dtype)
    for axes in AXES:
        for keepdims in (True, False):
            check_lowering(kind, [x], {"axes": axes, "keepdims": keepdims})


@pytest.mark.parametrize("kind,dtype", _cases([F32, F16, I32, U8]))
def test_reduction_of_an_empty_set(kind: str, dtype: np.dtype) -> None:
    x = np.zeros((2, 0, 3), dtype)
    for axes in ((1,), (0, 1, 2), (0, 2)):
        for keepdims in (True, False):
            got = check_lowering(kind, [x], {"axes": axes, "keepdims": keepdims})[0]
            if kind == "ReduceMean" and dtype.kind == "f" and 1 in axes:
                assert np.isnan(got).all()


def test_integer_mean_truncates_toward_zero() -> None:
    x = np.array([[-7, 0, 0], [7, 1, 0], [-1, -1, 0], [-128, -128, 1]], np.int8)
    got = check_lowering("ReduceMean", [x], {"axes": (1,), "keepdims": False})[0]
    # the int8 sum of the last row wraps to 1
    np.testing.assert_array_equal(got, np.array([-2, 2, 0, 0], np.int8))


def test_integer_mean_of_more_elements_than_the_kind_holds() -> None:
    # 200 int8 elements: the count does not fit int8; the wrapped sum is divided in 64 bits
    x = rand((2, 200), I8, -128, 127, seed=3)
    got, fn = run("ReduceMean", [x], {"axes": (1,), "keepdims": True}, "interpreter-primitives")
    assert_primitive_only(fn)
    s = x.sum(axis=1, keepdims=True, dtype=np.int8).astype(np.int64)
    want = (np.sign(s) * (np.abs(s) // 200)).astype(np.int8)
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_log_sum_exp_is_stable_and_handles_infinities(dtype: np.dtype) -> None:
    x = np.array([[1000, 999, -1000, 0], [-np.inf] * 4, [np.inf, 1, 2, 3], [np.nan, 1, 2, 3],
                  [-np.inf, 0, -np.inf, 1]], dtype)
    for keepdims in (True, False):
        got = check_lowering("ReduceLogSumExp", [x], {"axes": (1,), "keepdims": keepdims})[0].reshape(-1)
        assert np.isfinite(got[0]) and got[1] == -np.inf and got[2] == np.inf and np.isnan(got[3])


# -- CumSum / CumProd ----------------------------------------------------------------------------------

SCAN_FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def _scan_input(kind: str, dtype: np.dtype, shape: Sequence[int], seed: int) -> np.ndarray:
    if kind == "CumProd" and dtype.kind not in "iu":
        return rand(shape, dtype, 0.5, 1.5, seed)
    return rand(shape, dtype, -100, 100, seed)  # integers wrap: the scan must stay exact anyway


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64, I8, U8, I32, I64, U64], ids=str)
@pytest.mark.parametrize("kind", ["CumSum", "CumProd"])
def test_scan(kind: str, dtype: np.dtype) -> None:
    for n in (0, 1, 2, 3, 5, 8, 13):
        x = _scan_input(kind, dtype, (2, n, 3), seed=n)
        for exclusive, reverse in SCAN_FLAGS:
            for axis in (1, 2):
                check_lowering(kind, [x], {"axis": axis, "exclusive": exclusive, "reverse": reverse})


@pytest.mark.parametrize("kind", ["CumSum", "CumProd"])
def test_scan_of_a_long_axis_is_exact_for_integers(kind: str) -> None:
    x = rand((1000,), I64, -1000, 1000, seed=7)
    for exclusive, reverse in SCAN_FLAGS:
        got = check_lowering(kind, [x], {"axis": 0, "exclusive": exclusive, "reverse": reverse})[0]
        ufunc = np.add if kind == "CumSum" else np.multiply
        a = x[::-1] if reverse else x
        want = ufunc.accumulate(a, dtype=np.int64)
        if exclusive:
            want = np.concatenate([[0 if kind == "CumSum" else 1], want[:-1]]).astype(np.int64)
        np.testing.assert_array_equal(got, want[::-1] if reverse else want)


def test_scan_uses_a_logarithmic_number_of_steps() -> None:
    x = rand((1, 1000), F32)
    _, fn = run("CumSum", [x], {"axis": 1, "exclusive": False, "reverse": False}, "interpreter-primitives")
    assert len(fn.nodes_of("Add")) == 10  # ceil(log2(1000))


# -- softmax family ----------------------------------------------------------------------------------

SOFTMAX = ["Softmax", "LogSoftmax", "Hardmax"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("kind", SOFTMAX)
def test_softmax_family(kind: str, dtype: np.dtype) -> None:
    x = rand((2, 3, 4, 5), dtype, -5, 5)
    for axes in ((3,), (1,), (0,), (2, 3), (1, 2, 3), (0, 2)):
        check_lowering(kind, [x], {"axes": axes})


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("kind", ["Softmax", "LogSoftmax"])
def test_softmax_subtracts_the_max(kind: str, dtype: np.dtype) -> None:
    big = 60000 if dtype == F16 else 1e4  # exp overflows without the max subtracted
    x = np.array([[big, big - 1, big - 2], [-big, -big, -big], [-np.inf, 0, 1]], dtype)
    got = check_lowering(kind, [x], {"axes": (1,)})[0]
    assert np.isfinite(got[:2]).all()


@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_hardmax_picks_the_first_maximum(dtype: np.dtype) -> None:
    x = np.array([[[1, 3], [3, 0]], [[2, 2], [2, 2]], [[0, np.nan], [5, np.nan]]], dtype)
    got = check_lowering("Hardmax", [x], {"axes": (1, 2)})[0]
    np.testing.assert_array_equal(got, np.array([[[0, 1], [0, 0]], [[1, 0], [0, 0]], [[0, 1], [0, 0]]], dtype))
    check_lowering("Hardmax", [x], {"axes": (1,)})
    check_lowering("Hardmax", [x], {"axes": (0, 2)})


@pytest.mark.parametrize("kind", SOFTMAX)
def test_softmax_family_degenerate_shapes(kind: str) -> None:
    scalar = np.array(2.5, np.float32)  # rank 0 (the importer refuses it; the kind allows it)
    if kind == "Hardmax":  # the native kernel returns a [1] array for rank 0: compare with the definition
        got, fn = run(kind, [scalar], {"axes": ()}, "interpreter-primitives")
        assert_primitive_only(fn)
        assert got[0].shape == () and got[0] == 1
    else:
        check_lowering(kind, [scalar], {"axes": ()})
    check_lowering(kind, [np.zeros((2, 0, 3), np.float32)], {"axes": (1,)})  # empty
    check_lowering(kind, [np.zeros((0, 3), np.float32)], {"axes": (1,)})  # empty outer
    check_lowering(kind, [rand((3, 1, 2), F32)], {"axes": (1,)})  # one candidate per row

