"""The device API (SDK API 2.2): tensors stay on a device between its partitions, transfers overlap compute.

The fixture backend ``simdev`` (tests/runtime/device_plugin.py) keeps its tensors in a memory of its own,
records every copy and run, and sleeps a simulated cost for each: the figures below are structural
(sleeps), not the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.plugin_host import get_backend, registry
from glow_core.runtime import DeviceExecutionError, HostManager, parse_devices, plan_network
from glow_sdk.device import DeviceMemory, HostMemory
from glow_sdk.version import HISTORY
from tests.cliutil import add_relu_model
from tests.runtime import device_plugin
from tests.sdk import sdk20_backend
from tests.runtime.device_plugin import TIMING, Event, events


def _mlp(widths: tuple[int, ...], side_branch: bool) -> onnx.ModelProto:
    """x -> MatMul m1 -> MatMul m2 ...; with ``side_branch``, y = m2 + Sigmoid(m1) (Sigmoid: cpu only)."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        inits.append(numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        x = f"m{i}"
    if side_branch:
        nodes += [helper.make_node("Sigmoid", ["m0"], ["s"], name="sig"),
                  helper.make_node("Add", [x, "s"], ["y"], name="join")]
        x = "y"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, widths[0]])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, widths[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(autouse=True)
def timing() -> Iterator[None]:
    saved = (TIMING.transfer_s, TIMING.run_s, TIMING.scale)
    device_plugin.clear_events()
    yield
    TIMING.transfer_s, TIMING.run_s, TIMING.scale = saved


def test_defaults_keep_existing_backends_on_host_memory() -> None:
    """cpu, the interpreter, the phase-1 fixtures and the SDK 2.0 fixture keep host memory
    and run through ``execute`` in the runtime, as before."""
    if registry().record("sdk20") is None:
        registry().register_plugin(sdk20_backend.plugin, "sdk20", "glow-backend-sdk20", "2.0.0")
    for name in ("cpu", "interpreter", "narrow", "picky", "sdk20"):
        memory = get_backend(name).device_memory(0)
        assert isinstance(memory, HostMemory) and not memory.resident
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        buf = memory.copy_from_host(a)
        assert buf.handle is a and memory.copy_to_host(buf) is a and buf.type.shape == (2, 3)
    since = {f.name: str(f.since) for f in HISTORY}
    for member in ("allocate", "copy_from_host", "copy_to_host", "copy_from_device", "free", "resident"):
        assert hasattr(DeviceMemory, member) and since[f"DeviceMemory.{member}"] == "2.2"
    assert since["Backend.device_memory"] == since["CompiledFunction.execute_async"] == "2.2"
    feeds = {"x": np.ones((1, 10), np.float32), "y": np.full((1, 10), -2, np.float32)}
    with HostManager("narrow:1,sdk20:1,cpu:1") as hm:
        hm.add_network("m", add_relu_model())
        assert not any(m.memory.resident for m in hm.managers.values())
        np.testing.assert_array_equal(hm.run_sync("m", feeds)["out"], np.zeros((1, 10), np.float32))


def test_the_default_execute_async_is_synchronous_and_carries_errors() -> None:
    model = _mlp((8, 8), side_branch=False)
    net = glow_core.compile(model, "interpreter")
    exe = net.executable
    memory = HostMemory("interpreter")
    x = np.ones((4, 8), np.float32)
    handle = exe.execute_async({"x": memory.copy_from_host(x)}, memory)
    assert handle.done()
    np.testing.assert_allclose(handle.result()["m0"].handle, net.run({"x": x})["m0"], rtol=1e-6)

    class Failing(type(exe)):  # type: ignore[misc]
        def execute(self, feeds: object) -> dict[str, np.ndarray]:
            raise RuntimeError("device lost")

    exe.__class__ = Failing
    bad = exe.execute_async({"x": memory.copy_from_host(x)}, memory)
    assert bad.done() and isinstance(bad.exception(), RuntimeError)


def _assignment(model: onnx.ModelProto, devices: str, split: int) -> dict[str, str]:
    fn = plan_network(model, parse_devices(devices)).function
    names = [n.name for n in fn.nodes]
    ids = [d.id for d in parse_devices(devices)]
    return {n: ids[0] if i < split else ids[1] for i, n in enumerate(names)}


def test_consecutive_partitions_on_one_device_make_no_host_round_trip() -> None:
    """simdev0 runs [mm0, mm1], cpu the Sigmoid of mm0's result, simdev0 again the Add: mm1's result goes
    from the first simdev partition to the second on the device, never through the host."""
    model = _mlp((8, 16, 16), side_branch=True)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    ref = glow_core.compile(model, "cpu").run({"x": x})
    with HostManager("simdev:1,cpu:1") as hm:
        plan = hm.add_network("mlp", model)
        assert [p.backend for p in plan.partitions] == ["simdev", "cpu", "simdev"]
        assert plan.partitions[0].device == plan.partitions[2].device == "simdev0"
        device_plugin.clear_events()
        out = hm.run_sync("mlp", {"x": x})
        memory = hm.managers["simdev0"].memory
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-4, atol=1e-5)
    shapes = {what: sorted(e.shape for e in events(what)) for what in ("h2d", "d2h", "d2d")}
    # in: x, and the Sigmoid's result from cpu; out: mm0's result for cpu, and the model's output
    assert shapes["h2d"] == [(4, 8), (4, 16)] and shapes["d2h"] == [(4, 16), (4, 16)], shapes
    assert not shapes["d2d"]
    assert len(events("run")) == 2 and memory.live == 0  # every buffer given back when the request ended


def test_a_failed_run_fails_its_request_and_frees_its_buffers() -> None:
    model = _mlp((8, 16, 16), side_branch=True)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    with HostManager("simdev:1,cpu:1") as hm:
        hm.add_network("mlp", model)
        bad = x.copy()
        bad.flat[0] = device_plugin.FAULT
        with pytest.raises(DeviceExecutionError, match="device simdev0: .*partition mlp/p0: RuntimeError: injected device fault"):
            hm.run_sync("mlp", {"x": bad})
        assert hm.run_sync("mlp", {"x": x})["y"].shape == (4, 16)  # the device goes on serving
        assert hm.managers["simdev0"].memory.live == 0


def _pipeline_throughput(model: onnx.ModelProto, assignment: dict[str, str], overlap: bool,
                         requests: int) -> tuple[float, list[Event], np.ndarray]:
    x = np.ones((4, 8), np.float32)
    with HostManager("simdev:2", overlap_transfers=overlap, max_in_flight=16) as hm:
        hm.add_network("mlp", model, assignment=assignment)
        hm.run_sync("mlp", {"x": x})  # warm up
        device_plugin.clear_events()
        t0 = time.perf_counter()
        futures = [hm.run("mlp", {"x": x}) for _ in range(requests)]
        outs = [f.result(timeout=60) for f in futures]
        elapsed = time.perf_counter() - t0
    assert all(np.array_equal(o["m3"], outs[0]["m3"]) for o in outs)
    return requests / elapsed, events(), outs[0]["m3"]


def _overlap_s(trace: list[Event], device: str) -> float:
    """Seconds during which a transfer into or out of ``device`` ran while the device computed."""
    runs = [e for e in trace if e.device == device and e.what == "run"]
    moves = [e for e in trace if e.device == device and e.what != "run"]
    return sum(max(0.0, min(a.end, b.end) - max(a.start, b.start)) for a in runs for b in moves)


def test_a_two_device_pipeline_overlaps_transfers_with_compute() -> None:
    """Each request: x host -> simdev0, run, simdev0 -> simdev1 (device to device), run, simdev1 -> host.
    Every copy sleeps 10 ms and every run 20 ms: the synchronous executor spends 40 ms per request on
    simdev1 (copy in, run, copy out); with the copy thread, simdev1's 20 ms of copies overlap its 20 ms
    runs of other requests, so the pipeline ideally runs twice as fast."""
    TIMING.transfer_s, TIMING.run_s = 0.010, 0.020
    model = _mlp((8, 8, 8, 8, 8), side_branch=False)
    assignment = _assignment(model, "simdev:2", 2)
    sync, sync_trace, first = _pipeline_throughput(model, assignment, overlap=False, requests=40)
    fast, trace, second = _pipeline_throughput(model, assignment, overlap=True, requests=40)
    ref = glow_core.compile(model, "cpu").run({"x": np.ones((4, 8), np.float32)})["m3"]
    np.testing.assert_allclose(first, ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(first, second)
    assert {e.what for e in trace} == {"h2d", "d2d", "d2h", "run"}
    assert not any(e.what == "d2h" and e.device == "simdev0" for e in trace)  # simdev0 -> simdev1 never via host
    assert _overlap_s(sync_trace, "simdev1") == 0.0
    assert _overlap_s(trace, "simdev1") > 0.2  # of about 0.8 s of runs
    assert fast >= 1.3 * sync, f"{fast:.1f} requests/s with overlap, {sync:.1f} without"
