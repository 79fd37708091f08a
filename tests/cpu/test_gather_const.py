"""Gather with constant indices on the last axis (``emit/gather_const.py``) and the Resize it serves, vs the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from glow_backend_cpu.emit.gather_const import repeat_factor
from tests.cpu.util import check, evaluate_reference, feeds_of, one_node_function, rand, run_cpu

DTYPES = [np.float32, np.int64, np.int8, np.bool_, np.float16, ml_dtypes.bfloat16, np.float64]


def test_repeat_factor() -> None:
    assert repeat_factor(np.arange(10) // 2) == 2
    assert repeat_factor(np.arange(11) // 3) == 3  # a partial last group
    assert repeat_factor(np.arange(7)) == 0  # the identity is not a repetition
    assert repeat_factor(np.array([0, 0, 1, 2, 2, 3])) == 0
    assert repeat_factor(np.array([1, 1, 2, 2])) == 0
    assert repeat_factor(np.zeros(5, np.int64)) == 5
    assert repeat_factor(np.array([0])) == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("table", [
    np.arange(18) // 2, np.arange(13) // 3, np.array([[4, -1, 0], [2, 2, -9]]), np.array([8, 0, 3, 3, 1]),
], ids=["repeat2", "repeat3-tail", "2d-negative", "shuffled"])
def test_constant_last_axis(table: np.ndarray, dtype: type) -> None:
    x = rand((2, 3, 9), dtype, np.random.default_rng(0))
    check("Gather", [x, table.astype(np.int64)], {"axis": 2}, consts=(1,))
    check("Gather", [x, table.astype(np.int32)], {"axis": 2}, consts=(1,))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_constant_split_between_threads(threads: int) -> None:
    x = rand((70, 3, 61), np.float32, np.random.default_rng(1))  # 70 * 3 * 122 outputs: the rows are split
    check("Gather", [x, np.arange(122) // 2], {"axis": 2}, consts=(1,), threads=threads)
    check("Gather", [x, np.arange(60, -1, -1)], {"axis": 2}, consts=(1,), threads=threads)


def test_constant_other_axes_use_the_generic_kernel() -> None:
    x = rand((4, 5, 6), np.float32, np.random.default_rng(2))
    for axis in (0, 1):
        check("Gather", [x, np.array([[0, -1], [2, 3]])], {"axis": axis}, consts=(1,))


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"},
    {"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"},
], ids=["nearest-asym-floor", "nearest-half-pixel", "nearest-align"])
@pytest.mark.parametrize("scale", [2.0, 3.0, 1.5, 0.5], ids=["x2", "x3", "x1.5", "x0.5"])
@pytest.mark.parametrize("threads", [1, 2])
def test_resize(attrs: dict[str, str], scale: float, threads: int) -> None:
    x = rand((1, 5, 13, 19), np.float32, np.random.default_rng(3))
    sizes = (1, 5, int(13 * scale), int(19 * scale))
    full = dict(attrs, sizes=sizes, scales=(1.0, 1.0, scale, scale))
    check("Resize", [x], full, threads=threads)


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("scale", [2.0, 1.5, 0.5], ids=["x2", "x1.5", "x0.5"])
def test_resize_linear(coord: str, scale: float) -> None:
    """Linear taps are constant tables too; the weights are applied in float32 (the kernel: float64)."""
    x = rand((1, 3, 11, 17), np.float32, np.random.default_rng(4))
    sizes = (1, 3, int(11 * scale), int(17 * scale))
    attrs = {"mode": "linear", "coordinate_transformation_mode": coord, "sizes": sizes,
             "scales": (1.0, 1.0, scale, scale)}
    fn = one_node_function("Resize", [x], attrs)
    node = fn.nodes[0]
    want = evaluate_reference("Resize", [x], node.attrs, [o.type for o in node.outputs])[0]
    got = run_cpu(fn, feeds_of(fn, [x]), threads=2)["out0"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(x).max()))
