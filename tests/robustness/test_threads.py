"""The ONNX backend interface's prepared model shared by several threads."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from glow_core import onnx_backend
from tests.robustness.util import F, model, run_together

pytestmark = pytest.mark.robustness


def _reshape_by_input():  # type: ignore[no-untyped-def]
    """``y = Reshape(x, s)``: the input ``s`` decides a shape, so it is bound at compile time."""
    return model([helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", F, [2, 3]), ("s", TensorProto.INT64, [2])],
                 [("y", F, [3, 2])])


def test_a_placeholder_bound_by_another_thread_meanwhile_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread B binds 's' while thread A's first compile runs: A's DynamicValueError names 's', already in
    the bound set; A must retry with it bound, not re-raise (1.5 % of first runs with 8 threads)."""
    rep = onnx_backend.prepare(_reshape_by_input())
    real = onnx_backend.compile_model
    calls: list[tuple[str, ...]] = []

    def racing_compile(model, backend, shapes, bind, **kw):  # type: ignore[no-untyped-def]
        calls.append(tuple(sorted(bind)))
        if not bind:
            rep.compiled.bind(["s"])  # what the other thread did meanwhile
        return real(model, backend, shapes, bind=bind, **kw)

    monkeypatch.setattr(onnx_backend, "compile_model", racing_compile)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = rep.run([x, np.array([3, 2], np.int64)])
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    assert calls == [(), ("s",)]


def test_eight_threads_share_a_rep_on_their_first_run() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([3, 2], np.int64)
    for _ in range(3):
        rep = onnx_backend.prepare(_reshape_by_input())
        results = run_together(8, lambda: rep.run([x, s])[0])  # noqa: B023  (rep is used in this iteration)
        assert len(results) == 8 and all(np.array_equal(r, x.reshape(3, 2)) for r in results)
