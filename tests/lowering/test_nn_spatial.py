"""Lowering of the spatial sampling kinds: primitives-only interpreter vs interpreter.

MaxUnpool and Col2Im (scatters with index tables), GridSample (every mode and
padding, 1-D to 3-D), RoiAlign (both modes, fixed sampling ratios and
adaptive ones from constant RoIs) and DeformConv (groups, offset groups,
masks, 1-D to 3-D).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from glow_core.pipeline import check_support, compile_options, prepare_function
from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import TensorType
from glow_core.plugin_host import get_backend
from tests.lowering.test_reduce import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I32,
    I64,
    U8,
    assert_close,
    assert_primitive_only,
    build,
    check_lowering,
    rand,
)

FLOATS = [F32, F16, BF16, F64]


def check(kind: str, operands: list[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
    """check_lowering with the omitted trailing operands passed as None."""
    n = len(get_kind(kind).inputs)
    return check_lowering(kind, list(operands) + [None] * (n - len(operands)), attrs)


# -- MaxUnpool / Col2Im ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_maxunpool(dtype: np.dtype) -> None:
    x = rand((2, 3, 2, 2), dtype)
    out_shape = (2, 3, 4, 5)
    rng = np.random.default_rng(1)
    idx = rng.choice(math.prod(out_shape), size=x.size, replace=False).reshape(x.shape).astype(np.int64)
    check("MaxUnpool", [x, idx], {"output_shape": out_shape})
    idx[0, 0, 0, 0] = idx[0, 0, 0, 1]  # a repeated index: the later element wins, as the kernel's assignment
    check("MaxUnpool", [x, idx], {"output_shape": out_shape})


COL2IM_CASES = [
    # (image, block, strides, dilations, pads)
    ((5,), (2,), (1,), (1,), (0, 0)),
    ((5, 5), (2, 2), (1, 1), (1, 1), (0, 0, 0, 0)),
    ((5, 6), (3, 2), (2, 1), (1, 2), (1, 0, 1, 1)),
    ((6, 5), (2, 3), (3, 2), (2, 1), (2, 1, 0, 2)),
    ((3, 4, 3), (2, 2, 2), (1, 2, 1), (1, 1, 1), (1, 0, 0, 0, 1, 1)),
]


@pytest.mark.parametrize("case", COL2IM_CASES, ids=lambda c: f"{len(c[0])}d-b{c[1]}-s{c[2]}")
@pytest.mark.parametrize("dtype", FLOATS + [I8, U8, I32, I64], ids=str)
def test_col2im(dtype: np.dtype, case: tuple[Any, ...]) -> None:
    image, block, s, d, p = case
    nd = len(image)
    blocks = math.prod((image[i] + p[i] + p[nd + i] - ((block[i] - 1) * d[i] + 1)) // s[i] + 1 for i in range(nd))
    x = rand((2, 3 * math.prod(block), blocks), dtype, -100 if dtype.kind != "u" else 0, 100)
    check("Col2Im", [x], {"image_shape": image, "block_shape": block, "strides": s, "dilations": d, "pads": p})


# -- GridSample ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_grid_sample(dtype: np.dtype, mode: str, padding: str) -> None:
    for sizes, out in (((5,), (4,)), ((4, 5), (3, 2)), ((3, 4, 2), (2, 2, 3)), ((1, 3), (2, 2))):
        if mode == "cubic" and len(sizes) == 3:
            continue
        r = len(sizes)
        x = rand((2, 3) + sizes, dtype, seed=1)
        grid = rand((2,) + out + (r,), dtype, -1.4, 1.4, seed=2)
        grid.flat[0] = 0.0  # exact positions, and a tie of the nearest mode
        for align in (False, True):
            check("GridSample", [x, grid], {"mode": mode, "padding_mode": padding, "align_corners": align})


# -- RoiAlign ---------------------------------------------------------------------------------------------

def _rois(dtype: np.dtype) -> np.ndarray:
    return np.array([[0.5, 0.5, 6.2, 5.1], [2.0, 1.0, 3.0, 7.5], [-1.0, -2.0, 9.0, 9.5], [4.0, 4.0, 4.0, 4.0]],
                    dtype=dtype)


@pytest.mark.parametrize("half_pixel", [True, False])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_roi_align(dtype: np.dtype, mode: str, half_pixel: bool) -> None:
    x = rand((2, 3, 8, 7), dtype, seed=1)
    batch = np.array([0, 1, 1, 0], np.int64)
    for sr in (1, 2, 3):
        for scale in (1.0, 0.5):
            attrs = {"mode": mode, "output_height": 3, "output_width": 2, "sampling_ratio": sr,
                     "spatial_scale": scale, "half_pixel": half_pixel}
            check("RoiAlign", [x, _rois(dtype), batch], attrs)


def _run_const_rois(x: np.ndarray, rois: np.ndarray, batch: np.ndarray, attrs: dict[str, Any],
                    backend: str) -> tuple[np.ndarray, Function]:
    fn = Function("main")
    xv = fn.add_input("in0", TensorType.of(x))
    node = fn.create("RoiAlign", [xv, fn.add_constant(rois, "rois"), fn.add_constant(batch, "batch")], attrs)
    fn.set_output("out0", node.result)
    be = get_backend(backend)
    prepare_function(fn, be, debug=True)
    return be.compile(fn, compile_options()).execute({"in0": x})["out0"], fn


@pytest.mark.parametrize("half_pixel", [True, False])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_roi_align_adaptive_sampling_from_constant_rois(dtype: np.dtype, mode: str, half_pixel: bool) -> None:
    # sampling_ratio 0: each RoI's sample count depends on its size; static when the RoIs are constants
    x = rand((2, 3, 8, 7), dtype, seed=1)
    attrs = {"mode": mode, "output_height": 2, "output_width": 3, "sampling_ratio": 0, "spatial_scale": 1.0,
             "half_pixel": half_pixel}
    batch = np.array([0, 1, 1, 0], np.int64)
    want, native = _run_const_rois(x, _rois(dtype), batch, attrs, "interpreter")
    assert native.nodes_of("RoiAlign")
    got, lowered = _run_const_rois(x, _rois(dtype), batch, attrs, "interpreter-primitives")
    assert_primitive_only(lowered)
    assert_close([got], [want])


def test_roi_align_adaptive_sampling_from_run_time_rois_is_declined() -> None:
    # the sample count per bin would depend on run-time RoI values: no static shape, the node stays and the
    # primitives-only backend reports it as unsupported (never a wrong answer)
    x, rois, batch = rand((1, 2, 5, 5), F32), _rois(F32), np.zeros(4, np.int64)
    attrs = {"mode": "avg", "output_height": 2, "output_width": 2, "sampling_ratio": 0}
    fn = build("RoiAlign", [x, rois, batch], attrs)
    be = get_backend("interpreter-primitives")
    prepare_function(fn, be, debug=True)
    assert [n.kind.name for n in fn.nodes] == ["RoiAlign"]
    with pytest.raises(UnsupportedError, match=r"RoiAlign\(float32/int64\) x1"):
        check_support(fn, be)


# -- DeformConv ---------------------------------------------------------------------------------------------

DEFORM_CASES = [
    # (spatial, kernel, strides, dilations, pads, group, offset_group)
    ((6,), (3,), (1,), (1,), (1, 1), 1, 1),
    ((5, 5), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, 1),
    ((6, 5), (2, 3), (2, 1), (1, 2), (0, 1, 1, 0), 2, 2),
    ((5, 5), (2, 2), (1, 2), (2, 1), (0, 0, 1, 1), 1, 4),
    ((3, 4, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (0, 1, 0, 1, 0, 1), 2, 1),
]


@pytest.mark.parametrize("case", DEFORM_CASES, ids=lambda c: f"{len(c[0])}d-g{c[5]}-og{c[6]}")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_deform_conv(dtype: np.dtype, case: tuple[Any, ...]) -> None:
    sp, k, s, d, p, g, og = case
    nd = len(sp)
    c, m = 4, 2 * g
    x = rand((2, c) + sp, dtype, seed=1)
    w = rand((m, c // g) + k, dtype, seed=2)
    out = [(sp[i] + p[i] + p[nd + i] - ((k[i] - 1) * d[i] + 1)) // s[i] + 1 for i in range(nd)]
    kp = math.prod(k)
    offset = rand((2, og * kp * nd, *out), dtype, -2, 2, seed=3)
    mask = rand((2, og * kp, *out), dtype, 0, 1, seed=4)
    attrs = {"strides": s, "dilations": d, "pads": p, "group": g, "offset_group": og}
    check("DeformConv", [x, w, offset], attrs)
    check("DeformConv", [x, w, offset, rand((m,), dtype, seed=5), mask], attrs)
