"""The cpu runtime: input validation before native code, alignment, threads, the error flag, the object cache."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from glow_backend_cpu.runtime import SMALL_IO_BYTES, aligned_empty, default_threads
from onnx import TensorProto, helper

import glow_core
from glow_core.errors import ExecutionError, InputError


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 300])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 300])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 300])
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0), helper.make_node("Exp", ["g"], ["y"]),
             helper.make_node("Tanh", ["x"], ["z"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x, i], [y, z]), opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def net() -> glow_core.CompiledNetwork:  # type: ignore[name-defined]
    return glow_core.compile(_model(), "cpu", threads=2, options={"parallel_threshold": 0})


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((64, 300)).astype(np.float32), "i": np.array([0, 3, -1, 63, 5], np.int64)}


def _want(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x, i = feeds["x"], feeds["i"]
    return {"y": np.exp(x[i]), "z": np.tanh(x)}


def _assert_ok(out: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> None:
    want = _want(feeds)
    for k in want:
        np.testing.assert_allclose(out[k], want[k], rtol=1e-5, atol=1e-6)


def test_runs_and_outputs_are_fresh_aligned_arrays(net) -> None:  # type: ignore[no-untyped-def]
    feeds = _feeds()
    a, b = net.run(feeds), net.run(feeds)
    _assert_ok(a, feeds)
    assert a["y"] is not b["y"] and a["z"] is not b["z"]
    assert a["z"].nbytes > SMALL_IO_BYTES and a["z"].ctypes.data % 64 == 0  # large: written in place
    ex = net.executable
    for buf in (ex._consts, ex._arena, ex._scratch):
        assert buf.ctypes.data % 64 == 0


@pytest.mark.parametrize("bad,msg", [
    ({"x": np.zeros((64, 300), np.float64)}, "dtype"),
    ({"x": np.zeros((64, 299), np.float32)}, "shape"),
    ({"x": np.zeros((300, 64), np.float32).T}, None),  # non-contiguous: accepted
    ({"i": np.zeros((5,), np.int32)}, "dtype"),
    ({"x": "not an array"}, "numpy array"),
])
def test_inputs_are_checked_before_native_code(net, bad, msg) -> None:  # type: ignore[no-untyped-def]
    feeds = dict(_feeds(), **bad)
    if msg is None:
        _assert_ok(net.run(feeds), feeds)
        _assert_ok(net.executable.execute(feeds), feeds)
        return
    with pytest.raises(InputError, match=msg):
        net.run(feeds)
    with pytest.raises(InputError):
        net.executable.execute(feeds)


def test_missing_input_is_refused_by_the_executable(net) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="missing input 'i'"):
        net.executable.execute({"x": _feeds()["x"]})


def test_unaligned_and_strided_inputs(net) -> None:  # type: ignore[no-untyped-def]
    feeds = _feeds()
    raw = aligned_empty((64 * 300 + 1,), np.float32)
    shifted = raw[1:].reshape(64, 300)  # 4 bytes past a 64-byte boundary
    shifted[...] = feeds["x"]
    assert shifted.ctypes.data % 64 == 4
    f2 = {"x": shifted, "i": feeds["i"]}
    _assert_ok(net.run(f2), feeds)
    f3 = {"x": np.asfortranarray(feeds["x"]), "i": feeds["i"][::1]}
    _assert_ok(net.run(f3), feeds)


def test_index_out_of_range_raises_and_the_network_stays_usable(net) -> None:  # type: ignore[no-untyped-def]
    feeds = _feeds()
    bad = dict(feeds, i=np.array([0, 1, 64, 2, 3], np.int64))
    with pytest.raises(ExecutionError, match="out of range"):
        net.run(bad)
    bad2 = dict(feeds, i=np.array([0, -65, 1, 2, 3], np.int64))
    with pytest.raises(ExecutionError):
        net.run(bad2)
    _assert_ok(net.run(feeds), feeds)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_thread_counts_including_oversubscription(threads: int) -> None:
    net = glow_core.compile(_model(), "cpu", threads=threads, options={"parallel_threshold": 0})
    assert net.executable.threads == threads
    feeds = _feeds()
    for _ in range(3):
        _assert_ok(net.run(feeds), feeds)


def test_default_thread_count_is_the_affinity_set() -> None:
    import os

    net = glow_core.compile(_model(), "cpu")
    assert net.executable.threads == default_threads() == len(os.sched_getaffinity(0))


def test_concurrent_runs_from_python_threads_are_serialized(net) -> None:  # type: ignore[no-untyped-def]
    feeds = _feeds()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(10):
                _assert_ok(net.run(feeds), feeds)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_second_compile_is_served_by_the_cache() -> None:
    model = _model()
    glow_core.compile(model, "cpu")
    second = glow_core.compile(model, "cpu")
    assert second.executable.compile_timings["cached"]
    feeds = _feeds()
    _assert_ok(second.run(feeds), feeds)
    third = glow_core.compile(model, "cpu", options={"cache": False})
    assert not third.executable.compile_timings["cached"]


def test_a_corrupt_cache_entry_is_a_miss(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    model = _model()
    glow_core.compile(model, "cpu")
    for p in (tmp_path / "cpu").glob("*.json"):
        p.write_text("{not json")
    net = glow_core.compile(model, "cpu")
    assert not net.executable.compile_timings["cached"]
    feeds = _feeds()
    _assert_ok(net.run(feeds), feeds)


def test_unsupported_kinds_are_reported_at_compile_time() -> None:
    from glow_core.errors import UnsupportedError
    from glow_tools.testing import one_node_function, run_function

    fn = one_node_function("Conv", [np.zeros((1, 1, 2, 2, 2, 2), np.float32), np.zeros((1, 1, 1, 1, 1, 1), np.float32)],
                           {"strides": (1, 1, 1, 1), "pads": (0,) * 8, "dilations": (1, 1, 1, 1), "group": 1})
    try:
        run_function(fn, "cpu", {"in0": np.zeros((1, 1, 2, 2, 2, 2), np.float32),
                                 "in1": np.zeros((1, 1, 1, 1, 1, 1), np.float32)})
    except UnsupportedError as e:
        assert "Conv" in str(e)


def test_small_io_goes_through_buffers_bound_once(net) -> None:  # type: ignore[no-untyped-def]
    """Small inputs are copied into a buffer bound at construction, small outputs returned as copies:
    the region table keeps its addresses, and neither the caller's arrays nor returned ones alias them."""
    ex = net.executable
    small_in = [(r, n) for r, n, _d, _s, buf in ex._in_plan if buf is not None]
    small_out = [(r, n) for r, n, _d, _s, buf in ex._out_plan if buf is not None]
    assert [n for _, n in small_in] == ["i"] and [n for _, n in small_out] == ["y"]
    before = [ex._regions[r] for r, _ in small_in + small_out]
    feeds = _feeds()
    a = net.run(feeds)
    a["y"][...] = 7.0  # the caller owns what it got back
    feeds["i"][...] = 1  # and what it passed in
    b = net.run(_feeds())
    _assert_ok(b, _feeds())
    assert [ex._regions[r] for r, _ in small_in + small_out] == before
    c = net.run(feeds)
    np.testing.assert_allclose(c["y"], np.exp(feeds["x"][[1] * 5]), rtol=1e-5)
    _assert_ok(b, _feeds())  # the earlier result did not change


def test_a_repeated_graph_output_and_scalar_io() -> None:
    """An output listed twice (two regions) and 0-d inputs and outputs through the bound buffers."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [y, y])
    net = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "cpu", threads=2)
    for v in (1.5, -2.0):
        out = net.run({"x": np.array(v, np.float32)})
        assert out["y"].shape == () and float(out["y"]) == -v
