"""The host manager: load from many threads, the queue bound, cancellation, faults, hangs, removal."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from collections import Counter
from concurrent.futures import CancelledError, Future

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from glow_core.runtime import (
    DeviceExecutionError,
    HostManager,
    NetworkError,
    QueueFullError,
    RequestTimeoutError,
)
from tests.runtime import narrow_plugin


def two_stage_model() -> onnx.ModelProto:
    """``out = relu(x @ W + b) @ V`` -- small, several nodes, deterministic."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", TensorProto.FLOAT, [8, 16], rng.standard_normal((8, 16)).astype(np.float32).ravel())
    v = helper.make_tensor("V", TensorProto.FLOAT, [16, 4], rng.standard_normal((16, 4)).astype(np.float32).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [16], rng.standard_normal(16).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "V"], ["out"])]
    g = helper.make_graph(nodes, "two_stage", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])], [w, v, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reference(x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(two_stage_model()).run(None, {"x": x})[0]


def test_ten_thousand_requests_from_sixteen_threads() -> None:
    model = two_stage_model()
    names = None
    with HostManager("cpu:2@800", max_in_flight=8, max_queued=32) as hm:
        plan = hm.add_network("m", model)
        names = {p.device for p in plan.partitions}
        assert len(plan.partitions) >= 2 and len(names) == 2  # a pipeline over both devices
        xs = np.random.default_rng(1).standard_normal((64, 1, 8)).astype(np.float32)
        expect = [hm.run_sync("m", {"x": x})["out"] for x in xs]
        for x, e in zip(xs[:4], expect[:4]):
            np.testing.assert_allclose(e, reference(x), rtol=1e-5, atol=1e-5)
        outcomes: Counter[str] = Counter()
        wrong: list[int] = []
        lock = threading.Lock()

        def client(t: int) -> None:
            futures: list[tuple[int, Future]] = []
            local: Counter[str] = Counter()
            for i in range(625):
                k = (t * 625 + i) % len(xs)
                try:
                    futures.append((k, hm.run("m", {"x": xs[k]})))
                except QueueFullError:
                    local["rejected"] += 1
            for k, f in futures:
                out = f.result(timeout=120)
                local["done"] += 1
                if not np.array_equal(out["out"], expect[k]):
                    with lock:
                        wrong.append(k)
            with lock:
                outcomes.update(local)

        def wave(clients: range) -> None:
            threads = [threading.Thread(target=client, args=(t,)) for t in clients]
            for th in threads:
                th.start()
            for th in threads:
                th.join(300)
            assert not any(th.is_alive() for th in threads)

        # memory must not grow with the number of requests served: what is still allocated after the
        # second half of the clients is no more than after the first half (plus a little slack)
        tracemalloc.start()
        try:
            wave(range(8))
            gc.collect()
            after_half = tracemalloc.get_traced_memory()[0]
            wave(range(8, 16))
            gc.collect()
            after_all = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        st = hm.stats()
        runs = {m.id: m.runs for m in hm.managers.values()}
    assert all(r >= outcomes["done"] for r in runs.values()), runs  # every request went through both devices
    print(f"10000 requests: {outcomes['done']} done, {outcomes['rejected']} rejected by the queue bound")
    assert outcomes["done"] + outcomes["rejected"] == 10000
    assert outcomes["done"] >= 8 + 32  # at least what the bounds admit at once
    assert not wrong
    print(f"traced memory after 5000 requests: {after_half} B, after 10000: {after_all} B")
    assert after_all - after_half < 256 << 10, (after_half, after_all)
    assert st.done == outcomes["done"] + 64 and st.rejected == outcomes["rejected"] and st.failed == 0
    assert st.queued == 0 and st.running == 0 and set(st.latency_ms) == {"p50", "p90", "p99", "max"}


def test_queue_full_is_rejected_at_once_naming_the_limits() -> None:
    narrow_plugin.RELEASE.clear()
    with HostManager("hang:1", max_in_flight=1, max_queued=1, timeout=30) as hm:
        hm.add_network("m", two_stage_model())
        stuck = np.full((1, 8), narrow_plugin.FAULT, np.float32)
        first = hm.run("m", {"x": stuck})
        queued = hm.run("m", {"x": np.zeros((1, 8), np.float32)})
        with pytest.raises(QueueFullError, match="max_in_flight=1.*max_queued=1"):
            hm.run("m", {"x": np.zeros((1, 8), np.float32)})
        assert queued.cancel()  # a queued request can be cancelled
        assert hm.stats().rejected == 1
        narrow_plugin.RELEASE.set()
        assert first.result(30)["out"].shape == (1, 4)
        with pytest.raises(CancelledError):
            queued.result(1)
        assert hm.run_sync("m", {"x": np.zeros((1, 8), np.float32)})["out"].shape == (1, 4)
        assert hm.stats().cancelled == 1


def test_a_failing_device_fails_exactly_its_requests() -> None:
    with HostManager("flaky:1", max_in_flight=16, max_queued=1000) as hm:
        hm.add_network("m", two_stage_model())
        xs = np.random.default_rng(2).standard_normal((500, 1, 8)).astype(np.float32)
        bad = set(range(3, 500, 100))  # 1% of the runs
        for i in bad:
            xs[i, 0, 0] = narrow_plugin.FAULT
        futures = [hm.run("m", {"x": x}) for x in xs]
        failed = set()
        for i, f in enumerate(futures):
            err = f.exception(60)
            if err is not None:
                assert isinstance(err, DeviceExecutionError)
                assert "device flaky0" in str(err) and "injected device fault" in str(err)
                failed.add(i)
            else:
                np.testing.assert_allclose(f.result()["out"], reference(xs[i]), rtol=1e-5, atol=1e-5)
        assert failed == bad
        assert hm.stats().failed == len(bad)


def test_a_hung_device_becomes_a_timeout_not_a_deadlock() -> None:
    narrow_plugin.RELEASE.clear()
    try:
        with HostManager("hang:1", timeout=0.5) as hm:
            hm.add_network("m", two_stage_model())
            f = hm.run("m", {"x": np.full((1, 8), narrow_plugin.FAULT, np.float32)})
            with pytest.raises(RequestTimeoutError, match=r"timed out after 0.5 s .*hang0"):
                f.result(10)
            assert hm.stats().timed_out == 1 and hm.stats().running == 0
            narrow_plugin.RELEASE.set()  # the device comes back: later requests work
            assert hm.run_sync("m", {"x": np.zeros((1, 8), np.float32)}, timeout=30)["out"].shape == (1, 4)
    finally:
        narrow_plugin.RELEASE.set()


def test_remove_network_lets_in_flight_finish_and_fails_queued() -> None:
    narrow_plugin.RELEASE.clear()
    with HostManager("hang:1", max_in_flight=1, max_queued=4) as hm:
        hm.add_network("m", two_stage_model())
        running = hm.run("m", {"x": np.full((1, 8), narrow_plugin.FAULT, np.float32)})
        queued = hm.run("m", {"x": np.zeros((1, 8), np.float32)})
        threading.Timer(0.3, narrow_plugin.RELEASE.set).start()
        hm.remove_network("m", wait=30)
        assert running.result(1)["out"].shape == (1, 4)
        with pytest.raises(NetworkError, match="removed while this request was queued"):
            queued.result(1)
        with pytest.raises(NetworkError, match="no network named 'm'"):
            hm.run("m", {"x": np.zeros((1, 8), np.float32)})
        assert all(m.used_bytes == 0 and not m.loaded for m in hm.managers.values())


def test_add_network_twice_and_bad_feeds() -> None:
    with HostManager("cpu:1") as hm:
        hm.add_network("m", two_stage_model())
        with pytest.raises(NetworkError, match="already added"):
            hm.add_network("m", two_stage_model())
        from glow_core.errors import InputError

        with pytest.raises(InputError, match="missing input"):
            hm.run("m", {})
