"""Helpers for per-op tests: build one-node ONNX models, run them on glow and onnxruntime."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

import glow_core

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def one_node_model(
    op_type: str,
    inputs: Mapping[str, np.ndarray],
    n_outputs: int = 1,
    *,
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
    input_order: Sequence[str] | None = None,
    domain: str = "",
    **attrs: Any,
) -> onnx.ModelProto:
    """A model with one node ``op_type``; graph inputs are ``inputs`` (types from the arrays),
    ``initializers`` become constant operands; operand order is ``input_order`` (names; "" omits)."""
    inits = dict(initializers or {})
    order = list(input_order) if input_order is not None else list(inputs) + list(inits)
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, order, outs, name=f"{op_type.lower()}_node", domain=domain, **attrs)
    g_inputs = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in inputs.items()]
    g_outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    g_inits = [onnx.numpy_helper.from_array(a, n) for n, a in inits.items()]
    graph = helper.make_graph([node], "g", g_inputs, g_outputs, g_inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)
    return model


def run_glow(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: str = "interpreter") -> list[np.ndarray]:
    net = glow_core.compile(model, backend)
    out = net.run(dict(feeds))
    return [out[o.name] for o in model.graph.output]


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, dict(feeds)))


def run_reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The ONNX specification's reference implementation (``onnx.reference``): it decides where
    onnxruntime disagrees with it."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(a) for a in ReferenceEvaluator(model).run(None, dict(feeds))]


def assert_same(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def check_against_ort(op_type: str, inputs: Mapping[str, np.ndarray], *, rtol: float = 1e-5, atol: float = 1e-6,
                      **kw: Any) -> list[np.ndarray]:
    model = one_node_model(op_type, inputs, **kw)
    got = run_glow(model, inputs)
    assert_same(got, run_ort(model, inputs), rtol, atol)
    return got
