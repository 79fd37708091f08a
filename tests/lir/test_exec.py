"""The interpreter runs the LIR on one arena: alignment, isolation of caller memory, options, and a
differential test against the node-by-node executor on random graphs (views, in-place, copies)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from glow_backend_interpreter.backend import GraphExecutable
from glow_backend_interpreter.lir_exec import LIRExecutable, aligned_arena, region
from onnx import TensorProto, helper

import glow_core
from glow_core.errors import BackendError
from glow_core.ir.graph import Function, Value
from glow_core.lir import format_lir
from glow_core.lir.ir import ALIGNMENT
from glow_core.lircompiler import lir_of
from tests.lir.lirutil import check_same, compile_interpreter, f32, node


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 1000, 4096 + 3])
def test_arena_is_aligned(nbytes: int) -> None:
    for _ in range(5):
        a = aligned_arena(nbytes)
        assert a.nbytes == nbytes and a.dtype == np.uint8
        assert nbytes == 0 or a.ctypes.data % ALIGNMENT == 0  # (an empty slice has no meaningful address)


def test_region_views_the_right_bytes() -> None:
    base = np.arange(16, dtype=np.float32)
    r = region(base, 8, f32(2, 3))
    np.testing.assert_array_equal(r, [[2, 3, 4], [5, 6, 7]])
    assert np.shares_memory(r, base)


def mlp() -> Function:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 8))
    h = node(fn, "Relu", node(fn, "MatMul", x, fn.add_constant(np.full((8, 16), 0.1, np.float32), "w1")))
    h = node(fn, "Tanh", node(fn, "MatMul", h, fn.add_constant(np.full((16, 4), 0.2, np.float32), "w2")))
    fn.set_output("y", h)
    fn.set_output("x_out", x)
    return fn


def test_caller_memory_is_isolated_and_runs_repeat() -> None:
    exe = compile_interpreter(mlp())
    assert isinstance(exe, LIRExecutable) and exe.memory.arena_bytes > 0
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    keep = x.copy()
    first = exe.execute({"x": x})
    second = exe.execute({"x": x})
    np.testing.assert_array_equal(x, keep)
    for k in first:
        np.testing.assert_array_equal(first[k], second[k])
        assert not np.shares_memory(first[k], second[k]) and not np.shares_memory(first[k], x)
    want = GraphExecutable(mlp()).execute({"x": x})
    np.testing.assert_array_equal(first["y"], want["y"])


def test_executor_option() -> None:
    assert isinstance(compile_interpreter(mlp(), executor="graph"), GraphExecutable)
    assert isinstance(compile_interpreter(mlp(), executor="lir"), LIRExecutable)
    with pytest.raises(BackendError, match="unknown interpreter executor"):
        compile_interpreter(mlp(), executor="jit")


def test_compile_an_onnx_model_reports_memory() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Neg", ["s"], ["n"]),
         helper.make_node("Reshape", ["n", "shape"], ["y"]), helper.make_node("Identity", ["x"], ["z"])],
        "g", [x], [y, z], [helper.make_tensor("shape", TensorProto.INT64, [2], [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    net = glow_core.compile(model, "interpreter", debug=True)
    feeds = {"x": np.array([[0.0, 1.0, -2.0, 3.0]], np.float32)}
    out = net.run(feeds)
    np.testing.assert_allclose(out["y"], (-1 / (1 + np.exp(-feeds["x"]))).reshape(2, 2), rtol=1e-6)
    np.testing.assert_array_equal(out["z"], feeds["x"])
    report = net.executable.memory
    assert report.arena_bytes >= report.lower_bound_bytes
    assert "Sigmoid" in net.executable.lir.dump()
    assert lir_of(net) is net.executable.lir
    fresh = lir_of(net.function)
    assert fresh is not net.executable.lir and fresh.plan is not None
    assert format_lir(fresh) == format_lir(net.executable.lir)
    with pytest.raises(TypeError):
        lir_of(42)


# -- random graphs: the arena run must equal the node-by-node run bit for bit ------------------------------------
UNARY = ("Neg", "Abs", "Relu", "Tanh", "Sigmoid", "Floor")
BINARY = ("Add", "Sub", "Mul", "Max")
DIMS = (2, 3, 4, 6)


def random_function(seed: int) -> Function:
    rng = np.random.default_rng(seed)
    fn = Function(f"random{seed}")
    vals: list[Value] = [fn.add_input("x0", f32(4, 6)), fn.add_input("x1", f32(int(rng.choice(DIMS)), 6))]

    def pick() -> Value:
        return vals[int(rng.integers(len(vals)))] if rng.random() < 0.5 else vals[-1 - int(rng.integers(min(3, len(vals))))]

    for _ in range(int(rng.integers(8, 30))):
        a = pick()
        r, c = a.type.shape
        op = rng.choice(["unary", "binary", "bcast", "reshape", "transpose", "rows", "cols", "concat", "matmul"])
        if op == "unary":
            v = node(fn, str(rng.choice(UNARY)), a)
        elif op == "binary":
            same = [b for b in vals if b.type == a.type]
            v = node(fn, str(rng.choice(BINARY)), a, same[int(rng.integers(len(same)))])
        elif op == "bcast":
            row = fn.add_constant(rng.standard_normal((1, c)).astype(np.float32))
            v = node(fn, str(rng.choice(BINARY)), *((a, row) if rng.random() < 0.5 else (row, a)))
        elif op == "reshape":
            v = node(fn, "Reshape", a, shape=(c, r))
        elif op == "transpose":
            v = node(fn, "Transpose", a, perm=(1, 0))
        elif op == "rows" and r > 1:
            k = int(rng.integers(1, r))
            s = int(rng.integers(0, r - k + 1))
            v = node(fn, "Slice", a, starts=(s, 0), sizes=(k, c), steps=(1, 1))
        elif op == "cols" and c > 1:
            v = node(fn, "Slice", a, starts=(0, 1), sizes=(r, c - 1), steps=(1, 1))
        elif op == "concat":
            same = [b for b in vals if b.type.shape[1] == c]
            v = node(fn, "Concat", a, same[int(rng.integers(len(same)))], axis=0)
        else:
            n = int(rng.choice(DIMS))
            v = node(fn, "MatMul", a, fn.add_constant(rng.standard_normal((c, n)).astype(np.float32)))
        if v.type.shape[0] <= 24:
            vals.append(v)
    outs = [vals[-1]] + [vals[int(rng.integers(len(vals)))] for _ in range(int(rng.integers(0, 4)))]
    for i, v in enumerate(outs):
        fn.set_output(f"out{i}", v)
    return fn


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_match_the_graph_executor(seed: int) -> None:
    fn = random_function(seed)
    fn.verify()
    check_same(fn)
