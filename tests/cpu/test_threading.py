"""Threading that knows the work size (``workload.py``): small kernels run on the calling thread alone.

Every model here is checked against the interpreter, repeatedly, so a missing barrier between a solo
kernel and a parallel one (a race) shows as a wrong result.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_backend_cpu.workload import DEFAULT_SOLO_NS, kernel_ns

F = TensorProto.FLOAT


def _small() -> onnx.ModelProto:
    """A handful of tiny element-wise nodes and a tiny matrix product: nothing worth a second thread."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    mk = helper.make_node
    nodes = [mk("Abs", ["x"], ["a"]), mk("Add", ["a", "x"], ["b"]), mk("MatMul", ["b", "w"], ["m"]),
             mk("Tanh", ["m"], ["t"]), mk("Softmax", ["t"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", F, [4, 16])],
                          [helper.make_tensor_value_info("y", F, [4, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _mixed() -> onnx.ModelProto:
    """Small kernels feeding a large matrix product feeding small kernels, with a skip around it: solo
    kernels write what a parallel one reads and read what it wrote (both need a barrier)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((256, 256)) * 0.05).astype(np.float32), "w")
    w2 = numpy_helper.from_array((rng.standard_normal((256, 3)) * 0.05).astype(np.float32), "w2")
    mk = helper.make_node
    nodes = [mk("Neg", ["x"], ["n"]), mk("Abs", ["n"], ["a"]),  # small (x is 64 x 256: 16k elements)
             mk("MatMul", ["a", "w"], ["m"]),  # 8.4 MFLOP: parallel
             mk("Add", ["m", "x"], ["s"]),  # reads the parallel result and the input
             mk("MatMul", ["s", "w2"], ["h"]),  # small
             mk("Sigmoid", ["h"], ["y"])]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", F, [64, 256])],
                          [helper.make_tensor_value_info("y", F, [64, 3]), helper.make_tensor_value_info("s", F,
                                                                                                      [64, 256])],
                          [w, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return glow_core.compile(model, "interpreter").run(feeds)


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5, err_msg=k)


def test_a_model_of_small_kernels_never_wakes_a_worker() -> None:
    net = glow_core.compile(_small(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 1})
    exe = net.executable
    assert exe.layout.kernels >= 3 and exe.layout.parallel_kernels == 0
    x = {"x": np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)}
    for _ in range(3):
        _assert_close(net.run(x), _reference(_small(), x))
    assert exe._pool is None  # no worker thread was ever started


@pytest.mark.parametrize("threads", [2, 4])
def test_solo_and_parallel_kernels_are_ordered_by_barriers(threads: int) -> None:
    model = _mixed()
    net = glow_core.compile(model, "cpu", threads=threads, options={"cache": False, "parallel_threshold": 1})
    lay = net.executable.layout
    assert 0 < lay.parallel_kernels < lay.kernels  # the large product is parallel, the rest solo
    rng = np.random.default_rng(3)
    for _ in range(25):  # 4 threads on a shared machine: waiters sleep in the barrier (futex) and are woken
        x = {"x": rng.standard_normal((64, 256)).astype(np.float32)}
        _assert_close(net.run(x), _reference(model, x))


def test_consecutive_solo_kernels_need_no_barrier() -> None:
    solo = glow_core.compile(_small(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 1})
    every = glow_core.compile(_small(), "cpu", threads=2,
                              options={"cache": False, "parallel_threshold": 1, "solo_ns": 0})
    assert solo.executable.layout.barriers == 1  # only the final one
    assert every.executable.layout.barriers > 1  # the same chain split over threads needs one per dependency
    assert every.executable.layout.parallel_kernels == every.executable.layout.kernels
    x = {"x": np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)}
    _assert_close(solo.run(x), every.run(x))


def test_parallel_threshold_zero_keeps_every_kernel_on_every_thread() -> None:
    net = glow_core.compile(_small(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 0})
    assert net.executable.layout.parallel_kernels == net.executable.layout.kernels


def test_negative_thresholds_are_rejected() -> None:
    from glow_core.errors import GlowError

    with pytest.raises(GlowError, match="solo_ns"):
        glow_core.compile(_small(), "cpu", options={"cache": False, "solo_ns": -1})


def test_the_estimate_separates_large_products_from_small_element_wise_kernels() -> None:
    net = glow_core.compile(_mixed(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 1})
    lir = net.executable.lir
    estimates = {ins.kind: kernel_ns([ins]) for ins in lir.instrs if ins.kind in ("FusedMatMul", "MatMul", "Neg")}
    big = max(v for k, v in estimates.items() if "MatMul" in k)
    assert big > DEFAULT_SOLO_NS > estimates["Neg"]


def test_a_profile_gives_solo_kernels_one_thread() -> None:
    net = glow_core.compile(_mixed(), "cpu", threads=2,
                            options={"cache": False, "parallel_threshold": 1, "profile": True})
    net.run({"x": np.ones((64, 256), np.float32)})
    run = net.executable.profile_run()
    spans = sorted({len(k.spans) for k in run.kernels})
    assert spans == [1, 2]
    assert all(len(k.spans) == 2 for k in run.kernels if "MatMul" in k.kind and k.flops > 1_000_000)
    assert len(run.idle()) == 2


def test_results_do_not_depend_on_the_thread_count() -> None:
    """What lets the runtime switch between one and every thread from run to run (``ThreadChooser``)."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((256, 512)) * 0.05).astype(np.float32), "w")
    mk = helper.make_node
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [mk("MatMul", ["x", "w"], ["m"]), mk("Softmax", ["m"], ["s"], axis=-1),
             mk("ReduceSum", ["m", "axes"], ["r"], keepdims=1), mk("Mul", ["s", "r"], ["y"])]
    g = helper.make_graph(nodes, "bitwise", [helper.make_tensor_value_info("x", F, [128, 256])],
                          [helper.make_tensor_value_info("y", F, [128, 512])], [w, axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = {"x": rng.standard_normal((128, 256)).astype(np.float32)}
    net = glow_core.compile(m, "cpu", threads=2, options={"cache": False, "parallel_threshold": 0, "solo_ns": 0})
    two = net.run(x)["y"]
    net.executable.set_threads(1)
    assert np.array_equal(net.run(x)["y"], two)


def test_a_fixed_thread_count_turns_the_chooser_off() -> None:
    net = glow_core.compile(_mixed(), "cpu", threads=2,
                            options={"cache": False, "parallel_threshold": 1, "adaptive_threads": True})
    assert net.executable._chooser is not None
    net.executable.set_threads(2)
    assert net.executable._chooser is None
    off = glow_core.compile(_mixed(), "cpu", threads=2,
                            options={"cache": False, "parallel_threshold": 1, "adaptive_threads": False})
    assert off.executable._chooser is None


def test_the_chooser_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    net = glow_core.compile(_mixed(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 1})
    assert net.executable._chooser is None
    monkeypatch.setenv("GLOW_CPU_ADAPTIVE", "1")
    on = glow_core.compile(_mixed(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 1})
    assert on.executable._chooser is not None


def test_a_thread_runs_the_shares_of_a_worker_that_never_comes() -> None:
    """``glow_main`` called as thread 0 of 2 with no worker: thread 0 takes the worker's share of every
    segment (sync.py, *shares*) and returns with the whole result, where a barrier would wait forever."""
    x = {"x": np.random.default_rng(3).standard_normal((64, 256)).astype(np.float32)}
    one = glow_core.compile(_mixed(), "cpu", threads=1, options={"cache": False, "parallel_threshold": 1})
    want = one.run(x)
    net = glow_core.compile(_mixed(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 1})
    exe = net.executable
    assert exe.layout.parallel_kernels > 0 and exe.layout.barriers > 1
    exe.set_threads(1)
    assert all(np.array_equal(v, want[k]) for k, v in net.run(x).items())  # binds x; no share table touched
    bufs = [buf for _region, _name, _dtype, _shape, buf in exe._out_plan]
    assert all(buf is not None for buf in bufs)
    for buf in bufs:
        buf[...] = np.nan
    done = threading.Event()

    def alone() -> None:
        exe._entry(exe._regions_addr, 0, 2, 1)  # run number 1: this library's first parallel run
        done.set()

    threading.Thread(target=alone, daemon=True).start()
    assert done.wait(60), "thread 0 waited for a worker that does not exist"
    got = {name: buf for (_r, name, _d, _s, buf) in exe._out_plan}
    assert all(np.array_equal(got[k], want[k]) for k in want)
