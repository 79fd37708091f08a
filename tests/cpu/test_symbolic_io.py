"""Inputs and outputs of cpu networks moved with few copies (``glow_backend_cpu/symio.py``).

Large outputs are written into pooled buffers and handed to the caller as views; a buffer is reused only
when no view of it is left, so a result never changes after it is returned. Large feeds are copied by two
threads. A KV-cache step (past concatenated with the new position, fed back as the next past) checks both
against numpy, holding earlier results across later runs."""

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
    """present = Concat(past, new) on the position axis; doubled = past + past."""
    inputs = [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, HEADS, past, DIM]),
              helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, HEADS, 1, DIM])]
    after = f"{past} + 1" if isinstance(past, str) else past + 1
    outputs = [helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, HEADS, after, DIM]),
               helper.make_tensor_value_info("doubled", TensorProto.FLOAT, [1, HEADS, past, DIM])]
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Add", ["past", "past"], ["doubled"])]
    graph = helper.make_graph(nodes, "kv", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(past: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    new = np.random.default_rng(seed).standard_normal((1, HEADS, 1, DIM)).astype(np.float32)
    return {"past": past, "new": new}


def _check(out: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(out["present"], np.concatenate([feeds["past"], feeds["new"]], axis=2))
    np.testing.assert_array_equal(out["doubled"], feeds["past"] + feeds["past"])


@pytest.fixture(scope="module")
def net() -> object:
    return glow_core.compile(kv_model(), "cpu", threads=2)


def test_a_result_never_changes_after_later_runs(net: object) -> None:
    """Steps of new pasts and of the last step's present fed back (a view of a handed buffer, copied into
    the input's buffer); every result is kept and checked again at the end: a buffer reused while a
    result still views it would have changed that result."""
    rng = np.random.default_rng(0)
    past = rng.standard_normal((1, HEADS, 40, DIM)).astype(np.float32)
    kept = []
    for step in range(6):
        feeds = _feeds(past, step)
        out = net.run(feeds)
        _check(out, feeds)
        kept.append((out, {k: v.copy() for k, v in out.items()}))
        fresh = rng.standard_normal((1, HEADS, 30 + 7 * step, DIM)).astype(np.float32)
        past = out["present"] if step % 2 else fresh
    for out, copy in kept:
        for k in copy:
            np.testing.assert_array_equal(out[k], copy[k])


def test_dropped_results_give_their_buffers_back() -> None:
    net = glow_core.compile(kv_model(), "cpu", threads=2)
    past = np.ones((1, HEADS, 100, DIM), np.float32)
    feeds = _feeds(past, 1)
    exe = net.specialization(feeds).executable
    assert exe._set_symbols is not None, "the network is not the symbolic one"
    for _ in range(8):
        out = net.run(feeds)
        _check(out, feeds)
        del out
    assert exe._handed.held() == 0
    assert exe._handed.pooled() <= 2, "results dropped before the next run should leave their buffers to it"
    held = [net.run(feeds) for _ in range(symio.POOL_SIZE + 2)]  # more held at once than the pool keeps
    assert len({h["present"].__array_interface__["data"][0] for h in held}) == len(held)
    for h in held:
        _check(h, feeds)


def test_static_large_outputs_are_aligned_contiguous_and_kept() -> None:
    net = glow_core.compile(kv_model(100), "cpu", threads=2)
    feeds = _feeds(np.random.default_rng(3).standard_normal((1, HEADS, 100, DIM)).astype(np.float32), 3)
    first = net.run(feeds)
    assert first["present"].nbytes > SMALL_IO_BYTES
    copy = {k: v.copy() for k, v in first.items()}
    second = net.run(_feeds(first["doubled"], 4))  # a handed output fed back: aligned, bound without staging
    _check(second, _feeds(first["doubled"], 4))
    for k in copy:
        np.testing.assert_array_equal(first[k], copy[k])
        assert first[k].flags.c_contiguous and first[k].ctypes.data % 64 == 0


def test_large_feeds_are_copied_whole_by_two_threads() -> None:
    rng = np.random.default_rng(5)
    sizes = [(3000, 64), (700, 64), (1200, 64), (50, 64), (4000, 64)]
    feeds = [rng.standard_normal(s).astype(np.float32) for s in sizes]
    assert sum(a.nbytes for a in feeds) >= symio.PARALLEL_COPY_BYTES
    bufs = [np.zeros((s[0] + 7, s[1]), np.float32) for s in sizes]
    symio.copy_feeds([(b, (slice(0, a.shape[0]), slice(0, a.shape[1])), a) for b, a in zip(bufs, feeds)],
                     parallel=True)
    assert symio._helper is not None
    for b, a in zip(bufs, feeds):
        np.testing.assert_array_equal(b[:a.shape[0]], a)
        assert not b[a.shape[0]:].any()
