"""Every batch size from one compile (glow_core/pipeline/batching.py): a model that treats its samples
independently runs a batch one sample at a time on its batch-1 network, bit for bit what a network compiled
for that batch size gives; a model that mixes the samples (or could) is compiled per batch size, as before."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import zoo
from tests.runtime.detector import yolov8n_like


def symbolic_batch(model: onnx.ModelProto, spatial: bool = False) -> onnx.ModelProto:
    """``model`` with axis 0 of its (non-initializer) inputs and outputs the symbol N; ``spatial``: the last
    two axes of the inputs '?' as well; Reshape shape constants that spell the batch as 1 spell it 0 (copy)."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in m.graph.initializer}
    for vi in [i for i in m.graph.input if i.name not in inits] + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        dims[0].ClearField("dim_value")
        dims[0].dim_param = "N"
        if spatial and vi in m.graph.input:
            for d in dims[-2:]:
                d.ClearField("dim_value")
                d.dim_param = "?"
    for node in m.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            shape = numpy_helper.to_array(inits[node.input[1]]).copy()
            if shape[0] == 1:
                shape[0] = 0
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
    return m


def _input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    inits = {t.name for t in model.graph.initializer}
    return next(i for i in model.graph.input if i.name not in inits)


def _per_shape(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    shapes = {n: a.shape for n, a in feeds.items()}
    return glow_core.compile(model, "cpu", input_shapes=shapes).run(feeds)


@pytest.mark.parametrize("name", ["squeezenet", "detector"])
def test_one_compile_serves_every_batch_size_bit_for_bit(name: str) -> None:
    base = zoo.load_with_random_weights("squeezenet") if name == "squeezenet" else yolov8n_like(size=128)
    model = symbolic_batch(base)
    net = glow_core.compile(model, "cpu")
    x = _input(model).name
    chw = tuple(d.dim_value for d in _input(base).type.tensor_type.shape.dim[1:])
    rng = np.random.default_rng(0)
    for batch in (1, 2, 4, 8) if name == "detector" else (1, 3):
        feeds = {x: rng.standard_normal((batch, *chw)).astype(np.float32)}
        assert net.separability(feeds).separable, net.separability(feeds).reason
        out = net.run(feeds)
        ref = _per_shape(model, feeds)
        assert out.keys() == ref.keys()
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k])
    assert net.specializations_compiled == 1


def test_two_image_sizes_each_compile_once_for_all_their_batches() -> None:
    model = symbolic_batch(yolov8n_like(size=96), spatial=True)
    net = glow_core.compile(model, "cpu")
    rng = np.random.default_rng(1)
    for size in (96, 128):
        for batch in (2, 3):
            feeds = {"images": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
            out = net.run(feeds)["output0"]
            np.testing.assert_array_equal(out, _per_shape(model, feeds)["output0"])
    assert net.specializations_compiled == 2


def _one_op(op: str, out_shape: list[object], **attrs: object) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node(op, ["h"] + (["h"] if op == "Concat" else []),
                                                                            ["y"], **attrs)]
    g = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


MIXING = {
    "softmax over the batch": (_one_op("Softmax", ["N", 5], axis=0), "Softmax over the batch axis"),
    "reduce over the batch": (_one_op("ReduceMax", [1, 5], keepdims=1, axes=[0]), "not one block per sample"),
    "transpose of the batch": (_one_op("Transpose", [5, "N"], perm=[1, 0]), "not one block per sample"),
    "concat along the batch": (_one_op("Concat", ["M", 5], axis=0), "Concat over the batch axis"),
}


@pytest.mark.parametrize("case", sorted(MIXING))
def test_a_model_that_mixes_the_samples_compiles_per_batch_size(case: str) -> None:
    model, why = MIXING[case]
    net = glow_core.compile(model, "cpu")
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32)}
    sep = net.separability(feeds)
    assert not sep.separable and why in (sep.reason or "")
    np.testing.assert_array_equal(net.run(feeds)["y"], _per_shape(model, feeds)["y"])
    assert net.specializations_compiled == 1  # the batch-3 network itself, not the batch-1 one


def test_a_shape_computed_from_the_batch_is_not_split() -> None:
    """y = x + Shape(x)[0] (as float): a constant folded from the batch size differs between batch 1 and 2."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1), helper.make_node("Cast", ["s"], ["sf"], to=1),
             helper.make_node("Add", ["x", "sf"], ["y"])]
    g = helper.make_graph(nodes, "shape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    net = glow_core.compile(model, "cpu")
    feeds = {"x": np.zeros((3, 4), np.float32)}
    assert not net.separability(feeds).separable
    np.testing.assert_array_equal(net.run(feeds)["y"], np.full((3, 4), 3.0, np.float32))
