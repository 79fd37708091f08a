"""Lowering of Resize: every mode, nearest rounding, coordinate transform, exclude_outside, antialias and
tf_crop_and_resize extrapolation, primitives-only interpreter against the interpreter.

Nearest is a pure gather (bit-exact for every element kind); linear and cubic
compute in float32 (float64 for float64 data) against the kernel's float64, so
they agree within rounding. The lowered function holds primitives only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from glow_core.pipeline import check_support, prepare_function
from glow_core.errors import ExecutionError, UnsupportedError
from glow_core.ir.defs.movement_resize import COORD_MODES, NEAREST_MODES
from glow_core.plugin_host import get_backend
from tests.lowering.test_movement import BOOL, data, lowered_kinds
from tests.lowering.test_reduce import BF16, F16, F32, F64, I8, I64, U8, build, check_lowering, rand, run

#: every coordinate transform but tf_crop_and_resize (which takes a crop box)
PLAIN_COORDS = [c for c in COORD_MODES if c != "tf_crop_and_resize"]

#: (input shape, output shape): up, down, mixed, to length 1, 1-d, 3-d
SHAPES = [((1, 2, 4, 5), (1, 2, 7, 9)), ((1, 1, 6, 8), (1, 1, 3, 5)), ((2, 1, 5, 4), (2, 1, 2, 10)),
          ((1, 1, 4, 4), (1, 1, 1, 3)), ((7,), (12,)), ((2, 9, 3), (2, 4, 3))]


def resize_attrs(x_shape: Sequence[int], sizes: Sequence[int], **attrs: Any) -> dict[str, Any]:
    scales = tuple(o / i for i, o in zip(x_shape, sizes))
    base = {"sizes": tuple(sizes), "scales": scales, "roi": (), "mode": "nearest",
            "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
            "cubic_coeff_a": -0.75, "exclude_outside": False, "extrapolation_value": 0.0, "antialias": False}
    base.update(attrs)
    return base


# -- nearest -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, BF16, I8, U8, I64, BOOL], ids=str)
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
def test_nearest(nearest_mode: str, dtype: np.dtype) -> None:
    for coord in PLAIN_COORDS:
        for i, (shape, sizes) in enumerate(SHAPES):
            x = data(shape, dtype, seed=i)
            check_lowering("Resize", [x], resize_attrs(shape, sizes, coordinate_transformation_mode=coord,
                                                       nearest_mode=nearest_mode))


def test_nearest_is_a_gather_per_resized_axis() -> None:
    shape, sizes = (1, 2, 4, 5), (1, 2, 8, 10)
    x = data(shape, F32)
    assert lowered_kinds("Resize", [x], resize_attrs(shape, sizes)) == {"Gather"}


def test_nearest_integer_scales_on_whole_axes() -> None:
    # scale given independently of the sizes (the importer passes the model's scale)
    x = data((1, 1, 3, 3), I64)
    attrs = resize_attrs((1, 1, 3, 3), (1, 1, 6, 9), coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    attrs["scales"] = (1.0, 1.0, 2.0, 3.0)
    got = check_lowering("Resize", [x], attrs)[0]
    np.testing.assert_array_equal(got[0, 0], np.repeat(np.repeat(x[0, 0], 2, axis=0), 3, axis=1))


# -- linear / cubic ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_interpolation(mode: str, dtype: np.dtype) -> None:
    for coord in PLAIN_COORDS:
        for i, (shape, sizes) in enumerate(SHAPES):
            x = rand(shape, dtype, seed=i)
            check_lowering("Resize", [x], resize_attrs(shape, sizes, mode=mode, coordinate_transformation_mode=coord))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("a", [-0.75, -0.5])
def test_cubic_exclude_outside(a: float, dtype: np.dtype) -> None:
    for shape, sizes in SHAPES:
        x = rand(shape, dtype)
        for exclude in (False, True):
            check_lowering("Resize", [x], resize_attrs(shape, sizes, mode="cubic", cubic_coeff_a=a,
                                                       exclude_outside=exclude))


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias(mode: str, dtype: np.dtype) -> None:
    for shape, sizes in (((1, 1, 12, 10), (1, 1, 5, 3)), ((1, 2, 8, 8), (1, 2, 3, 16)), ((20,), (3,))):
        x = rand(shape, dtype)
        for coord in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
            for exclude in (False, True):
                check_lowering("Resize", [x], resize_attrs(shape, sizes, mode=mode, antialias=True,
                                                           coordinate_transformation_mode=coord,
                                                           exclude_outside=exclude))


def test_infinities_spread_as_in_the_kernel() -> None:
    shape, sizes = (1, 1, 4, 4), (1, 1, 7, 6)
    x = rand(shape, F32)
    x[0, 0, 1, 2] = np.inf
    x[0, 0, 3, 0] = np.nan
    for mode in ("linear", "cubic"):
        got = check_lowering("Resize", [x], resize_attrs(shape, sizes, mode=mode))[0]
        assert np.isnan(got).any()


def test_interpolation_lowered_kinds() -> None:
    shape, sizes = (1, 1, 4, 4), (1, 1, 7, 6)
    kinds = lowered_kinds("Resize", [rand(shape, F16)], resize_attrs(shape, sizes, mode="cubic"))
    assert kinds == {"Cast", "Gather", "Mul", "ReduceSum"}


# -- tf_crop_and_resize --------------------------------------------------------------------------------

#: (mode, dtype): linear and cubic resize float data only
CROP_CASES = [pytest.param(m, d, id=f"{m}-{d}") for m in ("nearest", "linear", "cubic")
              for d in (F32, F16, F64, I64, U8) if m == "nearest" or d.kind == "f"]


@pytest.mark.parametrize("mode,dtype", CROP_CASES)
def test_tf_crop_and_resize(mode: str, dtype: np.dtype) -> None:
    shape = (1, 1, 5, 6)
    x = data(shape, dtype)
    for roi, sizes in (((0, 0, 0.2, 0.3, 1, 1, 0.8, 0.9), (1, 1, 4, 5)),  # inside the input
                       ((0, 0, -0.3, 0.4, 1, 1, 1.2, 1.5), (1, 1, 6, 7)),  # partly outside: extrapolation
                       ((0, 0, 0.5, 0.5, 1, 1, 0.5, 0.5), (1, 1, 1, 1))):  # one output position
        for value in (0.0, 10.0, 2.5) + ((-2.5,) if dtype.kind != "u" else ()):
            check_lowering("Resize", [x], resize_attrs(shape, sizes, mode=mode, roi=roi, extrapolation_value=value,
                                                       coordinate_transformation_mode="tf_crop_and_resize"))


def test_unrepresentable_extrapolation_value_is_declined() -> None:
    shape, sizes = (1, 1, 4, 4), (1, 1, 3, 3)
    attrs = resize_attrs(shape, sizes, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0,
                         roi=(0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9))
    x = data(shape, U8)
    with pytest.raises(ExecutionError):  # the kernel cannot convert -1 to uint8
        run("Resize", [x], attrs, "interpreter")
    fn = build("Resize", [x], attrs)
    be = get_backend("interpreter-primitives")
    prepare_function(fn, be, debug=True)
    assert fn.nodes_of("Resize")  # left as it is: the backend reports it as unsupported
    with pytest.raises(UnsupportedError, match="Resize"):
        check_support(fn, be)
