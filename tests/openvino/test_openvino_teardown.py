"""Releasing an OpenVINO part waits for the completion callbacks still running.

A completion callback runs Python on an OpenVINO thread; the future of ``execute_async`` completes inside
it, so the caller may go on to close the network while the callback has not returned. Destroying the
compiled model then joins that thread while the closing thread holds the GIL the callback needs: the
process hung at exit (CI, ``glow run --devices openvino:1,cpu:1``). These tests hold a callback inside
Python and check that ``release`` waits for it, and keeps the part alive when it does not return."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import glow_core
from glow_core import zoo

pytest.importorskip("openvino")

from glow_backend_openvino import runner  # noqa: E402 -- after the skip above


def _part() -> tuple[runner.OvPart, dict[str, np.ndarray]]:
    net = glow_core.compile("zoo:digits", "openvino")
    part = next(p for p in net.executable.parts if isinstance(p, runner.OvPart))
    feeds = zoo.random_feeds({p.name: p.type for p in net.function.inputs}, seed=0)
    names = dict(zip(part.input_names, feeds.values()))
    return part, names


def _held_run(part: runner.OvPart, feeds: dict[str, np.ndarray]) -> tuple[threading.Event, threading.Event]:
    """Start one run whose ``finish`` blocks, inside the completion callback, until the returned gate opens."""
    inside, gate = threading.Event(), threading.Event()

    def finish(outputs: object, error: BaseException | None) -> None:
        inside.set()
        gate.wait(30)

    part.start(feeds, finish)
    assert inside.wait(30), "the completion callback never ran"
    return inside, gate


def test_release_waits_for_a_callback_still_running() -> None:
    part, feeds = _part()
    _, gate = _held_run(part, feeds)
    releasing = threading.Thread(target=part.release)
    releasing.start()
    releasing.join(0.5)
    assert releasing.is_alive() and part.compiled is not None, "released while a callback was running"
    gate.set()
    releasing.join(30)
    assert not releasing.is_alive() and part.compiled is None


def test_a_callback_that_does_not_return_keeps_the_part_alive() -> None:
    part, feeds = _part()
    _, gate = _held_run(part, feeds)
    try:
        part.release(timeout=0.2)
        assert part.compiled is not None and part in runner._KEPT
    finally:
        gate.set()


def test_waited_runs_leave_nothing_in_flight() -> None:
    part, feeds = _part()
    for _ in range(3):
        part.run(feeds)
    done = threading.Thread(target=part.release)
    done.start()
    done.join(30)
    assert not done.is_alive() and part.compiled is None
