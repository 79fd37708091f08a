"""Pre-quantized (QDQ) models: the import fold onto the integer kinds, against onnxruntime.

A small CNN (3x3 conv, ReLU, 1x1 conv, residual Add, MaxPool, Flatten, MatMul)
with seeded random weights is quantized by onnxruntime's recommended flow
(``scripts/qdq_models.py``: opset 13, ``quant_pre_process``, ``quantize_static``
QDQ, per-channel int8 weights, uint8 activations). glow must fold its products
onto QLinearConv / QLinearMatMul (cpu: the fused int8 kernels), keep MaxPool in
uint8, and match onnxruntime within one unit of the last place of every
quantized tensor (and exactly on the vast majority).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.importer import import_model
from glow_core.importer.qdq import fold_qdq

ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]


def _qdq_models():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("qdq_models", ROOT / "scripts" / "qdq_models.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(np.float32), name)

    inits = [w("w1", 16, 3, 3, 3), numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b1"),
             w("w2", 16, 16, 1, 1), numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b2"),
             w("fc", 16 * 6 * 6, 10), numpy_helper.from_array(np.array([1, -1], np.int64), "flat")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def qdq() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(1)
    batches = [{"x": rng.random((1, 3, 12, 12), dtype=np.float32)} for _ in range(8)]
    model = _qdq_models().quantize_qdq(small_cnn(), batches)
    return model, [{"x": rng.random((1, 3, 12, 12), dtype=np.float32)} for _ in range(3)]


def _expose_quantized(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The model with every QuantizeLinear result as an extra graph output (their names)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = [n.output[0] for n in out.graph.node if n.op_type == "QuantizeLinear"]
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(out).graph.value_info}
    out.graph.output.extend(typed[n] for n in names)
    return out, names


def test_fold_rewrites_the_products(qdq: tuple[onnx.ModelProto, list]) -> None:
    model, _ = qdq
    folded = fold_qdq(model)
    ops = [n.op_type for n in folded.graph.node]
    assert ops.count("QLinearConv") == 2 and ops.count("QLinearMatMul") == 1, ops
    assert "Conv" not in ops and "MatMul" not in ops
    onnx.checker.check_model(folded)
    kinds = {n.kind.name for n in import_model(model).nodes}
    assert {"QLinearConv", "QLinearMatMul", "MaxPool"} <= kinds, kinds
    assert "Conv" not in kinds


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_qdq_model_matches_onnxruntime(qdq: tuple[onnx.ModelProto, list], backend: str) -> None:
    model, feeds = qdq
    net, sess, names = _glow_and_ort(model, backend)
    if backend == "cpu":
        kinds = {n.kind.name for n in net.function.nodes}
        assert {"FusedIntConv", "FusedIntMatMul"} <= kinds, kinds
    assert _within_one_lsb(net, sess, feeds, names) >= 0.99


def _glow_and_ort(model: onnx.ModelProto, backend: str):  # type: ignore[no-untyped-def]
    """(glow network, onnxruntime session, names of the quantized tensors) of ``model``, every Q result exposed."""
    exposed, names = _expose_quantized(model)
    sess = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    return glow_core.compile(exposed, backend=backend, threads=2), sess, names


def _within_one_lsb(net, sess, feeds: list[dict[str, np.ndarray]], names: list[str]) -> float:  # type: ignore[no-untyped-def]
    """Every quantized tensor within one unit of onnxruntime's; the float output close; the exact fraction."""
    total = exact = 0
    for feed in feeds:
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
        got = net.run(feed)
        for name in names:
            g, w = got[name].astype(np.int32), want[name].astype(np.int32)
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.abs(g - w).max() <= 1, name
            total += g.size
            exact += int((g == w).sum())
        np.testing.assert_allclose(got["y"], want["y"], atol=0.05 * np.abs(want["y"]).max())
    return exact / total


def test_fold_leaves_mismatched_parameters_alone() -> None:
    """DQ -> MaxPool -> Q with different scales is not integer pooling: it stays as written."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 1, 2, 2])
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s1"),
             numpy_helper.from_array(np.array(0.2, np.float32), "s2"),
             numpy_helper.from_array(np.array(3, np.uint8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s1", "z"], ["d"]),
             helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s2", "z"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    assert [n.op_type for n in fold_qdq(model).graph.node] == ["DequantizeLinear", "MaxPool", "QuantizeLinear"]
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(0.1, np.float32), "s2"))  # equal now
    assert [n.op_type for n in fold_qdq(model).graph.node] == ["MaxPool"]


def _gemm_mlp(seed: int = 2) -> onnx.ModelProto:
    """Gemm (transB = 1, bias) -> Relu -> Gemm (transB = 0, bias) -> Gemm (no bias): the classifier heads' form."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((20, 24)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal(20).astype(np.float32) * 0.2, "b1"),
             numpy_helper.from_array(rng.standard_normal((20, 12)).astype(np.float32) * 0.3, "w2"),
             numpy_helper.from_array(rng.standard_normal(12).astype(np.float32) * 0.2, "b2"),
             numpy_helper.from_array(rng.standard_normal((12, 7)).astype(np.float32) * 0.3, "w3")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], transB=1),
             helper.make_node("Relu", ["g1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["g2"]),
             helper.make_node("Gemm", ["g2", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def qdq_gemm() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(3)
    batches = [{"x": rng.standard_normal((5, 24)).astype(np.float32)} for _ in range(8)]
    model = _qdq_models().quantize_qdq(_gemm_mlp(), batches)
    return model, [{"x": rng.standard_normal((5, 24)).astype(np.float32)} for _ in range(3)]


def test_fold_puts_gemm_with_bias_on_the_int8_path(qdq_gemm: tuple[onnx.ModelProto, list]) -> None:
    model, _ = qdq_gemm
    assert [n.op_type for n in model.graph.node].count("Gemm") == 3
    folded = fold_qdq(model)
    ops = [n.op_type for n in folded.graph.node]
    assert ops.count("QLinearConv") == 3 and "Gemm" not in ops, ops
    onnx.checker.check_model(folded)
    convs = [n for n in folded.graph.node if n.op_type == "QLinearConv"]
    assert [len(n.input) for n in convs] == [9, 9, 8]  # the two biases as int32, the last Gemm without
    inits = {t.name: t for t in folded.graph.initializer}
    assert [tuple(inits[n.input[3]].dims) for n in convs] == [(20, 24, 1, 1), (12, 20, 1, 1), (7, 12, 1, 1)]
    assert not any(t.data_type == TensorProto.INT8 and len(t.dims) == 2 for t in folded.graph.initializer)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_qdq_gemm_matches_onnxruntime(qdq_gemm: tuple[onnx.ModelProto, list], backend: str) -> None:
    model, feeds = qdq_gemm
    net, sess, names = _glow_and_ort(model, backend)
    kinds = {n.kind.name for n in net.function.nodes}
    assert "Gemm" not in kinds and "MatMul" not in kinds, kinds
    if backend == "cpu":
        assert "FusedIntConv" in kinds, kinds
    assert _within_one_lsb(net, sess, feeds, names) >= 0.95
