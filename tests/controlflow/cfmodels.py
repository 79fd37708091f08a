"""Hand-built models with the control-flow patterns of trained models (tests/controlflow).

- :func:`vad_like`: a voice-activity model shaped like silero-vad: the top-level If is decided by a
  scalar input (the sample rate), each branch holds Ifs decided by the input's shape (nested), an
  LSTM-like state update and a score.
- :func:`wakeword_like`: a wake-word detector: a score, then an If on ``score > threshold`` (decided
  by the data) that runs a classifier head only when the score fires.
- :func:`loop_model`, :func:`scan_model`: Loop (trip count, data-dependent condition, loop-carried
  values, scan outputs, a captured outer value) and Scan (directions, axes).

Weights are drawn from a fixed seed, scaled like trained weights.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL
H = 16


def _w(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)


def _c(name: str, value: object, dtype: object = np.int64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=dtype), name))


def _vi(name: str, elem: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _frames_if(p: str, width: int, rng: np.random.Generator) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``h = frames(x) @ W`` where an If decided by x's length picks how x is cut to ``width`` samples."""
    long_g = helper.make_graph(
        [_c(f"{p}s0", [0]), _c(f"{p}s1", [width]), _c(f"{p}ax", [1]),
         helper.make_node("Slice", ["x", f"{p}s0", f"{p}s1", f"{p}ax"], [f"{p}cut"])],
        f"{p}long", [], [_vi(f"{p}cut", F, [1, -1])])  # -1: a dynamic dimension, as exporters write it
    short_g = helper.make_graph(
        [helper.make_node("Shape", ["x"], [f"{p}shp"]), _c(f"{p}i1", 1),
         helper.make_node("Gather", [f"{p}shp", f"{p}i1"], [f"{p}len"]), _c(f"{p}wd", width),
         helper.make_node("Sub", [f"{p}wd", f"{p}len"], [f"{p}missing"]), _c(f"{p}z3", [0, 0, 0]), _c(f"{p}ax0", [0]),
         helper.make_node("Unsqueeze", [f"{p}missing", f"{p}ax0"], [f"{p}m1"]),
         helper.make_node("Concat", [f"{p}z3", f"{p}m1"], [f"{p}pads"], axis=0),
         helper.make_node("Pad", ["x", f"{p}pads"], [f"{p}cut2"])],
        f"{p}short", [], [_vi(f"{p}cut2", F, None)])
    w = _w(rng, f"{p}W", width, H)
    return [
        helper.make_node("Shape", ["x"], [f"{p}xs"]), _c(f"{p}one", 1),
        helper.make_node("Gather", [f"{p}xs", f"{p}one"], [f"{p}n"]), _c(f"{p}wdt", width - 1),
        helper.make_node("Greater", [f"{p}n", f"{p}wdt"], [f"{p}islong"]),
        helper.make_node("If", [f"{p}islong"], [f"{p}frames"], then_branch=long_g, else_branch=short_g),
        helper.make_node("MatMul", [f"{p}frames", f"{p}W"], [f"{p}h"]),
    ], [w]


def _vad_branch(p: str, width: int, rng: np.random.Generator) -> onnx.GraphProto:
    nodes, inits = _frames_if(p, width, rng)
    # a state update like an LSTM cell's: state' = tanh(state @ U + h), score = sigmoid(mean(state'[0]) * a)
    inits += [_w(rng, f"{p}U", H, H), numpy_helper.from_array(np.float32(rng.uniform(2, 4)), f"{p}a")]
    nodes += [
        helper.make_node("MatMul", ["state", f"{p}U"], [f"{p}su"]),
        helper.make_node("Add", [f"{p}su", f"{p}h"], [f"{p}pre"]),
        helper.make_node("Tanh", [f"{p}pre"], [f"{p}state_out"]),
        helper.make_node("ReduceMean", [f"{p}state_out"], [f"{p}m"], axes=[0, 2], keepdims=0),
        helper.make_node("Mul", [f"{p}m", f"{p}a"], [f"{p}ma"]), _c(f"{p}ax1", [1]),
        helper.make_node("Unsqueeze", [f"{p}ma", f"{p}ax1"], [f"{p}mu"]),
        helper.make_node("Sigmoid", [f"{p}mu"], [f"{p}prob"]),
    ]
    return helper.make_graph(nodes, f"{p}branch", [], [_vi(f"{p}prob", F, [1, 1]), _vi(f"{p}state_out", F, [2, 1, H])],
                             inits)


def vad_like(seed: int = 0) -> onnx.ModelProto:
    """input x [1, N], state [2, 1, H], sr (int64 scalar) -> prob [1, 1], state' [2, 1, H]."""
    rng = np.random.default_rng(seed)
    nodes = [_c("k16", 16000), helper.make_node("Equal", ["sr", "k16"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["prob", "state_out"],
                              then_branch=_vad_branch("a_", 64, rng), else_branch=_vad_branch("b_", 32, rng))]
    g = helper.make_graph(nodes, "vad", [_vi("x", F, [1, "N"]), _vi("state", F, [2, 1, H]), _vi("sr", I64, [])],
                          [_vi("prob", F, [1, 1]), _vi("state_out", F, [2, 1, H])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def wakeword_like(seed: int = 1) -> onnx.ModelProto:
    """features [1, T, 40] -> score [1, 1]; classes [1, 4]: a softmax head when score > 0.3, else zeros."""
    rng = np.random.default_rng(seed)
    inits = [_w(rng, "W1", 40, H), _w(rng, "W2", H, 1), _w(rng, "W3", H, 4),
             numpy_helper.from_array(np.float32(0.3), "threshold")]
    head = helper.make_graph([helper.make_node("MatMul", ["pooled", "W3"], ["logits"]),
                              helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)],
                             "head", [], [_vi("probs", F, [1, 4])])
    quiet = helper.make_graph([_c("shape14", [1, 4]), helper.make_node("ConstantOfShape", ["shape14"], ["zeros"],
                               value=numpy_helper.from_array(np.zeros(1, np.float32)))],
                              "quiet", [], [_vi("zeros", F, [1, 4])])
    nodes = [helper.make_node("MatMul", ["features", "W1"], ["e"]), helper.make_node("Relu", ["e"], ["r"]),
             helper.make_node("ReduceMean", ["r"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["pooled", "W2"], ["s"]), helper.make_node("Sigmoid", ["s"], ["score"]),
             helper.make_node("ReduceMax", ["score"], ["top"], keepdims=0),
             helper.make_node("Greater", ["top", "threshold"], ["fire"]),
             helper.make_node("If", ["fire"], ["classes"], then_branch=head, else_branch=quiet)]
    g = helper.make_graph(nodes, "wakeword", [_vi("features", F, [1, "T", 40])],
                          [_vi("score", F, [1, 1]), _vi("classes", F, [1, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def loop_model() -> onnx.ModelProto:
    """x [3] doubled while its sum stays below ``limit`` (at most M times); scan output: each iterate + bias."""
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "x_in"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Add", ["x_out", "bias"], ["xb"]),
         helper.make_node("Add", ["xb", "i_f"], ["scan_out"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("x_in", F, [-1])],
        [_vi("cond_out", B, []), _vi("x_out", F, [-1]), _vi("scan_out", F, [-1])])
    nodes = [helper.make_node("Loop", ["M", "cond", "x"], ["x_final", "history"], body=body)]
    g = helper.make_graph(nodes, "loop", [_vi("M", I64, []), _vi("cond", B, []), _vi("x", F, [3]),
                                          _vi("limit", F, []), _vi("bias", F, [3])],
                          [_vi("x_final", F, [3]), _vi("history", F, ["K", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def scan_model() -> onnx.ModelProto:
    """A running sum over axis 1 of x [2, 5], read in reverse; outputs stacked on axis 1."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "xt"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "scale"], ["y"])],
        "sbody", [_vi("acc_in", F, [2]), _vi("xt", F, [2])], [_vi("acc_out", F, [2]), _vi("y", F, [2])])
    nodes = [helper.make_node("Scan", ["acc", "x"], ["acc_final", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1])]
    g = helper.make_graph(nodes, "scan", [_vi("acc", F, [2]), _vi("x", F, [2, 5]), _vi("scale", F, [])],
                          [_vi("acc_final", F, [2]), _vi("ys", F, [2, 5])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def loop_with_if_model() -> onnx.ModelProto:
    """A Loop whose body holds an If decided by the carried value: halve x when its sum passes 10, else add 3."""
    half = helper.make_graph([helper.make_node("Mul", ["x_in", "k_half"], ["xh"])], "half", [], [_vi("xh", F, [-1])])
    grow = helper.make_graph([helper.make_node("Add", ["x_in", "k_three"], ["xg"])], "grow", [], [_vi("xg", F, [-1])])
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["x_in"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "k_ten"], ["big"]),
         helper.make_node("If", ["big"], ["x_out"], then_branch=half, else_branch=grow),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["x_out"], ["seen"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("x_in", F, [-1])],
        [_vi("cond_out", B, []), _vi("x_out", F, [-1]), _vi("seen", F, [-1])])
    inits = [numpy_helper.from_array(np.float32(v), n) for n, v in [("k_half", 0.5), ("k_three", 3.0), ("k_ten", 10.0)]]
    g = helper.make_graph([helper.make_node("Loop", ["M", "", "x"], ["x_final", "trace"], body=body)], "loopif",
                          [_vi("M", I64, []), _vi("x", F, [2])], [_vi("x_final", F, [2]), _vi("trace", F, ["K", 2])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
