"""keep-compressed-weights: 8-bit weights dequantized in the graph stay 8-bit (DequantMatMul, Gather first).

Every case compares with the same model whose weights were dequantized beforehand (float initializers,
``float32(Wq) * S`` as numpy rounds it): the answer must be the same bits, since the kernels dequantize
each weight exactly as the Cast and the Mul do and then run the same float product.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.ir.graph import Function
from glow_core.pipeline.stages import compile_prepared, import_function, prepare_function
from glow_core.plugin_host import get_backend

BACKENDS = ("cpu", "interpreter")


def _quantized(rng: np.random.Generator, shape: tuple[int, ...], elem: str) -> np.ndarray:
    lo, hi = (-128, 128) if elem == "int8" else (0, 256)
    return rng.integers(lo, hi, shape).astype(elem)


def linear_model(m: tuple[int, ...], k: int, n: int, *, scale: str = "col", elem: str = "int8",
                 transposed: bool = False, bias: bool = True, relu: bool = False,
                 compressed: bool = True, scale_values: np.ndarray | None = None) -> onnx.ModelProto:
    """Y = [Relu](X @ W [+ b]) with W = Cast(Wq) * S (compressed) or its float value (not compressed)."""
    rng = np.random.default_rng(k * 1000 + n)
    qshape = (n, k) if transposed else (k, n)
    q = _quantized(rng, qshape, elem)
    sshape = {"col": (n,), "row": (k, 1), "one": (), "full": qshape}[scale]
    if transposed and scale == "col":
        sshape = (n, 1)
    elif transposed and scale == "row":
        sshape = (k,)
    s = scale_values if scale_values is not None else (rng.random(sshape) * 0.02 + 1e-3).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = []
    if compressed:
        inits += [numpy_helper.from_array(q, "wq"), numpy_helper.from_array(s, "ws")]
        nodes += [helper.make_node("Cast", ["wq"], ["wf"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["wf", "ws"], ["w"])]
    else:
        inits.append(numpy_helper.from_array(q.astype(np.float32) * s, "w"))
    if transposed:
        nodes.append(helper.make_node("Gemm", ["x", "w"] + (["b"] if bias else []), ["y0"], transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["mm"]))
        nodes.append(helper.make_node("Add", ["mm", "b"], ["y0"]) if bias else helper.make_node("Identity", ["mm"], ["y0"]))
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["y0"], ["y"]))
    out = (*m[:-1], n)
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(m))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def embedding_model(vocab: int, width: int, *, scale: str, compressed: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(vocab)
    q = _quantized(rng, (vocab, width), "int8")
    s = (rng.random((vocab, 1) if scale == "row" else (width,)) * 0.05 + 1e-3).astype(np.float32)
    if compressed:
        inits = [numpy_helper.from_array(q, "tq"), numpy_helper.from_array(s, "ts")]
        nodes = [helper.make_node("Cast", ["tq"], ["tf"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["tf", "ts"], ["table"])]
    else:
        inits, nodes = [numpy_helper.from_array(q.astype(np.float32) * s, "table")], []
    nodes.append(helper.make_node("Gather", ["table", "ids"], ["y"], axis=0))
    g = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, width])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _prepared(model: onnx.ModelProto, backend: str) -> Function:
    return prepare_function(import_function(model), get_backend(backend))


def _float_constants(fn: Function, min_size: int) -> list[tuple[int, ...]]:
    return [c.type.shape for c in fn.constants if c.type.elem.value == "float32" and c.type.size >= min_size]


def _run(model: onnx.ModelProto, backend: str, feeds: dict[str, np.ndarray], **kw: object) -> np.ndarray:
    return glow_core.compile(model, backend, **kw).run(feeds)[model.graph.output[0].name]  # type: ignore[arg-type]


CASES: dict[str, Callable[[bool], onnx.ModelProto]] = {
    "per-column+bias": lambda c: linear_model((1, 8, 64), 64, 96, compressed=c),
    "per-row": lambda c: linear_model((5, 70), 70, 128, scale="row", bias=False, compressed=c),
    "one-scale+relu": lambda c: linear_model((3, 96), 96, 64, scale="one", relu=True, compressed=c),
    "uint8-narrow-tail": lambda c: linear_model((2, 3, 120), 120, 100, elem="uint8", compressed=c),
    "decode-step-m1": lambda c: linear_model((1, 1, 256), 256, 200, compressed=c),
    "gemm-transB": lambda c: linear_model((4, 64), 64, 72, transposed=True, compressed=c),
    "gemm-transB-per-row": lambda c: linear_model((4, 64), 64, 72, scale="row", transposed=True, compressed=c),
    "long-k": lambda c: linear_model((7, 1500), 1500, 40, compressed=c),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compressed_weight_stays_8_bit_and_gives_the_same_bits(case: str, backend: str) -> None:
    model, plain = CASES[case](True), CASES[case](False)
    fn = _prepared(model, backend)
    kinds = [n.kind.name for n in fn.nodes]
    assert "DequantMatMul" in kinds and "MatMul" not in kinds and "FusedMatMul" not in kinds
    (mm,) = [n for n in fn.nodes if n.kind.name == "DequantMatMul"]
    assert mm.inputs[1].type.elem.value in ("int8", "uint8")
    assert not _float_constants(fn, 4096), "a float copy of the weight was made"
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    x = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    if case.startswith("gemm") and backend == "interpreter":
        # the interpreter runs the plain model's Gemm as one numpy product of the transposed weight, which
        # sums in another order than the matrix product the compressed one becomes: same answer, other rounding
        np.testing.assert_allclose(_run(model, backend, x), _run(plain, backend, x), rtol=1e-5, atol=1e-5)
        return
    np.testing.assert_array_equal(_run(model, backend, x), _run(plain, backend, x))


def test_bias_and_activation_move_into_the_node() -> None:
    fn = _prepared(linear_model((3, 96), 96, 64, relu=True), "cpu")
    assert [n.kind.name for n in fn.nodes] == ["DequantMatMul"]
    assert fn.nodes[0].inputs[3] is not None and fn.nodes[0].attrs["activation"] == "relu"


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_and_nan_scales_give_the_same_bits(backend: str) -> None:
    s = np.full((70, 1), 0.01, np.float32)
    s[3], s[9] = np.inf, np.nan
    model = linear_model((2, 70), 70, 100, scale="row", bias=False, scale_values=s)
    plain = linear_model((2, 70), 70, 100, scale="row", bias=False, scale_values=s, compressed=False)
    x = {"x": np.random.default_rng(4).standard_normal((2, 70)).astype(np.float32)}
    y = _run(model, backend, x)
    assert np.isnan(y).any()
    np.testing.assert_array_equal(y, _run(plain, backend, x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale", ["row", "col"])
def test_an_embedding_gathers_integer_rows(backend: str, scale: str) -> None:
    model, plain = embedding_model(3000, 48, scale=scale), embedding_model(3000, 48, scale=scale, compressed=False)
    fn = _prepared(model, backend)
    gathers = [n for n in fn.nodes if n.kind.name == "Gather"]
    assert any(g.inputs[0].type.elem.value == "int8" for g in gathers)
    assert not _float_constants(fn, 4096)
    ids = {"ids": np.array([[0, 5, 2999, 7, 7], [100, 1, 2, 3, 2048]], np.int64)}
    np.testing.assert_array_equal(_run(model, backend, ids), _run(plain, backend, ids))


def test_a_backend_without_the_kind_folds_the_weight_as_before() -> None:
    model = CASES["per-column+bias"](True)
    fn = _prepared(model, "interpreter-primitives")
    assert "DequantMatMul" not in [n.kind.name for n in fn.nodes]
    assert (64, 96) in _float_constants(fn, 4096)
    x = {"x": np.random.default_rng(5).standard_normal((1, 8, 64)).astype(np.float32)}
    np.testing.assert_array_equal(_run(model, "interpreter-primitives", x),
                                  _run(CASES["per-column+bias"](False), "interpreter-primitives", x))


def test_a_backend_that_receives_the_kind_without_running_it_lowers_it() -> None:
    """A graph prepared for a backend with DequantMatMul, then given to one without it (as a partition refused
    by its first device is): the lowering (Cast, Mul, MatMul, Add, activation) gives the same bits."""
    model = linear_model((3, 96), 96, 64, relu=True)
    fn = _prepared(model, "interpreter")
    assert [n.kind.name for n in fn.nodes] == ["DequantMatMul"]
    prims = get_backend("interpreter-primitives")
    lowered = prepare_function(fn, prims)
    assert "DequantMatMul" not in [n.kind.name for n in lowered.nodes]
    x = {"x": np.random.default_rng(7).standard_normal((3, 96)).astype(np.float32)}
    y = compile_prepared(lowered, prims).run(x)["y"]
    np.testing.assert_array_equal(y, _run(linear_model((3, 96), 96, 64, relu=True, compressed=False), "interpreter", x))


def test_what_the_pass_leaves_alone() -> None:
    full = _prepared(linear_model((3, 96), 96, 64, scale="full"), "cpu")
    assert "DequantMatMul" not in [n.kind.name for n in full.nodes]  # one scale per element: folded
    small = _prepared(linear_model((3, 48), 48, 64), "cpu")  # under DEFERRED_CAST_MIN: folded at import
    assert "DequantMatMul" not in [n.kind.name for n in small.nodes]
    q = prepare_function(import_function(linear_model((3, 96), 96, 64)), get_backend("cpu"), quantizable=True)
    assert "DequantMatMul" not in [n.kind.name for n in q.nodes]  # the int8 conversion requantizes floats
    level0 = glow_core.compile(linear_model((3, 96), 96, 64), "cpu", options={"optimization_level": 0})
    assert "DequantMatMul" not in level0.function.count_by_kind()  # level 0: folded after lowering, as before
    x = {"x": np.random.default_rng(6).standard_normal((3, 96)).astype(np.float32)}
    np.testing.assert_array_equal(level0.run(x)["y"], _run(linear_model((3, 96), 96, 64, compressed=False), "cpu", x))


def test_the_compiled_network_holds_the_weight_in_its_file_size() -> None:
    """cpu: the constants of the compiled network (its memory plan's constant bytes, packed ones included)
    stay within 1.1x the bytes of the model's initializers; the float model's take 4x the int8 size."""
    model = linear_model((1, 8, 512), 512, 1024)
    file_bytes = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    compressed = glow_core.compile(model, "cpu").executable.memory_plan()
    plain = glow_core.compile(linear_model((1, 8, 512), 512, 1024, compressed=False), "cpu").executable.memory_plan()
    assert compressed is not None and plain is not None
    assert compressed.constant_bytes <= 1.1 * file_bytes
    assert plain.constant_bytes >= 3.5 * 512 * 1024
