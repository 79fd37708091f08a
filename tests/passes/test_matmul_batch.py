"""batch-shared-matmuls: few-row products sharing a large constant weight become one product."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passes.matmul_batch import MAX_BATCH_ROWS, MIN_WEIGHT_BYTES
from tests.passes.passutil import check, kinds

PASS = ("batch-shared-matmuls", "dce")
K, N = 256, 160  # 160 KiB of float32: above MIN_WEIGHT_BYTES


def _weight(fn: Function, k: int = K, n: int = N, seed: int = 0) -> Value:
    rng = np.random.default_rng(seed)
    return fn.add_constant(rng.standard_normal((k, n)).astype(np.float32), "w")


def _rows(fn: Function, count: int, k: int = K, rows: int = 1) -> list[Value]:
    return [fn.add_input(f"a{i}", TensorType(ElemKind.FLOAT32, (rows, k))) for i in range(count)]


def test_independent_products_share_one_read_of_the_weight() -> None:
    fn = Function()
    w = _weight(fn)
    assert w.type.nbytes >= MIN_WEIGHT_BYTES
    ys = [fn.create("MatMul", [a, w]).result for a in _rows(fn, 4)]
    for i, y in enumerate(ys):
        fn.set_output(f"y{i}", fn.create("Tanh", [y]).result)
    # the same dot products, but numpy may sum a vector-matrix product in another order than a matrix one
    assert check(fn, *PASS, rtol=1e-4, atol=1e-5)
    assert kinds(fn) == {"Concat": 1, "MatMul": 1, "Slice": 4, "Tanh": 4}
    cat = fn.nodes_of("Concat")[0]
    assert [v.name for v in cat.inputs] == ["a0", "a1", "a2", "a3"]  # type: ignore[union-attr]
    assert [s.attrs["starts"] for s in fn.nodes_of("Slice")] == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_a_product_that_needs_an_earlier_member_is_left_out() -> None:
    """h1 = a @ W; h2 = tanh(h1) @ W depends on h1: only a and b (independent) are batched."""
    fn = Function()
    w = _weight(fn, K, K)
    a, b = _rows(fn, 2)
    h1 = fn.create("MatMul", [a, w]).result
    h2 = fn.create("MatMul", [fn.create("Tanh", [h1]).result, w]).result
    hb = fn.create("MatMul", [b, w]).result
    for name, v in (("h1", h1), ("h2", h2), ("hb", hb)):
        fn.set_output(name, v)
    assert check(fn, *PASS, rtol=1e-4, atol=1e-5)
    assert kinds(fn) == {"Concat": 1, "MatMul": 2, "Slice": 2, "Tanh": 1}
    cat = fn.nodes_of("Concat")[0]
    assert [v.name for v in cat.inputs] == ["a0", "a1"]  # type: ignore[union-attr]


@pytest.mark.parametrize("case", ["small weight", "many rows", "weight not constant", "one product"])
def test_what_is_not_batched(case: str) -> None:
    fn = Function()
    k = 16 if case == "small weight" else K
    if case == "weight not constant":
        w: Value = fn.add_input("w", TensorType(ElemKind.FLOAT32, (K, N)))
    else:
        w = _weight(fn, k)
    count = 1 if case == "one product" else 3
    rows = 64 if case == "many rows" else 1
    for i, a in enumerate(_rows(fn, count, k, rows)):
        fn.set_output(f"y{i}", fn.create("MatMul", [a, w]).result)
    assert not check(fn, *PASS, rtol=1e-4, atol=1e-5)
    assert kinds(fn) == {"MatMul": count}


def test_batches_are_bounded_in_rows() -> None:
    fn = Function()
    w = _weight(fn)
    rows = 16
    count = MAX_BATCH_ROWS // rows + 2
    for i, a in enumerate(_rows(fn, count, rows=rows)):
        fn.set_output(f"y{i}", fn.create("MatMul", [a, w]).result)
    assert check(fn, *PASS, rtol=1e-4, atol=1e-5)
    assert kinds(fn)["MatMul"] == 2
    assert max(n.inputs[0].type.shape[0] for n in fn.nodes_of("MatMul")) <= MAX_BATCH_ROWS  # type: ignore[union-attr]


def _unrolled_lstm_like(steps: int = 6, k: int = 512, hidden: int = 64) -> onnx.ModelProto:
    """An LSTM-style recurrence exported step by step: x_t @ Wi (independent) + h @ Wh (recurrent)."""
    rng = np.random.default_rng(1)
    wi = numpy_helper.from_array((rng.standard_normal((4 * hidden, k)) * 0.05).astype(np.float32), "wi")
    bi = numpy_helper.from_array(rng.standard_normal(4 * hidden).astype(np.float32), "bi")
    wh = numpy_helper.from_array((rng.standard_normal((4 * hidden, hidden)) * 0.1).astype(np.float32), "wh")
    nodes, inits = [], [wi, bi, wh]
    h = "h0"
    inits.append(numpy_helper.from_array(np.zeros((1, hidden), np.float32), "h0"))
    for t in range(steps):
        inits.append(numpy_helper.from_array(np.array(t, np.int64), f"i{t}"))
        nodes += [helper.make_node("Gather", ["x", f"i{t}"], [f"x{t}"], axis=0),
                  helper.make_node("Gemm", [f"x{t}", "wi", "bi"], [f"gi{t}"], transB=1),
                  helper.make_node("Gemm", [h, "wh"], [f"gh{t}"], transB=1),
                  helper.make_node("Add", [f"gi{t}", f"gh{t}"], [f"g{t}"]),
                  helper.make_node("Slice", [f"g{t}", "s0", "s1", "ax"], [f"p{t}"]),
                  helper.make_node("Tanh", [f"p{t}"], [f"h{t + 1}"])]
        h = f"h{t + 1}"
    inits += [numpy_helper.from_array(np.array([0], np.int64), "s0"),
              numpy_helper.from_array(np.array([hidden], np.int64), "s1"),
              numpy_helper.from_array(np.array([1], np.int64), "ax")]
    g = helper.make_graph(nodes, "unrolled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, k])],
                          [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, hidden])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["cpu", "interpreter-primitives"])
def test_unrolled_recurrence_end_to_end(backend: str) -> None:
    """The input projections of every step are one product; the recurrent ones stay a chain."""
    from onnx.reference import ReferenceEvaluator

    model = _unrolled_lstm_like()
    x = np.random.default_rng(2).standard_normal((6, 1, 512)).astype(np.float32)
    net = glow_core.compile(model, backend, threads=2)
    products = [n for n in net.function.nodes if n.kind.name in ("MatMul", "FusedMatMul")]
    # (the first step's h0 @ Wh is a constant, folded away)
    assert sorted(n.inputs[0].type.shape[0] for n in products) == [1] * 5 + [6]  # type: ignore[union-attr]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(net.run({"x": x})[net.output_names[0]], want, rtol=1e-5, atol=1e-5)
