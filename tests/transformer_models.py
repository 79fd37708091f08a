"""Small ONNX models of the transformer blocks (layer normalization, attention) as exporters write them,
with look-alikes that must not be fused; shared by the pass and cpu-kernel tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, ...]], outputs: list[str],
           inits: dict[str, np.ndarray], opset: int = 14) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()]
    g = helper.make_graph(nodes, "block", ins,
                          [onnx.ValueInfoProto(name=o) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for out in model.graph.output:
        out.type.CopyFrom(inferred[out.name].type)
    return model


def layernorm_model(shape: tuple[int, ...], eps: float = 1e-5, square: str = "pow", bias: bool = True,
                    param_shape: tuple[int, ...] | None = None, variant: str = "", seed: int = 0) -> onnx.ModelProto:
    """The exporters' decomposed layer normalization over the last axis of ``x``.

    ``variant``: "" (a real one); "axis" (the means over another axis); "eps-after-sqrt"
    (sqrt(var) + eps); "shared" (x - mean is also an output); "no-square" (d * x instead of d * d).
    """
    rng = np.random.default_rng(seed)
    last = shape[-1]
    ps = param_shape if param_shape is not None else (last,)
    inits: dict[str, Any] = {"g": rng.standard_normal(ps).astype(np.float32),
                             "b": rng.standard_normal(ps).astype(np.float32),
                             "two": np.array([2.0], np.float32), "eps": np.array([eps], np.float32)}
    axes = [0] if variant == "axis" else [-1]
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=axes), helper.make_node("Sub", ["x", "m"], ["d"])]
    if square == "pow" and variant != "no-square":
        nodes.append(helper.make_node("Pow", ["d", "two"], ["p"]))
    else:
        nodes.append(helper.make_node("Mul", ["d", "x" if variant == "no-square" else "d"], ["p"]))
    nodes.append(helper.make_node("ReduceMean", ["p"], ["v"], axes=axes))
    if variant == "eps-after-sqrt":
        nodes += [helper.make_node("Sqrt", ["v"], ["s0"]), helper.make_node("Add", ["s0", "eps"], ["s"])]
    else:
        nodes += [helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"])]
    nodes += [helper.make_node("Div", ["d", "s"], ["n"]), helper.make_node("Mul", ["n", "g"], ["y0" if bias else "y"])]
    if bias:
        nodes.append(helper.make_node("Add", ["y0", "b"], ["y"]))
    else:
        del inits["b"]
    outputs = ["y", "d"] if variant == "shared" else ["y"]
    return _model(nodes, {"x": shape}, outputs, inits)


def layernorm_op_model(shape: tuple[int, ...], eps: float = 1e-5, seed: int = 0) -> onnx.ModelProto:
    """The LayerNormalization op (opset 17) over the last axis."""
    rng = np.random.default_rng(seed)
    inits = {"g": rng.standard_normal(shape[-1:]).astype(np.float32),
             "b": rng.standard_normal(shape[-1:]).astype(np.float32)}
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=eps)
    return _model([node], {"x": shape}, ["y"], inits, opset=17)


def attention_model(b: int, h: int, m: int, n: int, d: int, dv: int, scale_op: str = "Div",
                    mask_shape: tuple[int, ...] | None = None, variant: str = "") -> onnx.ModelProto:
    """Softmax(MatMul(q, Transpose(k)) / scale + mask) @ v, with q [b,h,m,d], k [b,h,n,d], v [b,h,n,dv].

    ``variant``: "" (a real one); "softmax-axis" (Softmax over axis 2); "shared" (the scores are also
    an output); "no-scale" (no Mul / Div).
    """
    inputs = {"q": (b, h, m, d), "k": (b, h, n, d), "v": (b, h, n, dv)}
    inits = {"scale": np.array(np.sqrt(d) if scale_op == "Div" else 1 / np.sqrt(d), np.float32)}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"])]
    s = "s0"
    if variant != "no-scale":
        nodes.append(helper.make_node(scale_op, ["s0", "scale"], ["s1"]))
        s = "s1"
    if mask_shape is not None:
        inputs["mask"] = mask_shape
        nodes.append(helper.make_node("Add", [s, "mask"], ["s2"]))
        s = "s2"
    nodes += [helper.make_node("Softmax", [s], ["p"], axis=2 if variant == "softmax-axis" else -1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, inputs, ["y", s] if variant == "shared" else ["y"], inits)


def feeds(model: onnx.ModelProto, seed: int = 1, mask: str = "random") -> dict[str, np.ndarray]:
    """Normal inputs; the mask: "random" (0 or -inf, no row fully masked), "full-rows" (some rows
    fully -inf), "additive" (finite values)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        shape = tuple(dd.dim_value for dd in vi.type.tensor_type.shape.dim)
        a = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
        if vi.name == "mask":
            if mask == "additive":
                a = rng.standard_normal(shape).astype(np.float32)
            else:
                a = np.where(rng.random(shape) < 0.3, -np.inf, 0.0).astype(np.float32)
                a[..., 0] = 0.0
                if mask == "full-rows":
                    a[..., ::2, :] = -np.inf
        out[vi.name] = a
    return out


def attention_op_model(b: int, h: int, m: int, n: int, d: int, dv: int, mask: str = "", causal: int = 0,
                       scale: float | None = None) -> onnx.ModelProto:
    """The Attention op (opset 23) on 4-D q [b,h,m,d], k [b,h,n,d], v [b,h,n,dv]; ``mask`` "bool" (a
    boolean [m, n] mask) or "float" (an additive [b, 1, m, n] one)."""
    from onnx import TensorProto as T

    ins = [helper.make_tensor_value_info("q", T.FLOAT, (b, h, m, d)),
           helper.make_tensor_value_info("k", T.FLOAT, (b, h, n, d)),
           helper.make_tensor_value_info("v", T.FLOAT, (b, h, n, dv))]
    names = ["q", "k", "v"]
    if mask:
        shape = (m, n) if mask == "bool" else (b, 1, m, n)
        ins.append(helper.make_tensor_value_info("mask", T.BOOL if mask == "bool" else T.FLOAT, shape))
        names.append("mask")
    attrs: dict[str, Any] = {"is_causal": causal}
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node("Attention", names, ["y"], **attrs)
    g = helper.make_graph([node], "attention", ins, [helper.make_tensor_value_info("y", T.FLOAT, (b, h, m, dv))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
