"""The float32 MaxPool rows path's fast reduction (``pool._PoolChunk.max_fast``) against the interpreter, bit for bit.

The fast path takes one vector max per tap (``v > acc ? v : acc``), clamps window rows outside the image to
the nearest row, and re-reduces a chunk exactly when a running sum of its taps is NaN. These cases hold
what it could get wrong: signed zeros (numpy's ``maximum`` keeps the earlier of two equal elements), NaN
(lost by a vector max), +inf beside -inf (the sum's false alarm), clamped rows at both edges, ceil_mode,
chunks of several vectors, a window loop that is not unrolled, and the windows the clamp must not take (row
dilation; padding as wide as the window, so some windows hold no image row).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import glow_core
from glow_backend_cpu.emit.pool import _geometry, rows_clamp_exact
from tests.cpu.util import run_at_feature_level

CASES: list[tuple[str, tuple[int, ...], dict[str, Any], str]] = [
    ("zeros-s1p1", (1, 3, 13, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "zeros"),
    ("nan-inf-s2", (1, 3, 17, 17), {"kernel_shape": [3, 3], "strides": [2, 2]}, "specials"),
    ("ceil-bottom", (1, 2, 10, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, "specials"),
    ("pad-asym", (1, 2, 9, 9), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [2, 1, 1, 0]}, "zeros"),
    ("wide-chunks", (1, 2, 5, 150), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "late-nan"),
    ("looped-rows", (1, 2, 12, 70), {"kernel_shape": [7, 5], "pads": [3, 2, 3, 2]}, "specials"),
    ("dilated-rows", (1, 2, 11, 11), {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 1, 1]},
     "zeros"),
    ("empty-windows", (1, 2, 4, 20), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [3, 0, 3, 0]},
     "zeros"),
]


def _model(shape: tuple[int, ...], attrs: dict[str, Any]) -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return onnx.shape_inference.infer_shapes(m)


def _input(shape: tuple[int, ...], fill: str, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(np.float32)
    if fill == "zeros":  # mostly signed zeros: which of two equal maxima wins shows in the sign bit
        x = np.where(r.random(shape) < 0.8, np.where(r.random(shape) < 0.5, 0.0, -0.0), -np.abs(x))
    elif fill == "specials":
        flat = x.reshape(-1)
        idx = r.choice(flat.size, size=12, replace=False)
        flat[idx[:3]] = np.nan
        flat[idx[3:7]] = np.inf
        flat[idx[7:]] = -np.inf
    elif fill == "late-nan":  # only the last chunk of one row holds a NaN
        x[0, 1, 2, 140] = np.nan
        x[0, 0, 3, 5] = np.inf
    return x.astype(np.float32)


def check_case(cid: str, threads: int) -> None:
    _, shape, attrs, fill = next(c for c in CASES if c[0] == cid)
    m = _model(shape, attrs)
    x = _input(shape, fill, seed=len(cid))
    want = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    got = glow_core.compile(m, "cpu", threads=threads).run({"x": x})["y"]
    assert got.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{cid}: NaN at other positions"
    same = got.view(np.uint32)[~nan] == want.view(np.uint32)[~nan]
    assert same.all(), f"{cid}: {int((~same).sum())} elements differ in their bits"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_maxpool_bits(cid: str, threads: int) -> None:
    check_case(cid, threads)


def test_clamp_only_where_exact() -> None:
    """The fast path's row clamp is taken only where a clamped row stays inside its window."""
    def fits(shape: tuple[int, ...], attrs: dict[str, Any]) -> bool:
        m = _model(shape, attrs)
        ys = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
        full = {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], **attrs}
        return rows_clamp_exact(_geometry(shape, ys, full))

    expect = {"dilated-rows": False, "empty-windows": False}
    for cid, shape, attrs, _ in CASES:
        assert fits(shape, attrs) is expect.get(cid, True), cid


def test_avx2(tmp_path: Any) -> None:
    """The same cases on 8-lane vectors."""
    code = ("from tests.cpu.test_maxpool_fast import CASES, check_case\n"
            "for c in CASES:\n    check_case(c[0], 2)\nprint('ok')\n")
    run_at_feature_level(code, "avx2", tmp_path)
