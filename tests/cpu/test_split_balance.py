"""The work split by measured thread speed (``balance.py``): results independent of the split, and the
adaptation's arithmetic.

Every kernel splits its range over the threads at the cuts of the split table; after each run the caller's
thread sets the cuts from the threads' measured speeds. A kernel whose result depended on where its range is
cut (a reduction split over the threads) would then answer differently from run to run: every kernel family
runs here under skewed, pinned splits and must give the even split's bits.
"""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from glow_backend_cpu import balance
from glow_backend_cpu.helpers import I64, SPLIT_ENTRIES, SPLIT_GLOBAL, SPLIT_ONE, VOID, i64
from glow_backend_cpu.sync import define_split_table
from glow_backend_cpu.target import host_codegen
from llvmlite import ir
from onnx import TensorProto, helper, numpy_helper

import glow_core
from tests.cpu.test_unaligned_inputs import MODELS, _feeds, _model, _w

F = TensorProto.FLOAT


def _conv_transpose() -> onnx.ModelProto:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    return _model([node], [("x", F, [1, 16, 30, 30])], [1, 8, 59, 59], [_w("w", 16, 8, 3, 3)])


def _wide_conv() -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)
    return _model([node], [("x", F, [1, 64, 28, 28])], [1, 64, 28, 28], [_w("w", 64, 64, 3, 3)])


def _lstm() -> onnx.ModelProto:
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=32)
    return _model([node], [("x", F, [20, 4, 24])], [20, 1, 4, 32], [_w("w", 1, 128, 24), _w("r", 1, 128, 32)])


def _reductions() -> onnx.ModelProto:
    ax = numpy_helper.from_array(np.array([0, 1], np.int64), "ax")
    nodes = [helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=1),
             helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=1),
             helper.make_node("Cast", ["a"], ["af"], to=F), helper.make_node("Add", ["s", "af"], ["y"])]
    return _model(nodes, [("x", F, [37, 300, 41])], [37, 1, 41], [ax], opset=18)


def _quantized() -> onnx.ModelProto:
    q = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in
         [("xs", 0.05, np.float32), ("xz", 3, np.uint8), ("ws", 0.02, np.float32), ("wz", 0, np.int8),
          ("ys", 0.1, np.float32), ("yz", 128, np.uint8)]]
    w = numpy_helper.from_array(np.random.default_rng(1).integers(-60, 60, (32, 16, 3, 3)).astype(np.int8), "w")
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"], pads=[1] * 4),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return _model(nodes, [("x", F, [1, 16, 40, 40])], [1, 32, 40, 40], [*q, w])


EXTRA = {"conv transpose": _conv_transpose, "conv 3x3, 64 channels": _wide_conv, "lstm": _lstm,
         "reductions": _reductions, "int8 conv": _quantized}
ALL = {**MODELS, **EXTRA}


def _run_split(net: glow_core.CompiledNetwork, feeds: dict[str, np.ndarray], weights: list[float] | None) -> np.ndarray:
    net.executable.set_split(weights)
    return net.run(feeds)["y"]


@pytest.mark.parametrize("name", list(ALL))
def test_results_do_not_depend_on_the_split(name: str) -> None:
    m = ALL[name]()
    feeds = _feeds(m)
    for threads, splits in ((2, ([1, 3], [7, 1], [1, 40])), (3, ([1, 1, 6], [5, 2, 1]))):
        net = glow_core.compile(m, "cpu", threads=threads,
                                options={"cache": False, "parallel_threshold": 0, "solo_ns": 0})
        even = _run_split(net, feeds, [1] * threads)
        for weights in splits:
            assert np.array_equal(_run_split(net, feeds, weights), even, equal_nan=True), (threads, weights)


def _table(net: glow_core.CompiledNetwork) -> ctypes.Array:  # type: ignore[type-arg]
    engine = net.executable.library.engine
    return (ctypes.c_int32 * SPLIT_ENTRIES).from_address(engine.get_global_value_address(SPLIT_GLOBAL))


def test_runs_measure_the_threads_unless_the_split_is_pinned() -> None:
    m = MODELS["matmul, bias, relu"]()
    feeds = _feeds(m)
    net = glow_core.compile(m, "cpu", threads=2, options={"cache": False, "parallel_threshold": 0, "solo_ns": 0})
    table = _table(net)
    want = net.run(feeds)["y"]
    for _ in range(12):
        assert np.array_equal(net.run(feeds)["y"], want)
        # even (0), or cuts for two threads within the speeds' bounds
        lo = int(SPLIT_ONE / (1 + balance.MAX_RATIO ** 2)) - 2
        assert table[0] == 0 or (table[0] == 2 and table[1] == 0 and lo <= table[2] <= SPLIT_ONE - lo
                                 and table[3] == SPLIT_ONE)
    net.executable.set_split([1, 3])
    pinned = list(table[:4])
    assert pinned == [2, 0, SPLIT_ONE // 4, SPLIT_ONE]
    for _ in range(3):
        net.run(feeds)
    assert list(table[:4]) == pinned
    net.executable.set_split(None)
    assert table[0] == 0 and table[SPLIT_ENTRIES - 1] == 0  # even and measured again from the next run


# -- the adaptation's arithmetic, in a module of its own --------------------------------------------------------

class _Adapt:
    """``glow_split_adapt`` JIT-compiled with a setter of the threads' counters and the split table."""

    def __init__(self) -> None:
        cg = host_codegen()
        module = cg.new_module("adapt")
        define_split_table(module, internal=False)
        adapt = balance.emit_adapt(module)
        setter = ir.Function(module, ir.FunctionType(VOID, [I64, I64, I64]), name="set_counters")
        b = ir.IRBuilder(setter.append_basic_block("entry"))
        tid, busy, work = setter.args
        b.store(busy, balance._slot(b, tid, balance._BUSY))
        b.store(work, balance._slot(b, tid, balance._WORK))
        b.ret_void()
        call = ir.Function(module, ir.FunctionType(VOID, [I64]), name="adapt")
        b = ir.IRBuilder(call.append_basic_block("entry"))
        b.call(adapt, [call.args[0]])
        b.ret_void()
        self.lib = cg.load(cg.compile_module(module))
        self.set = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
            self.lib.address("set_counters"))
        self.adapt = ctypes.CFUNCTYPE(None, ctypes.c_int64)(self.lib.address("adapt"))
        self.table = (ctypes.c_int32 * SPLIT_ENTRIES).from_address(
            self.lib.engine.get_global_value_address(SPLIT_GLOBAL))

    def run(self, busy: list[int], work: list[int]) -> list[int]:
        for t, (c, w) in enumerate(zip(busy, work)):
            self.set(t, c, w)
        self.adapt(len(busy))
        return list(self.table[:len(busy) + 2])


class _Model:
    """The rule of ``balance.py`` in Python: speeds from evenly split runs, a dead band, probes."""

    def __init__(self) -> None:
        self.speeds: list[float] = []
        self.runs = 0
        self.cuts: list[int] | None = None  # None: even

    def run(self, busy: list[int], work: list[int]) -> None:
        if self.cuts is None and min(busy) > 0 and min(work) > 0 and sum(busy) >= balance.MIN_CYCLES:
            rates = [w / c for w, c in zip(work, busy)]
            mean = sum(rates) / len(rates)
            rel = [min(max(r / mean, 1 / balance.MAX_RATIO), balance.MAX_RATIO) for r in rates]
            before = self.speeds if len(self.speeds) == len(rel) else [1.0] * len(rel)
            self.speeds = [b * (1 - balance.SMOOTHING) + r * balance.SMOOTHING for b, r in zip(before, rel)]
        self.runs += 1
        skewed = len(self.speeds) == len(busy) and max(self.speeds) > balance.DEAD_BAND * min(self.speeds)
        if skewed and self.runs % balance.PROBE_EVERY:
            acc, total = 0.0, sum(self.speeds)
            self.cuts = [0]
            for k, v in enumerate(self.speeds):
                acc += v
                self.cuts.append(SPLIT_ONE if k == len(self.speeds) - 1 else int(acc / total * SPLIT_ONE))
        else:
            self.cuts = None


def _agree(a: "_Adapt", model: _Model, busy: list[int], work: list[int]) -> list[int]:
    got = a.run(busy, work)
    model.run(busy, work)
    if model.cuts is None:
        assert got[0] == 0, got
    else:
        assert got[0] == len(busy) and all(abs(g - c) <= 1 for g, c in zip(got[1:], model.cuts)), (got, model.cuts)
    return got


def test_the_cuts_follow_the_speeds_measured_in_evenly_split_runs() -> None:
    a, model = _Adapt(), _Model()
    half = SPLIT_ONE // 2
    slow1 = ([1_000_000, 2_000_000], [half, half])  # thread 1 takes twice as long for the same work
    got = _agree(a, model, *slow1)
    assert got[0] == 0  # one run: within the dead band yet
    got = _agree(a, model, *slow1)
    assert got[0] == 2 and got[2] > half  # thread 0 gets more
    skewed = list(a.table[:4])
    # runs split this way are not measured, whatever they time (the lighter thread slows down)
    for _ in range(balance.PROBE_EVERY - 3):
        assert _agree(a, model, [2_000_000, 1_000_000], [half, half]) == skewed
    assert _agree(a, model, [1_000_000, 2_000_000], [half, half])[0] == 0  # the probe: an even run
    # the probe finds the threads equal: the speeds move back within the dead band, the split is even
    for _ in range(6):
        _agree(a, model, [1_000_000, 1_000_000], [half, half])
    assert a.table[0] == 0


def test_outliers_are_bounded_and_unmeasured_runs_change_nothing() -> None:
    a, model = _Adapt(), _Model()
    half = SPLIT_ONE // 2
    assert _agree(a, model, [1_000_000, 100_000_000], [half, half])[0] == 0  # a preempted share: one run is
    assert _agree(a, model, [1_000_000, 1_000_000], [half, half])[0] == 0  # bounded, not enough to skew
    speeds = list(model.speeds)
    _agree(a, model, [1_000_000, 0], [half, 0])  # a thread without a timed share
    _agree(a, model, [5_000, 5_000], [half, half])  # too few cycles
    assert model.speeds == speeds and a.table[0] == 0
    cuts = []
    for _ in range(20):  # a lasting 100 x: the split follows, at most MAX_RATIO squared
        got = _agree(a, model, [1_000_000, 100_000_000], [half, half]) if a.table[0] == 0 else \
            _agree(a, model, [1_000_000, 1_000_000], [half, half])
        cuts += [got[2]] if got[0] == 2 else []
    assert len(cuts) >= 10 and max(cuts) <= SPLIT_ONE * balance.MAX_RATIO ** 2 / (1 + balance.MAX_RATIO ** 2) + 1
    a.table[SPLIT_ENTRIES - 1] = 1  # pinned: nothing changes
    before = list(a.table[:4])
    assert a.run([1_000_000, 4_000_000], [half, half]) == before


def test_three_threads_and_a_new_thread_count_start_afresh() -> None:
    a, model = _Adapt(), _Model()
    third = SPLIT_ONE // 3
    _agree(a, model, [1_000_000, 2_000_000], [SPLIT_ONE // 2] * 2)
    for _ in range(3):  # speeds 2 : 2 : 1, not mixed with the old two
        got = _agree(a, model, [1_000_000, 1_000_000, 2_000_000], [third] * 3)
    assert got[0] == 3 and got[2] < got[3] - got[2] + 2 and got[4] == SPLIT_ONE
