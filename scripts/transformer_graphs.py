"""BERT, GPT-2 (with a KV cache) and ViT as ONNX graphs written with onnx.helper, seeded random weights.

The graphs are what ``transformers`` exports look like (opset 17): decomposed LayerNorm, MatMul + Add
projections, head Reshape/Transpose, scaled scores, an additive or boolean mask, Softmax, erf GELU (BERT,
ViT) or tanh GELU (GPT-2). Dims are symbolic where the exports have them: ``batch`` and ``sequence`` for
BERT; ``batch``, ``sequence`` and ``past_sequence`` for GPT-2, whose inputs and outputs carry optimum's
names (``input_ids``, ``attention_mask``, ``position_ids``, ``past_key_values.{i}.key`` /
``.value`` -> ``logits``, ``present.{i}.key`` / ``.value``); ViT-B/16 takes ``pixel_values``
[batch, 3, 224, 224]. Used by ``bench_transformers.py``; ``Config.tiny`` sizes are for the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Config:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    vocab: int = 30522
    positions: int = 512

    @staticmethod
    def tiny(vocab: int = 100) -> "Config":
        return Config(layers=2, hidden=32, heads=4, ffn=64, vocab=vocab, positions=64)


class _Graph:
    def __init__(self, seed: int) -> None:
        from onnx import helper, numpy_helper

        self.h, self.nh = helper, numpy_helper
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def const(self, name: str, a: np.ndarray) -> str:
        a = np.asarray(a)  # (a 0-d array stays a scalar: np.ascontiguousarray would make it [1])
        self.inits.append(self.nh.from_array(a if a.flags.c_contiguous else a.copy(), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], std: float = 0.02) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def op(self, kind: str, ins: list[str], n_out: int = 1, **attrs: object) -> str:
        self.n += 1
        outs = [f"{kind.lower()}_{self.n}" + (f"_{i}" if n_out > 1 else "") for i in range(n_out)]
        self.nodes.append(self.h.make_node(kind, ins, outs, name=f"/{kind}_{self.n}", **attrs))
        return outs[0] if n_out == 1 else ",".join(outs)

    def dim(self, x: str, axis: int) -> str:
        """Axis ``axis`` of ``x``'s shape as a scalar (Shape with start/end, then Squeeze)."""
        return self.op("Squeeze", [self.op("Shape", [x], start=axis, end=axis + 1), self.ints(f"sq{self.n}", [0])])

    def ints(self, name: str, values: list[int]) -> str:
        return self.const(name, np.array(values, np.int64))

    def layer_norm(self, x: str, prefix: str, width: int, eps: float = 1e-5) -> str:
        g = self.const(prefix + ".g", (1 + self.rng.standard_normal(width) * 0.02).astype(np.float32))
        b = self.weight(prefix + ".b", (width,))
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Mul", [d, d])], axes=[-1], keepdims=1)
        eps_c = self.const(f"{prefix}.eps", np.float32(eps))
        return self.op("Add", [self.op("Mul", [self.op("Div", [d, self.op("Sqrt", [self.op("Add", [var, eps_c])])]),
                                              g]), b])

    def linear(self, x: str, prefix: str, n_in: int, n_out: int) -> str:
        w = self.weight(prefix + ".w", (n_in, n_out))
        return self.op("Add", [self.op("MatMul", [x, w]), self.weight(prefix + ".b", (n_out,))])

    def gelu_erf(self, x: str, i: int) -> str:
        erf = self.op("Erf", [self.op("Div", [x, self.const(f"sqrt2_{i}", np.float32(math.sqrt(2)))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, "one"])]), "half"])

    def gelu_tanh(self, x: str) -> str:
        cube = self.op("Mul", [self.op("Mul", [x, x]), x])
        inner = self.op("Mul", [self.op("Add", [x, self.op("Mul", [cube, "c044"])]), "sqrt2pi"])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [self.op("Tanh", [inner]), "one"])]), "half"])

    def heads_split(self, x: str, heads: int, dh: int) -> str:
        """[b, s, h*d] -> [b, h, s, d] (the batch and sequence copied: Reshape with 0 and -1)."""
        return self.op("Transpose", [self.op("Reshape", [x, self.ints(f"split{self.n}", [0, -1, heads, dh])])],
                       perm=[0, 2, 1, 3])

    def heads_merge(self, x: str, width: int) -> str:
        return self.op("Reshape", [self.op("Transpose", [x], perm=[0, 2, 1, 3]),
                                   self.ints(f"merge{self.n}", [0, -1, width])])

    def model(self, name: str, inputs: list, outputs: list) -> object:
        import onnx

        graph = self.h.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = self.h.make_model(graph, opset_imports=[self.h.make_opsetid("", 17)], ir_version=8)
        onnx.checker.check_model(m)
        return m

    def common(self) -> None:
        self.const("one", np.float32(1.0))
        self.const("half", np.float32(0.5))
        self.const("c044", np.float32(0.044715))
        self.const("sqrt2pi", np.float32(math.sqrt(2 / math.pi)))


def _encoder_layer(g: _Graph, x: str, i: int, c: Config, mask: str | None) -> str:
    """Post-norm (BERT) when ``mask`` is given, else pre-norm (ViT)."""
    p, dh = f"layer{i}", c.hidden // c.heads
    h = x if mask is not None else g.layer_norm(x, p + ".ln1", c.hidden, 1e-12)
    q, k, v = (g.heads_split(g.linear(h, f"{p}.{n}", c.hidden, c.hidden), c.heads, dh) for n in "qkv")
    scores = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                          g.const(f"{p}.scale", np.float32(math.sqrt(dh)))])
    if mask is not None:
        scores = g.op("Add", [scores, mask])
    ctx = g.heads_merge(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v]), c.hidden)
    attn = g.op("Add", [g.linear(ctx, p + ".o", c.hidden, c.hidden), x])
    x = g.layer_norm(attn, p + ".ln1", c.hidden, 1e-12) if mask is not None else attn
    h = x if mask is not None else g.layer_norm(x, p + ".ln2", c.hidden, 1e-12)
    out = g.op("Add", [g.linear(g.gelu_erf(g.linear(h, p + ".fc1", c.hidden, c.ffn), i), p + ".fc2", c.ffn,
                                c.hidden), x])
    return g.layer_norm(out, p + ".ln2", c.hidden, 1e-12) if mask is not None else out


def bert(c: Config = Config(), seed: int = 0) -> object:
    """BERT encoder: input_ids, attention_mask, token_type_ids int64 [batch, sequence] -> last_hidden_state."""
    from onnx import TensorProto

    g = _Graph(seed)
    g.common()
    words = g.op("Gather", [g.weight("word", (c.vocab, c.hidden)), "input_ids"])
    types = g.op("Gather", [g.weight("type", (2, c.hidden)), "token_type_ids"])
    # the exports' position ids: a slice of the registered buffer arange(positions) [1, positions]
    seq = g.op("Shape", ["input_ids"], start=1, end=2)
    buffer = g.const("position_ids_buffer", np.arange(c.positions, dtype=np.int64)[None])
    pos_ids = g.op("Slice", [buffer, g.ints("pos0", [0]), seq, g.ints("pos_axis", [1])])
    pos = g.op("Gather", [g.weight("pos", (c.positions, c.hidden)), pos_ids])
    x = g.layer_norm(g.op("Add", [g.op("Add", [words, types]), pos]), "emb.ln", c.hidden, 1e-12)
    m = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT), g.ints("axes12", [1, 2])])
    mask = g.op("Mul", [g.op("Sub", ["one", m]), g.const("neg", np.float32(-10000.0))])
    for i in range(c.layers):
        x = _encoder_layer(g, x, i, c, mask)
    g.nodes[-1].output[0] = "last_hidden_state"
    ints = [g.h.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = [g.h.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", c.hidden])]
    return g.model("bert", ints, out)


def vit(c: Config = Config(), image: int = 224, patch: int = 16, classes: int = 1000, seed: int = 0) -> object:
    """ViT: pixel_values float32 [batch, 3, image, image] -> logits [batch, classes] (pre-norm encoder)."""
    from onnx import TensorProto

    g = _Graph(seed)
    g.common()
    n = (image // patch) ** 2
    emb = g.op("Conv", ["pixel_values", g.weight("patch.w", (c.hidden, 3, patch, patch)), g.weight("patch.b", (c.hidden,))],
               strides=[patch, patch])
    x = g.op("Transpose", [g.op("Reshape", [emb, g.ints("flat", [0, c.hidden, -1])])], perm=[0, 2, 1])
    cls = g.op("Expand", [g.weight("cls", (1, 1, c.hidden)),
                          g.op("Concat", [g.op("Slice", [g.op("Shape", [x]), g.ints("s0", [0]), g.ints("s1", [1])]),
                                          g.ints("cls_rest", [1, c.hidden])], axis=0)])
    x = g.op("Add", [g.op("Concat", [cls, x], axis=1), g.weight("pos", (1, n + 1, c.hidden))])
    for i in range(c.layers):
        x = _encoder_layer(g, x, i, c, None)
    first = g.op("Gather", [g.layer_norm(x, "final.ln", c.hidden, 1e-12), g.const("zero_i", np.array(0, np.int64))],
                 axis=1)
    g.op("Add", [g.op("MatMul", [first, g.weight("head.w", (c.hidden, classes))]), g.weight("head.b", (classes,))])
    g.nodes[-1].output[0] = "logits"
    ins = [g.h.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, image, image])]
    return g.model("vit", ins, [g.h.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])])


def _gpt2_attention(g: _Graph, x: str, i: int, c: Config, allowed: str) -> tuple[str, str, str]:
    """(output, present key, present value) of block ``i``'s attention over the past and the new tokens."""
    dh = c.hidden // c.heads
    qkv = g.linear(x, f"h{i}.attn.c_attn", c.hidden, 3 * c.hidden)
    q, k, v = g.op("Split", [qkv, g.ints(f"qkv{i}", [c.hidden] * 3)], n_out=3, axis=-1).split(",")
    q, k, v = (g.heads_split(t, c.heads, dh) for t in (q, k, v))
    pk = g.op("Concat", [f"past_key_values.{i}.key", k], axis=2)
    pv = g.op("Concat", [f"past_key_values.{i}.value", v], axis=2)
    g.nodes[-2].output[0] = f"present.{i}.key"
    g.nodes[-1].output[0] = f"present.{i}.value"
    pk, pv = f"present.{i}.key", f"present.{i}.value"
    scores = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [pk], perm=[0, 1, 3, 2])]),
                          g.const(f"h{i}.scale", np.float32(math.sqrt(dh)))])
    scores = g.op("Where", [allowed, scores, "masked"])
    ctx = g.heads_merge(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), pv]), c.hidden)
    return g.linear(ctx, f"h{i}.attn.c_proj", c.hidden, c.hidden), pk, pv


def _causal(g: _Graph) -> str:
    """[batch, 1, sequence, past + sequence] bool: key j visible to query i (at past + i) and not padding."""
    past = g.dim("past_key_values.0.key", 2)
    seq = g.dim("input_ids", 1)
    total = g.op("Add", [past, seq])
    rows = g.op("Range", [past, total, "step_i"])
    cols = g.op("Range", [g.const("zero_i", np.array(0, np.int64)), total, "step_i"])
    causal = g.op("LessOrEqual", [g.op("Unsqueeze", [cols, g.ints("ax0", [0])]), g.op("Unsqueeze", [rows, g.ints("ax1", [1])])])
    pad = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.ints("ax12", [1, 2])])], to=9)
    return g.op("And", [causal, pad])


def gpt2(c: Config = Config(vocab=50257, positions=1024), seed: int = 0) -> object:
    """GPT-2 with a KV cache, optimum's inputs and outputs (module doc); pre-norm blocks, tanh GELU, tied head."""
    from onnx import TensorProto

    g = _Graph(seed)
    g.common()
    g.const("step_i", np.array(1, np.int64))
    g.const("masked", np.float32(-3.4028234663852886e38))
    wte = g.weight("wte", (c.vocab, c.hidden))
    x = g.op("Add", [g.op("Gather", [wte, "input_ids"]), g.op("Gather", [g.weight("wpe", (c.positions, c.hidden)),
                                                                         "position_ids"])])
    allowed = _causal(g)
    presents = []
    for i in range(c.layers):
        a, pk, pv = _gpt2_attention(g, g.layer_norm(x, f"h{i}.ln_1", c.hidden), i, c, allowed)
        x = g.op("Add", [x, a])
        h = g.gelu_tanh(g.linear(g.layer_norm(x, f"h{i}.ln_2", c.hidden), f"h{i}.mlp.c_fc", c.hidden, c.ffn))
        x = g.op("Add", [x, g.linear(h, f"h{i}.mlp.c_proj", c.ffn, c.hidden)])
        presents += [pk, pv]
    g.op("MatMul", [g.layer_norm(x, "ln_f", c.hidden), g.op("Transpose", [wte], perm=[1, 0])])
    g.nodes[-1].output[0] = "logits"
    dh = c.hidden // c.heads
    ins = [g.h.make_tensor_value_info(n, TensorProto.INT64, ["batch", d]) for n, d in
           (("input_ids", "sequence"), ("attention_mask", "total_sequence"), ("position_ids", "sequence"))]
    for i in range(c.layers):
        for kv in ("key", "value"):
            ins.append(g.h.make_tensor_value_info(f"past_key_values.{i}.{kv}", TensorProto.FLOAT,
                                                  ["batch", c.heads, "past_sequence", dh]))
    outs = [g.h.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", c.vocab])]
    outs += [g.h.make_tensor_value_info(p, TensorProto.FLOAT, ["batch", c.heads, "total_sequence", dh]) for p in presents]
    return g.model("gpt2", ins, outs)


def save(model: object, path: Path) -> Path:
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))  # type: ignore[arg-type]
    return path
