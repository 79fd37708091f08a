"""Large outputs of cpu networks handed to the caller instead of copied (``glow_backend_cpu/symio.py``).

Each large output is written into a pooled buffer and returned as a view of it; a buffer is reused only when no
view of it is left, so a result never changes after it is returned. A KV-cache step (the past concatenated with
the new position, fed back as the next past) is checked against numpy while earlier results are held across
later runs, through the views the caller makes of them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_backend_cpu import symio
from glow_backend_cpu.runtime import SMALL_IO_BYTES

HEADS, DIM = 8, 64


def kv_model(past: str | int = "past") -> onnx.ModelProto:
    """present = Concat(past, new) on the position axis; doubled = past + past; ids = an int64 output."""
    inputs = [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, HEADS, past, DIM]),
              helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, HEADS, 1, DIM])]
    after = f"{past} + 1" if isinstance(past, str) else past + 1
    outputs = [helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, HEADS, after, DIM]),
               helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [1, HEADS, past, DIM]),
               helper.make_tensor_value_info("ids", TensorProto.INT64, [1, HEADS, past, DIM])]
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Add", ["past", "past"], ["doubled"]),
             helper.make_node("Cast", ["doubled"], ["ids"], to=TensorProto.INT64)]
    graph = helper.make_graph(nodes, "kv", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(past: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    new = np.random.default_rng(seed).standard_normal((1, HEADS, 1, DIM)).astype(np.float32)
    return {"past": past, "new": new}


def _check(out: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(out["present"], np.concatenate([feeds["past"], feeds["new"]], axis=2))
    np.testing.assert_array_equal(out["doubled"], feeds["past"] + feeds["past"])
    np.testing.assert_array_equal(out["ids"], (feeds["past"] + feeds["past"]).astype(np.int64))


@pytest.fixture(scope="module")
def net() -> object:
    return glow_core.compile(kv_model(), "cpu", threads=2)


def test_a_result_never_changes_after_later_runs(net: object) -> None:
    """Steps of fresh pasts and of the last step's present fed back (a non-contiguous view of a handed
    buffer); every result, and a slice of every other one, is kept and checked again at the end: a buffer
    reused while a result (or only a view of it) still held it would have changed that result."""
    rng = np.random.default_rng(0)
    past = rng.standard_normal((1, HEADS, 40, DIM)).astype(np.float32)
    kept = []
    for step in range(8):
        feeds = _feeds(past, step)
        out = net.run(feeds)
        _check(out, feeds)
        if step % 2:  # only a slice survives: it alone must keep the buffer from the pool
            out = {k: v[:, :3] for k, v in out.items()}
        kept.append((out, {k: v.copy() for k, v in out.items()}))
        fresh = rng.standard_normal((1, HEADS, 30 + 7 * step, DIM)).astype(np.float32)
        past = kept[-1][0]["present"] if step % 3 == 0 and step % 2 == 0 else fresh
    for out, copy in kept:
        for k in copy:
            np.testing.assert_array_equal(out[k], copy[k])


def test_symbolic_float_outputs_are_views_of_handed_buffers_and_fed_back_as_they_are(net: object) -> None:
    past = np.random.default_rng(1).standard_normal((1, HEADS, 100, DIM)).astype(np.float32)
    feeds = _feeds(past, 1)
    exe = net.specialization(feeds).executable
    assert exe._set_symbols is not None, "the network is not the symbolic one"
    out = net.run(feeds)
    present = out["present"]
    assert present.shape == (1, HEADS, 101, DIM) and not present.flags.c_contiguous
    assert isinstance(present.base, np.ndarray) and present.base.base is not None  # the pooled mapping
    assert out["ids"].flags.c_contiguous, "an integer output is copied out (its padding is never handed)"
    # fed back: the core passes the view as it is (no contiguous copy) and the run reads it correctly
    assert net.specialization(feeds).check_feeds({"past": present, "new": feeds["new"]})["past"] is present
    again = net.run(_feeds(present, 2))
    _check(again, _feeds(present, 2))


def test_dropped_results_give_their_buffers_back() -> None:
    net = glow_core.compile(kv_model(), "cpu", threads=2)
    feeds = _feeds(np.ones((1, HEADS, 100, DIM), np.float32), 1)
    exe = net.specialization(feeds).executable
    for _ in range(8):
        out = net.run(feeds)
        _check(out, feeds)
        del out
    assert exe._handed.held() == 0
    assert exe._handed.pooled() == 2, "each output's one buffer should serve every run once dropped"
    held = [net.run(feeds) for _ in range(symio.POOL_SIZE + 2)]  # more held at once than the pool keeps
    assert exe._handed.held() == 2 * symio.POOL_SIZE and exe._handed.pooled() == 2 * symio.POOL_SIZE
    assert len({h["present"].__array_interface__["data"][0] for h in held}) == len(held)
    for h in held:
        _check(h, feeds)


def test_static_large_outputs_are_aligned_contiguous_and_kept() -> None:
    net = glow_core.compile(kv_model(100), "cpu", threads=2)
    feeds = _feeds(np.random.default_rng(3).standard_normal((1, HEADS, 100, DIM)).astype(np.float32), 3)
    first = net.run(feeds)
    assert first["present"].nbytes > SMALL_IO_BYTES
    copy = {k: v.copy() for k, v in first.items()}
    second_feeds = _feeds(first["doubled"], 4)  # a handed output fed back: aligned, read in place
    second = net.run(second_feeds)
    _check(second, second_feeds)
    for k in copy:
        np.testing.assert_array_equal(first[k], copy[k])
        assert first[k].flags.c_contiguous and first[k].ctypes.data % 64 == 0
    assert net.executable._handed.held() == 6  # (3 large outputs x 2 results held)


def test_large_feeds_are_copied_by_two_threads_and_land_where_one_would(net: object, monkeypatch) -> None:
    """With the parallel threshold lowered, every step's feeds go through the two-thread copy (the helper
    thread is seen copying) and the results equal the one-thread copy's and numpy's; a feed larger than half
    the total is split in two."""
    import threading

    seen: list[str] = []
    real = symio._copy_all

    def recording(pairs):  # type: ignore[no-untyped-def]
        if pairs:
            seen.append(threading.current_thread().name)
        real(pairs)

    monkeypatch.setattr(symio, "_copy_all", recording)
    monkeypatch.setattr(symio, "PARALLEL_FEED_BYTES", 1)
    rng = np.random.default_rng(3)
    past = rng.standard_normal((1, HEADS, 33, DIM)).astype(np.float32)
    for step in range(4):
        feeds = _feeds(past, step)
        out = net.run(feeds)
        _check(out, feeds)
        past = out["present"]
    assert any(name.startswith("glow-feed-copy") for name in seen), seen
    big = np.arange(64.0).reshape(8, 8)
    first, second = symio._halves([(np.empty((8, 8)), big), (np.empty(3), np.ones(3))])
    assert len(first) + len(second) == 3 and abs(sum(s.nbytes for _, s in first) - sum(s.nbytes for _, s in second)) <= 24
    dst = np.zeros((8, 8))
    symio._copy_all([(dst[:4], big[:4]), (dst[4:], big[4:])])
    np.testing.assert_array_equal(dst, big)


def _copy_in_child() -> None:
    symio.PARALLEL_FEED_BYTES = 1
    dst, src = np.zeros((4, 1000)), np.ones((4, 1000))
    symio.copy_feeds([(dst[:2], src[:2]), (dst[2:], src[2:])], threads=2)
    raise SystemExit(0 if (dst == 1).all() else 3)


def test_a_forked_child_copies_with_a_helper_of_its_own(monkeypatch) -> None:
    """The parent's helper thread does not exist in a forked child: the child's two-thread copy makes its own
    helper instead of waiting forever on the parent's."""
    import multiprocessing

    monkeypatch.setattr(symio, "PARALLEL_FEED_BYTES", 1)
    symio.copy_feeds([(np.zeros(1000), np.ones(1000)), (np.zeros(1000), np.ones(1000))], threads=2)  # (helper made)
    child = multiprocessing.get_context("fork").Process(target=_copy_in_child)
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child's feed copy hung")
    assert child.exitcode == 0
