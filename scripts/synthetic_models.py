"""Small synthetic ONNX models (seeded random weights) for ``bench_trained_models.py --synthetic``.

They stand for the small models whose speed is dominated by per-kernel overhead rather than
arithmetic: recurrent encoders (ONNX ``GRU`` / ``LSTM`` nodes, batch 1) and a ~20-node audio front
end (framing as a strided Conv, magnitude, log, a small projection). Each builder returns
``(ModelProto, feeds)``; weights and inputs come from a seeded generator, so runs are repeatable.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Built = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: dict[str, np.ndarray], name: str) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs,
                          [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k)
                           for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _w(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
    return (rng.standard_normal(shape) * s).astype(np.float32)


def recurrent(op: str, seq: int = 32, inp: int = 64, hidden: int = 128, bidirectional: bool = False,
              seed: int = 0) -> Built:
    """One ``GRU`` or ``LSTM`` node over ``seq`` steps (batch 1), with initial state, all outputs used."""
    rng = np.random.default_rng(seed)
    gates = {"GRU": 3, "LSTM": 4}[op]
    d = 2 if bidirectional else 1
    inits = {"W": _w(rng, d, gates * hidden, inp), "R": _w(rng, d, gates * hidden, hidden),
             "B": _w(rng, d, 2 * gates * hidden, scale=0.1)}
    ins = ["x", "W", "R", "B", "", "h0"] + (["c0"] if op == "LSTM" else [])
    outs = ["y", "hn"] + (["cn"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward"}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    node = helper.make_node(op, ins, outs, **attrs)
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, [seq, 1, inp]),
              helper.make_tensor_value_info("h0", f, [d, 1, hidden])]
    outputs = [helper.make_tensor_value_info("y", f, [seq, d, 1, hidden]),
               helper.make_tensor_value_info("hn", f, [d, 1, hidden])]
    feeds = {"x": rng.standard_normal((seq, 1, inp)).astype(np.float32),
             "h0": (rng.standard_normal((d, 1, hidden)) * 0.1).astype(np.float32)}
    if op == "LSTM":
        inputs.append(helper.make_tensor_value_info("c0", f, [d, 1, hidden]))
        outputs.append(helper.make_tensor_value_info("cn", f, [d, 1, hidden]))
        feeds["c0"] = (rng.standard_normal((d, 1, hidden)) * 0.1).astype(np.float32)
    return _model([node], inputs, outputs, inits, f"{op.lower()}_encoder"), feeds


def audio_frontend(samples: int = 16000, frame: int = 256, hop: int = 128, bins: int = 64, seed: int = 0) -> Built:
    """21 nodes over one second of audio: pre-emphasis, framing as a strided Conv (cos/sin filters), magnitude, log
    energy, a mel-like projection, normalisation, a tiny classifier head."""
    rng = np.random.default_rng(seed)
    t = np.arange(frame)
    k = np.arange(bins)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * t / frame)
    inits = {
        "pre": np.array([0.97], np.float32),
        "cosf": (np.cos(2 * np.pi * k * t / frame) * window)[:, None, :].astype(np.float32),
        "sinf": (np.sin(2 * np.pi * k * t / frame) * window)[:, None, :].astype(np.float32),
        "eps": np.array([1e-6], np.float32),
        "mel": np.abs(_w(rng, bins, 32)),
        "head": _w(rng, 32, 4),
        "hb": _w(rng, 4, scale=0.1),
        "shape3": np.array([1, 1, samples], np.int64),
    }
    n = helper.make_node
    nodes = [
        n("Reshape", ["audio", "shape3"], ["a3"]),
        n("Mul", ["a3", "pre"], ["scaled"]),
        n("Sub", ["a3", "scaled"], ["emph"]),
        n("Conv", ["emph", "cosf"], ["re"], strides=[hop]),
        n("Conv", ["emph", "sinf"], ["im"], strides=[hop]),
        n("Mul", ["re", "re"], ["re2"]),
        n("Mul", ["im", "im"], ["im2"]),
        n("Add", ["re2", "im2"], ["pow"]),
        n("Add", ["pow", "eps"], ["pow_e"]),
        n("Sqrt", ["pow_e"], ["mag"]),
        n("Transpose", ["mag"], ["magt"], perm=[0, 2, 1]),
        n("MatMul", ["magt", "mel"], ["melspec"]),
        n("Add", ["melspec", "eps"], ["mel_e"]),
        n("Log", ["mel_e"], ["logmel"]),
        n("ReduceMean", ["logmel"], ["mean"], axes=[1], keepdims=1),
        n("Sub", ["logmel", "mean"], ["centred"]),
        n("Relu", ["centred"], ["act"]),
        n("ReduceMean", ["act"], ["pooled"], axes=[1], keepdims=0),
        n("MatMul", ["pooled", "head"], ["logits0"]),
        n("Add", ["logits0", "hb"], ["logits"]),
        n("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("audio", f, [1, samples])]
    outputs = [helper.make_tensor_value_info("probs", f, [1, 4])]
    feeds = {"audio": (np.sin(np.arange(samples) * 0.07) * 0.3
                       + rng.standard_normal(samples) * 0.05).astype(np.float32)[None]}
    return _model(nodes, inputs, outputs, inits, "audio_frontend"), feeds


#: name -> (what it covers, builder)
SYNTHETIC: dict[str, tuple[str, Callable[[], Built]]] = {
    "syn-gru": ("GRU encoder, 32 steps, 64 -> 128 (synthetic weights)", lambda: recurrent("GRU")),
    "syn-bigru": ("bidirectional GRU, 32 steps, 64 -> 128 (synthetic)", lambda: recurrent("GRU", bidirectional=True)),
    "syn-lstm": ("LSTM encoder, 32 steps, 64 -> 128 (synthetic weights)", lambda: recurrent("LSTM")),
    "syn-audio": ("audio front end, 21 nodes, 1 s of 16 kHz (synthetic weights)", audio_frontend),
}
