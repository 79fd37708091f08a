"""The cpu backend's fused GRU / LSTM kernel (``emit/recurrent.py``) against the interpreter.

Odd sizes put the hidden units off the vector width (tails) and the gate panels off their width;
``solo_ns = 0`` makes two threads claim the directions, the default gives the layer to one thread.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core

F = TensorProto.FLOAT


def _model(op: str, seq: int, batch: int, inp: int, hid: int, direction: str = "forward", *, bias: bool = True,
           h0: bool = True, c0: bool = True, lbr: int = 1, outputs: tuple[str, ...] = ("y", "hn", "cn"),
           extra: dict | None = None, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    gates = {"GRU": 3, "LSTM": 4}[op]
    d = 2 if direction == "bidirectional" else 1
    # weights scaled as trained layers are (1 / sqrt(fan-in)): larger ones make the recurrence chaotic and
    # amplify the last-bit differences of any two summation orders over long sequences
    inits = [numpy_helper.from_array((rng.standard_normal((d, gates * hid, inp)) / np.sqrt(inp)).astype(np.float32),
                                     "W"),
             numpy_helper.from_array((rng.standard_normal((d, gates * hid, hid)) / np.sqrt(hid)).astype(np.float32),
                                     "R")]
    if bias:
        inits.append(numpy_helper.from_array((rng.standard_normal((d, 2 * gates * hid)) * 0.3).astype(np.float32),
                                             "B"))
    ins = ["x", "W", "R", "B" if bias else "", "", "h0" if h0 else ""]
    feeds = {"x": rng.standard_normal((seq, batch, inp)).astype(np.float32)}
    graph_in = [helper.make_tensor_value_info("x", F, [seq, batch, inp])]
    if h0:
        feeds["h0"] = (rng.standard_normal((d, batch, hid)) * 0.5).astype(np.float32)
        graph_in.append(helper.make_tensor_value_info("h0", F, [d, batch, hid]))
    if op == "LSTM":
        ins.append("c0" if c0 else "")
        if c0:
            feeds["c0"] = (rng.standard_normal((d, batch, hid)) * 0.5).astype(np.float32)
            graph_in.append(helper.make_tensor_value_info("c0", F, [d, batch, hid]))
    attrs = {"hidden_size": hid, "direction": direction, **(extra or {})}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    names = list(outputs[:2] if op == "GRU" else outputs)
    node = helper.make_node(op, ins, names, **attrs)
    shapes = {"y": [seq, d, batch, hid], "hn": [d, batch, hid], "cn": [d, batch, hid]}
    graph_out = [helper.make_tensor_value_info(n, F, shapes[n]) for n in names if n]
    g = helper.make_graph([node], "rnn", graph_in, graph_out, inits)
    while ins and ins[-1] == "":
        ins.pop()
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return m, feeds


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], *, native: bool = True, **options: object) -> None:
    net = glow_core.compile(m, "cpu", threads=2, options={"cache": False, **options})
    kinds = {i.kind for i in net.executable.lir.instrs}
    assert (("GRU" in kinds) or ("LSTM" in kinds)) == native, kinds
    want = glow_core.compile(m, "interpreter").run(feeds)
    for _ in range(3):  # repeated: the direction counters must be reset for the next run
        got = net.run(feeds)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=3e-5, atol=3e-6, err_msg=k)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op,lbr", [("GRU", 1), ("GRU", 0), ("LSTM", 0)])
@pytest.mark.parametrize("solo_ns", [None, 0])
def test_fused_recurrent_matches_the_interpreter(op: str, lbr: int, direction: str, solo_ns: int | None) -> None:
    m, feeds = _model(op, seq=7, batch=3, inp=13, hid=21, direction=direction, lbr=lbr)
    _check(m, feeds, **({} if solo_ns is None else {"solo_ns": solo_ns}))


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
@pytest.mark.parametrize("seq,batch,inp,hid", [(1, 1, 1, 1), (5, 2, 17, 37), (33, 1, 64, 128), (3, 4, 8, 70)])
def test_odd_sizes_and_tails(op: str, seq: int, batch: int, inp: int, hid: int) -> None:
    m, feeds = _model(op, seq, batch, inp, hid, "bidirectional", seed=seq + hid)
    _check(m, feeds, solo_ns=0)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_without_bias_or_initial_state(op: str) -> None:
    m, feeds = _model(op, 6, 2, 9, 19, "bidirectional", bias=False, h0=False, c0=False)
    _check(m, feeds)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_only_the_last_state_is_used(op: str) -> None:
    m, feeds = _model(op, 9, 1, 10, 24, outputs=("", "hn", ""))
    _check(m, feeds)


@pytest.mark.parametrize("extra", [{"clip": 2.0}, {"activations": ["sigmoid", "relu"]}])
def test_other_forms_are_lowered_as_before(extra: dict) -> None:
    m, feeds = _model("GRU", 5, 2, 6, 11, extra=extra)
    _check(m, feeds, native=False)


def test_a_one_direction_layer_runs_on_the_calling_thread() -> None:
    m, feeds = _model("LSTM", 32, 1, 64, 128)
    net = glow_core.compile(m, "cpu", threads=2, options={"cache": False})
    assert net.executable.layout.parallel_kernels == 0
    bi, _ = _model("LSTM", 32, 1, 64, 128, "bidirectional")
    assert glow_core.compile(bi, "cpu", threads=2, options={"cache": False}).executable.layout.parallel_kernels == 1
