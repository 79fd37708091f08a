"""Compile work that grew with an attribute's value is bounded by the tensors' sizes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

import glow_core
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness


@pytest.mark.parametrize("backend", ["interpreter-primitives", "cpu"])
def test_lrn_with_a_huge_size_makes_at_most_2c_minus_1_taps(backend: str) -> None:
    """size 100001 made 100000 Slice+Add nodes (minutes of compile on cpu); taps past c-1 only read padding."""
    if backend == "cpu":
        pytest.importorskip("glow_backend_cpu")
    m = model([helper.make_node("LRN", ["x"], ["y"], size=100001, alpha=0.5, beta=0.75, bias=1.0)],
              [("x", F, [1, 3, 2, 2])], [("y", F, [1, 3, 2, 2])], opset=13)
    net = glow_core.compile(m, backend=backend, options={"cache": False})
    assert net.stats.nodes_by_kind.get("Slice", 0) <= 2 * 3 - 1
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 2)).astype(np.float32)
    want = glow_core.compile(m, backend="interpreter").run({"x": x})["y"]  # the LRN kernel, not the lowering
    np.testing.assert_allclose(net.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 7])
def test_lrn_window_cut_keeps_the_kernels_answer(size: int) -> None:
    """The lowering (interpreter-primitives) against the interpreter's LRN kernel (which onnxruntime agrees with)."""
    m = model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.6, bias=2.0)],
              [("x", F, [2, 3, 2, 1])], [("y", F, [2, 3, 2, 1])], opset=13)
    x = np.random.default_rng(size).standard_normal((2, 3, 2, 1)).astype(np.float32)
    net = glow_core.compile(m, backend="interpreter-primitives")
    want = glow_core.compile(m, backend="interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(net.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def _col_range_by_walking(size: int, out: int, s: int, off: int) -> tuple[int, int]:
    lo = 0
    while lo < out and lo * s + off < 0:
        lo += 1
    hi = out
    while hi > lo and (hi - 1) * s + off >= size:
        hi -= 1
    return lo, hi


def test_pool_column_range_is_closed_form() -> None:
    """MaxPool with pad 2**31-1 walked every output column in Python at compile time."""
    pytest.importorskip("glow_backend_cpu")
    from glow_backend_cpu.emit.pool import col_range

    for size, out, s, off in itertools.product(range(7), range(9), range(1, 4), range(-9, 9)):
        assert col_range(size, out, s, off) == _col_range_by_walking(size, out, s, off)
    p = 2**31 - 1
    assert col_range(8, 2 * p + 6, 1, -p) == (p, p + 8)  # one call, no walk over 4e9 columns


def test_maxpool_with_a_huge_pad_compiles_on_cpu_and_matches_the_interpreter() -> None:
    pytest.importorskip("glow_backend_cpu")
    pad = 5000
    m = model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3], pads=[pad, pad])],
              [("x", F, [1, 1, 8])], [("y", F, [1, 1, 8 + 2 * pad - 2])], opset=17)
    x = np.random.default_rng(0).standard_normal((1, 1, 8)).astype(np.float32)
    got = glow_core.compile(m, backend="cpu", options={"cache": False}).run({"x": x})["y"]
    # onnx.reference fails on such windows; the interpreter's kernel is the specification here
    np.testing.assert_array_equal(got, glow_core.compile(m, backend="interpreter").run({"x": x})["y"])


def test_maxpool_with_a_kernel_wider_than_the_unroll_limit_matches_the_interpreter() -> None:
    pytest.importorskip("glow_backend_cpu")
    m = model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1000], pads=[600, 600])],
              [("x", F, [1, 2, 300])], [("y", F, [1, 2, 501])], opset=17)
    x = np.random.default_rng(0).standard_normal((1, 2, 300)).astype(np.float32)
    got = glow_core.compile(m, backend="cpu", options={"cache": False}).run({"x": x})["y"]
    # onnx.reference fails on such windows; the interpreter's kernel is the specification here
    np.testing.assert_array_equal(got, glow_core.compile(m, backend="interpreter").run({"x": x})["y"])
