"""A BERT-style encoder as a PyTorch export writes it (opset 14), with random weights.

The structure of a MiniLM/BERT sentence encoder: token and position embeddings, a decomposed layer
normalization (ReduceMean, Sub, Pow, Sqrt, Div, Mul, Add), per layer the Q/K/V projections as MatMul
plus a bias Add, heads split by Reshape/Transpose, scaled scores plus an additive mask, Softmax, the
output projection with a residual Add, and an erf GELU feed-forward block. Small by default, so that
tests partition and run it in well under a second.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    """Nodes and initializers of one graph, each node's output named after it."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, a: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.08) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, kind: str, ins: list[str], out: str = "", **attrs: object) -> str:
        out = out or f"{kind.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, ins, [out], name=f"/{kind}_{len(self.nodes)}", **attrs))
        return out

    def layer_norm(self, x: str, hidden: int, tag: str) -> str:
        d = self.op("Sub", [x, self.op("ReduceMean", [x], axes=[-1], keepdims=1)])
        var = self.op("ReduceMean", [self.op("Pow", [d, "two"])], axes=[-1], keepdims=1)
        norm = self.op("Div", [d, self.op("Sqrt", [self.op("Add", [var, "eps"])])])
        gamma = self.const(tag + ".g", (1 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32))
        return self.op("Add", [self.op("Mul", [norm, gamma]), self.weight(tag + ".b", (hidden,), 0.1)])

    def linear(self, x: str, n_in: int, n_out: int, tag: str) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight(tag + ".w", (n_in, n_out))]),
                               self.weight(tag + ".bias", (n_out,), 0.05)])


def _layer(g: _Builder, x: str, i: int, hidden: int, heads: int, ffn: int) -> str:
    p = f"layer{i}"
    q, k, v = (g.op("Transpose", [g.op("Reshape", [g.linear(x, hidden, hidden, f"{p}.{n}"), "split"])],
                    perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3]) for n in ("q", "k", "v"))
    scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), "scale"]), "mask_add"])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), "merge"])
    x = g.layer_norm(g.op("Add", [g.linear(ctx, hidden, hidden, f"{p}.o"), x]), hidden, f"{p}.ln1")
    h = g.linear(x, hidden, ffn, f"{p}.f1")
    gelu = g.op("Mul", [g.op("Mul", [h, g.op("Add", [g.op("Erf", [g.op("Div", [h, "sqrt2"])]), "one"])]), "half"])
    return g.layer_norm(g.op("Add", [g.linear(gelu, ffn, hidden, f"{p}.f2"), x]), hidden, f"{p}.ln2")


def bert_encoder(layers: int = 2, hidden: int = 64, heads: int = 4, ffn: int = 256, seq: int = 32,
                 vocab: int = 200, seed: int = 0) -> onnx.ModelProto:
    """``input_ids`` int64[1,seq] and ``attention_mask`` float32[1,seq] -> ``hidden_states`` float32[1,seq,hidden]."""
    g = _Builder(seed)
    for name, value in (("two", 2.0), ("eps", 1e-12), ("one", 1.0), ("half", 0.5), ("sqrt2", math.sqrt(2)),
                        ("neg", -10000.0), ("scale", math.sqrt(hidden // heads))):
        g.const(name, np.float32(value))
    g.const("split", np.array([1, seq, heads, hidden // heads], np.int64))
    g.const("merge", np.array([1, seq, hidden], np.int64))
    g.const("mask_shape", np.array([1, 1, 1, seq], np.int64))
    words = g.op("Gather", [g.weight("word", (vocab, hidden), 0.5), "input_ids"])
    x = g.op("Add", [words, g.weight("pos", (1, seq, hidden), 0.1)])
    x = g.layer_norm(x, hidden, "emb.ln")
    g.op("Reshape", [g.op("Mul", [g.op("Sub", ["one", "attention_mask"]), "neg"]), "mask_shape"], out="mask_add")
    for i in range(layers):
        x = _layer(g, x, i, hidden, heads, ffn)
    g.op("Identity", [x], out="hidden_states")
    graph = helper.make_graph(
        g.nodes, "bert_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq])],
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, seq, hidden])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    return model


def encoder_feeds(seq: int = 32, vocab: int = 200, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((1, seq), np.float32)
    mask[0, seq - seq // 4:] = 0
    return {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64), "attention_mask": mask}
