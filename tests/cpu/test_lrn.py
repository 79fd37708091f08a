"""The cpu backend's LRN kernel (``emit/lrn.py``) against the lowered graph it replaces, bit for bit.

The lowered form (squares, a zero-padded copy, ``size`` shifted adds, the element-wise tail) still runs when
the backend lowers LRN, which the tests force through ``should_lower``; both compile on the cpu backend, so
any difference in the window's order, in the roundings of the tail or in the tail masks shows in the bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import get_backend
from tests.cpu.util import run_at_feature_level

CASES: list[tuple[str, tuple[int, ...], dict[str, Any], str]] = [
    ("alexnet", (1, 96, 27, 27), {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, "normal"),
    ("even-size", (2, 7, 5, 13), {"size": 4, "alpha": 0.3, "beta": 0.75, "bias": 2.0}, "normal"),
    ("libm-beta", (1, 6, 9, 9), {"size": 3, "alpha": 0.02, "beta": 0.6, "bias": 1.5}, "normal"),
    ("size-past-channels", (1, 3, 4, 17), {"size": 11, "alpha": 0.5, "beta": 0.75, "bias": 1.0}, "normal"),
    ("one-d", (2, 5, 70), {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 1.0}, "normal"),
    ("three-d", (1, 4, 3, 5, 7), {"size": 2, "alpha": 1e-2, "beta": 0.5, "bias": 1.0}, "normal"),
    ("specials", (1, 8, 6, 11), {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, "specials"),
]


def _model(shape: tuple[int, ...], attrs: dict[str, Any], elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("LRN", ["x"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", elem, shape)],
                          [helper.make_tensor_value_info("y", elem, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _input(shape: tuple[int, ...], fill: str, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = (r.standard_normal(shape) * 3).astype(np.float32)
    if fill == "specials":  # NaN, infinities, zeros of both signs, squares that overflow
        flat = x.reshape(-1)
        idx = r.choice(flat.size, size=10, replace=False)
        flat[idx] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3e19, -2e20, 1e-30, np.nan, 5e18]
    return x


def _compare(got: np.ndarray, want: np.ndarray, cid: str) -> None:
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{cid}: NaN at other positions"
    diff = got.view(np.uint32)[~nan] != want.view(np.uint32)[~nan]
    assert not diff.any(), f"{cid}: {int(diff.sum())} of {diff.size} elements differ in their bits"


def check_case(cid: str, threads: int) -> None:
    """The kernel's result against the lowered graph's, both on the cpu backend."""
    _, shape, attrs, fill = next(c for c in CASES if c[0] == cid)
    m, x = _model(shape, attrs), _input(shape, fill, seed=len(cid))
    got = glow_core.compile(m, "cpu", threads=threads).run({"x": x})["y"]
    be = get_backend("cpu")
    keep = be.should_lower
    be.should_lower = lambda node: node.kind.name == "LRN" or keep(node)  # type: ignore[method-assign]
    try:
        want = glow_core.compile(m, "cpu", threads=threads).run({"x": x})["y"]
    finally:
        del be.should_lower
    _compare(got, want, cid)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_lrn_bits(cid: str, threads: int) -> None:
    check_case(cid, threads)


def test_kernel_takes_float32_only() -> None:
    """float32 LRN stays one node; float16 is lowered (and still agrees with the interpreter)."""
    assert get_backend("cpu").supported_kinds()["LRN"] == frozenset({ElemKind.FLOAT32})
    m = _model((1, 6, 5, 5), {"size": 3}, TensorProto.FLOAT16)
    x = _input((1, 6, 5, 5), "normal", 3).astype(np.float16)
    got = glow_core.compile(m, "cpu").run({"x": x})["y"]
    want = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3)


def test_interpreter_agrees() -> None:
    """Against the interpreter (numpy's power where the cpu takes sqrt(s) * sqrt(sqrt(s))): a few ulps."""
    for cid, shape, attrs, fill in CASES:
        m, x = _model(shape, attrs), _input(shape, fill, seed=len(cid))
        got = glow_core.compile(m, "cpu").run({"x": x})["y"]
        want = glow_core.compile(m, "interpreter").run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=4e-7, atol=0, equal_nan=True, err_msg=cid)


def test_avx2(tmp_path: Any) -> None:
    """The same cases on 8-lane vectors."""
    code = ("from tests.cpu.test_lrn import CASES, check_case\n"
            "for c in CASES:\n    check_case(c[0], 2)\nprint('ok')\n")
    run_at_feature_level(code, "avx2", tmp_path)
