"""Test models with symbolic input dims: a BERT-like encoder (``batch``, ``sequence``), a ResNet-ish conv net
(``batch``) and a ``[-1, 3, '?', '?']`` image classifier (height and width each their own symbol)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(inits: list[onnx.TensorProto], name: str, a: np.ndarray) -> str:
    inits.append(numpy_helper.from_array(a, name))
    return name


def _layer(k: int, hidden: int, heads: int, ffn: int, rng: np.random.Generator,
           inits: list[onnx.TensorProto], x: str) -> tuple[list[onnx.NodeProto], str]:
    """One encoder layer: self-attention and a feed-forward block, each with a residual and a LayerNorm."""
    d = hidden // heads
    w = {n: _init(inits, f"l{k}.{n}", (rng.standard_normal(s) * 0.05).astype(np.float32))
         for n, s in (("q", (hidden, hidden)), ("k", (hidden, hidden)), ("v", (hidden, hidden)),
                      ("o", (hidden, hidden)), ("f1", (hidden, ffn)), ("f2", (ffn, hidden)))}
    ln = {n: _init(inits, f"l{k}.{n}", np.ones(hidden, np.float32)) for n in ("g1", "g2")}
    heads_shape = _init(inits, f"l{k}.hs", np.array([0, 0, heads, d], np.int64))
    flat_shape = _init(inits, f"l{k}.fs", np.array([0, 0, hidden], np.int64))
    scale = _init(inits, f"l{k}.scale", np.array(1 / np.sqrt(d), np.float32))
    p = f"l{k}."
    nodes = []
    for n in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", [x, w[n]], [p + n + "m"]),
                  helper.make_node("Reshape", [p + n + "m", heads_shape], [p + n + "r"]),
                  helper.make_node("Transpose", [p + n + "r"], [p + n + "t"],
                                   perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", [p + "qt", p + "kt"], [p + "s"]),
              helper.make_node("Mul", [p + "s", scale], [p + "ss"]),
              helper.make_node("Softmax", [p + "ss"], [p + "a"], axis=-1),
              helper.make_node("MatMul", [p + "a", p + "vt"], [p + "c"]),
              helper.make_node("Transpose", [p + "c"], [p + "ct"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", [p + "ct", flat_shape], [p + "cf"]),
              helper.make_node("MatMul", [p + "cf", w["o"]], [p + "om"]),
              helper.make_node("Add", [p + "om", x], [p + "r1"]),
              helper.make_node("LayerNormalization", [p + "r1", ln["g1"]], [p + "n1"], axis=-1),
              helper.make_node("MatMul", [p + "n1", w["f1"]], [p + "f1m"]),
              helper.make_node("Relu", [p + "f1m"], [p + "f1r"]),
              helper.make_node("MatMul", [p + "f1r", w["f2"]], [p + "f2m"]),
              helper.make_node("Add", [p + "f2m", p + "n1"], [p + "r2"]),
              helper.make_node("LayerNormalization", [p + "r2", ln["g2"]], [p + "n2"], axis=-1)]
    return nodes, p + "n2"


def bert_like(layers: int = 2, hidden: int = 64, heads: int = 4, ffn: int = 128, vocab: int = 100,
              seed: int = 0) -> onnx.ModelProto:
    """A BERT-style encoder: ``ids`` int64[batch,sequence] -> ``out`` float32[batch,sequence,hidden];
    ``mask`` float32[batch,sequence] is added to the embeddings (it shares both symbols with ``ids``)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    emb = _init(inits, "emb", (rng.standard_normal((vocab, hidden)) * 0.1).astype(np.float32))
    axes = _init(inits, "axes", np.array([-1], np.int64))
    nodes = [helper.make_node("Gather", [emb, "ids"], ["e"]),
             helper.make_node("Unsqueeze", ["mask", axes], ["m"]),
             helper.make_node("Add", ["e", "m"], ["x0"])]
    x = "x0"
    for k in range(layers):
        more, x = _layer(k, hidden, heads, ffn, rng, inits, x)
        nodes += more
    nodes.append(helper.make_node("Identity", [x], ["out"]))
    graph = helper.make_graph(
        nodes, "bert_like",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "sequence"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "sequence", hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bert_feeds(batch: int, sequence: int, vocab: int = 100, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"ids": rng.integers(0, vocab, (batch, sequence)).astype(np.int64),
            "mask": rng.standard_normal((batch, sequence)).astype(np.float32)}


def conv_net(seed: int = 0, dims: tuple[object, object, object, object] = ("batch", 3, 16, 16),
             classes: int = 10) -> onnx.ModelProto:
    """A ResNet-ish block: Conv-Relu, a residual Conv-Relu-Conv, global average pool, a Gemm classifier."""
    rng = np.random.default_rng(seed)
    c = 8
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n)
             for n, s in (("w0", (c, 3, 3, 3)), ("w1", (c, c, 3, 3)), ("w2", (c, c, 3, 3)), ("fc", (classes, c)))]
    inits.append(numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "fcb"))
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ocr_like(seed: int = 0) -> onnx.ModelProto:
    """The PaddleOCR-style declaration ``[-1, 3, '?', '?']``: height and width are independent unknowns."""
    model = conv_net(seed, (-1, 3, "?", "?"))
    dim = model.graph.input[0].type.tensor_type.shape.dim
    dim[0].Clear()
    dim[0].dim_value = -1  # (make_tensor_value_info turns -1 into a dim_value; keep it as exporters write it)
    dim[2].Clear()
    dim[2].dim_param = "?"
    dim[3].Clear()
    dim[3].dim_param = "?"
    return model


LIGHT_RESNET = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"


def light_resnet50() -> onnx.ModelProto:
    """onnx's light-zoo ResNet-50 (placeholder weights) with a symbolic batch, height and width; its final 7x7
    AveragePool (global at 224 x 224 only) made the GlobalAveragePool it stands for, its Reshape to [1, 2048] one to
    [-1, 2048]."""
    model = onnx.load(str(LIGHT_RESNET))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for d, name in zip(dims, ["batch", None, "height", "width"]):
        if name is not None:
            d.dim_param = name
    for t in model.graph.initializer:
        if t.name == "OC2_DUMMY_1":  # the Reshape before the classifier: [1, 2048] -> [-1, 2048] (any batch)
            t.CopyFrom(numpy_helper.from_array(np.array([-1, 2048], np.int64), t.name))
    for n in model.graph.node:
        if n.op_type == "AveragePool" and list(n.attribute[1].ints if n.attribute[1].name == "kernel_shape"
                                                else n.attribute[0].ints) == [7, 7]:
            n.op_type = "GlobalAveragePool"
            del n.attribute[:]
    softmax = model.graph.node[-1]  # the logits are the output (placeholder weights saturate the softmax)
    assert softmax.op_type == "Softmax"
    model.graph.output[0].name = softmax.input[0]
    model.graph.node.remove(softmax)
    return model
