"""Inputs aligned to their element but not to 64 bytes are read in place, by every kind of kernel.

The runtime used to copy such an input (a model's inputs from ``np.load`` start 16 bytes past a 64-byte
boundary) into an aligned staging buffer before every run. The kernels read run-time operands at their
element's alignment (only scratch and packed constants are read as 64-byte aligned), so the copy is gone.
Here every kernel family that reads a graph input directly (convolutions of each path, products, element-wise
chains, normalizations, attention, data movement, indexing, pooling, resizing) runs on inputs shifted one
element past a 64-byte boundary: the results must equal those of aligned copies bit for bit, and nothing must
be staged. (An aligned vector load of a shifted input would fault or read the wrong bytes.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from glow_backend_cpu.runtime import SMALL_IO_BYTES, aligned_empty
from onnx import TensorProto, helper, numpy_helper

import glow_core

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.1, name)


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[int]]], out_shape: list[int],
           inits: list[onnx.TensorProto] = (), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "unaligned", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info("y", F, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _conv(kernel: int, stride: int, group: int, cin: int, cout: int) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kernel, kernel], group=group,
                                strides=[stride, stride], pads=[kernel // 2] * 4)
        side = 56 // stride
        return _model([node], [("x", F, [1, cin, 56, 56])], [1, cout, side, side],
                      [_w("w", cout, cin // group, kernel, kernel), _w("b", cout)])
    return build


def _matmul_both() -> onnx.ModelProto:
    return _model([helper.make_node("MatMul", ["a", "bm"], ["y"])], [("a", F, [130, 150]), ("bm", F, [150, 140])],
                  [130, 140])


def _matmul_weight() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, [("a", F, [129, 200])], [129, 96], [_w("w", 200, 96), _w("b", 96)])


def _elementwise() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "z"], ["m"]), helper.make_node("Tanh", ["m"], ["t"]),
             helper.make_node("Add", ["t", "x"], ["y"])]
    return _model(nodes, [("x", F, [3, 101, 97]), ("z", F, [3, 101, 97])], [3, 101, 97])


def _layernorm_softmax() -> onnx.ModelProto:
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["y"], axis=-1)]
    return _model(nodes, [("x", F, [129, 257])], [129, 257], [_w("g", 257), _w("b", 257)])


def _attention() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    c = numpy_helper.from_array(np.array(0.125, np.float32), "c")
    return _model(nodes, [("q", F, [1, 4, 96, 64]), ("kt", F, [1, 4, 64, 96]), ("v", F, [1, 4, 96, 64])],
                  [1, 4, 96, 64], [c])


def _movement() -> onnx.ModelProto:
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Concat", ["t", "t"], ["y"], axis=3)]
    return _model(nodes, [("x", F, [1, 17, 40, 30])], [1, 40, 30, 34])


def _gather() -> onnx.ModelProto:
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    return _model(nodes, [("table", F, [300, 70]), ("ids", I64, [9000])], [9000, 70])


def _pool_resize() -> onnx.ModelProto:
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["p", "", "sc"], ["r"], mode="linear"),
             helper.make_node("ReduceMean", ["r", "ax"], ["y"], keepdims=1)]
    sc = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    return _model(nodes, [("x", F, [1, 8, 60, 60])], [1, 1, 60, 60], [sc, ax], opset=18)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "conv 1x1": _conv(1, 1, 1, 32, 48), "conv 3x3": _conv(3, 1, 1, 16, 32), "conv 3x3 stride 2": _conv(3, 2, 1, 16, 24),
    "depthwise 3x3": _conv(3, 1, 16, 16, 16), "conv 5x5": _conv(5, 1, 1, 8, 16),
    "matmul of two inputs": _matmul_both, "matmul, bias, relu": _matmul_weight, "element-wise chain": _elementwise,
    "layer norm, softmax": _layernorm_softmax, "attention": _attention, "transpose, concat": _movement,
    "gather": _gather, "pool, resize, reduce": _pool_resize,
}


def _feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    out = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == I64:
            out[i.name] = RNG.integers(0, 300, shape).astype(np.int64)
        else:
            out[i.name] = RNG.standard_normal(shape).astype(np.float32)
    return out


def _shifted(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` starting one element past a 64-byte boundary."""
    raw = aligned_empty((a.size + 1,), a.dtype)
    s = raw[1:].reshape(a.shape)
    s[...] = a
    assert s.ctypes.data % 64 == a.itemsize and s.flags.c_contiguous and s.flags.aligned
    return s


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("threads", [1, 2])
def test_shifted_inputs_are_read_in_place_and_give_the_same_bits(name: str, threads: int) -> None:
    m = MODELS[name]()
    net = glow_core.compile(m, "cpu", threads=threads, options={"cache": False, "parallel_threshold": 0})
    feeds = _feeds(m)
    assert any(a.nbytes > SMALL_IO_BYTES for a in feeds.values())  # (small inputs are copied into bound buffers)
    aligned = {k: _aligned(v) for k, v in feeds.items()}
    want = net.run(aligned)["y"]
    got = net.run({k: _shifted(v) for k, v in feeds.items()})["y"]
    assert np.array_equal(got, want, equal_nan=True)
    assert not net.executable._staging  # read in place, never copied


def _aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def test_a_misaligned_array_is_still_staged() -> None:
    m = _elementwise()
    net = glow_core.compile(m, "cpu", options={"cache": False})
    feeds = _feeds(m)
    raw = np.zeros(feeds["x"].nbytes + 2, np.uint8)
    odd = np.frombuffer(raw.data, np.float32, count=feeds["x"].size, offset=2).reshape(feeds["x"].shape)
    assert not odd.flags.aligned
    odd[...] = feeds["x"]
    got = net.run({"x": odd, "z": feeds["z"]})["y"]
    assert np.array_equal(got, net.run(feeds)["y"]) and "x" in net.executable._staging
