"""Unit tests of single kernels against the reference backend (glow_tools.testing)."""

from __future__ import annotations

import numpy as np
import pytest

from glow_tools.testing import check_node

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("kind", ["Add", "Mul", "Max", "Div"])
def test_binary_float32(kind: str) -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.uniform(0.5, 2.0, (4,)).astype(np.float32)  # broadcasts
    r = check_node("example", kind, [a, b])
    assert r.ok, r.message


def test_conv() -> None:
    x = RNG.standard_normal((1, 3, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    r = check_node("example", "Conv", [x, w, None], {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)})
    assert r.ok, r.message


def test_softmax_is_lowered_onto_the_primitives() -> None:
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    r = check_node("example", "Softmax", [x], {"axes": (1,)})
    assert r.ok, r.message
    assert "Softmax" not in r.nodes  # glow lowered it: ReduceMax, Sub, Exp, ReduceSum, Div
