"""Resize and Upsample against onnxruntime, and the configurations the importer refuses."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import onnx
import pytest

from glow_core.errors import UnsupportedError
from tests.ops.oputil import assert_same, one_node_model, run_glow, run_ort
from tests.ops.test_movement import F16, F32, F64, I8, I32, U8, imported, rand

COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def resize_model(x: np.ndarray, *, scales: list[float] | None = None, sizes: list[int] | None = None,
                 roi: list[float] | None = None, opset: int = 19, **attrs: Any) -> Any:
    inits: dict[str, np.ndarray] = {}
    if opset < 11:  # Resize-10: (X, scales)
        return one_node_model("Resize", {"x": x}, initializers={"scales": np.array(scales, np.float32)},
                              opset=opset, **attrs)
    order = ["x", "", "", ""]
    for i, (name, value, dtype) in enumerate((("roi", roi, np.float32), ("scales", scales, np.float32),
                                               ("sizes", sizes, np.int64)), start=1):
        if value is not None:
            inits[name] = np.array(value, dtype)
            order[i] = name
    if opset < 13:  # roi and scales are required operands (possibly empty) before opset 13
        for i, name in ((1, "roi"), (2, "scales")):
            if order[i] == "":
                inits[name] = np.array([], np.float32)
                order[i] = name
    return one_node_model("Resize", {"x": x}, initializers=inits, input_order=order, opset=opset, **attrs)


def check_resize(x: np.ndarray, **kw: Any) -> np.ndarray:
    model = resize_model(x, **kw)
    got = run_glow(model, {"x": x})
    tol = {F16: 2e-3, F32: 1e-5, F64: 1e-9}.get(x.dtype, 0.0)
    assert_same(got, run_ort(model, {"x": x}), tol, tol)
    return got[0]


def refused(x: np.ndarray, match: str, **kw: Any) -> None:
    with pytest.raises(UnsupportedError, match=match):
        run_glow(resize_model(x, **kw), {"x": x})


# -- supported configurations against onnxruntime -------------------------------------------

@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST)
def test_nearest(coord: str, nearest: str) -> None:
    x = rand((1, 2, 4, 6), F32)
    for spec in ({"scales": [1, 1, 2, 3]}, {"sizes": [1, 2, 8, 3]}, {"sizes": [1, 2, 2, 12]}):
        check_resize(x, mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest, **spec)


@pytest.mark.parametrize("dtype", [I8, U8, I32, F16], ids=str)
def test_nearest_of_other_element_kinds(dtype: np.dtype) -> None:
    x = rand((1, 1, 3, 4), dtype)
    check_resize(x, mode="nearest", scales=[1, 1, 2, 0.5])
    check_resize(x, mode="nearest", sizes=[2, 1, 5, 8], coordinate_transformation_mode="asymmetric")


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", COORDS)
def test_linear_and_cubic(mode: str, coord: str) -> None:
    x = rand((1, 2, 5, 6), F32)
    for spec in ({"scales": [1, 1, 2, 1.5]}, {"sizes": [1, 2, 3, 4]}, {"sizes": [1, 2, 9, 13]}):
        check_resize(x, mode=mode, coordinate_transformation_mode=coord, **spec)
    if mode == "cubic":
        check_resize(x, mode=mode, coordinate_transformation_mode=coord, sizes=[1, 2, 8, 4], exclude_outside=1,
                     cubic_coeff_a=-0.5)


def test_other_float_kinds() -> None:
    x = rand((1, 1, 4, 4), F16)
    check_resize(x, mode="linear", sizes=[1, 1, 7, 3])
    check_resize(x, mode="cubic", scales=[1, 1, 2, 2])
    x64 = rand((1, 1, 4, 4), F64)  # onnxruntime has no double Resize: compare with the float32 result
    for kw in ({"mode": "cubic", "sizes": [1, 1, 7, 3]}, {"mode": "nearest", "scales": [1, 1, 2, 0.5]}):
        wide = run_glow(resize_model(x64, **kw), {"x": x64})[0]
        narrow = check_resize(x64.astype(np.float32), **kw)
        assert wide.dtype == F64
        np.testing.assert_allclose(wide, narrow, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias(mode: str) -> None:
    x = rand((1, 3, 12, 10), F32)
    for spec in ({"scales": [1, 1, 0.5, 0.6]}, {"sizes": [1, 3, 5, 3]}, {"sizes": [1, 3, 24, 4]}):
        check_resize(x, mode=mode, antialias=1, **spec)


def test_crop_and_resize() -> None:
    x = rand((1, 1, 6, 5), F32)
    roi = [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.7]
    for mode in ("linear", "cubic"):
        check_resize(x, mode=mode, coordinate_transformation_mode="tf_crop_and_resize", roi=roi, sizes=[1, 1, 4, 7],
                     extrapolation_value=-3.0)
    check_resize(x, mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                 roi=[-0.2, -0.3, 1.3, 1.1], sizes=[5, 4], axes=[2, 3])


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_axes_and_aspect_ratio_policy(policy: str) -> None:
    x = rand((1, 2, 4, 6), F32)
    # (onnxruntime ignores negative axes with a policy other than stretch: compare with positive ones)
    for axes in ([2, 3], [3, 2]) if policy != "stretch" else ([2, 3], [3, 2], [-1, -2]):
        check_resize(x, mode="linear", sizes=[3, 9], axes=axes, keep_aspect_ratio_policy=policy)
    negative = run_glow(resize_model(x, mode="linear", sizes=[3, 9], axes=[-1, -2],
                                     keep_aspect_ratio_policy=policy), {"x": x})
    assert_same(negative, [check_resize(x, mode="linear", sizes=[3, 9], axes=[3, 2],
                                        keep_aspect_ratio_policy=policy)], 0.0, 0.0)
    check_resize(x, mode="nearest", scales=[2.0, 3.0], axes=[3, 1])


def test_opset_11_operands_and_tf_half_pixel_for_nn() -> None:
    x = rand((1, 1, 4, 4), F32)
    check_resize(x, mode="linear", opset=11, sizes=[1, 1, 3, 6])
    check_resize(x, mode="nearest", opset=11, scales=[1, 1, 2, 0.5], coordinate_transformation_mode="tf_half_pixel_for_nn")


def test_legacy_resize_and_upsample() -> None:
    x = rand((1, 2, 3, 4), F32)
    for mode in ("nearest", "linear"):
        check_resize(x, mode=mode, opset=10, scales=[1, 1, 2, 3])
        for opset, kw in ((9, {"initializers": {"s": np.array([1, 1, 3, 2], np.float32)}}),
                          (7, {"scales": [1.0, 1.0, 3.0, 2.0]})):
            model = one_node_model("Upsample", {"x": x}, opset=opset, mode=mode, **kw)
            model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("out0", onnx.TensorProto.FLOAT,
                                                                              [1, 2, 9, 8]))
            assert_same(run_glow(model, {"x": x}), run_ort(model, {"x": x}), 1e-5, 1e-5)
    check_resize(x, mode="linear", opset=10, scales=[1, 1, 0.5, 1.5])


def test_identity_resize_adds_no_node() -> None:
    fn = imported("Resize", {"x": rand((1, 1, 2, 2), F32)}, initializers={"s": np.ones(4, np.float32)},
                  input_order=["x", "", "s"], opset=19)
    assert not fn.nodes


def test_random_configurations_are_exact_or_refused() -> None:
    """Fuzz: every configuration onnxruntime runs must match it or be refused as unsupported."""
    rnd = random.Random(7)
    compared = 0
    for _ in range(120):
        mode = rnd.choice(["nearest", "linear", "cubic"])
        coord = rnd.choice(COORDS + ["tf_crop_and_resize"])
        x = rand((1, 2, rnd.randint(1, 7), rnd.randint(1, 7)), F32, rnd.randint(0, 99))
        kw: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": coord}
        if mode == "nearest":
            kw["nearest_mode"] = rnd.choice(NEAREST)
        elif rnd.random() < 0.3:
            kw["antialias"] = 1
        if coord == "tf_crop_and_resize":
            kw["roi"] = [0, 0, rnd.uniform(-0.2, 0.5), rnd.uniform(-0.2, 0.5), 1, 1, rnd.uniform(0.5, 1.2),
                         rnd.uniform(0.5, 1.2)]
        if rnd.random() < 0.5:
            kw["sizes"] = [1, 2, rnd.randint(1, 9), rnd.randint(1, 9)]
        else:
            kw["scales"] = [1, 1] + [rnd.choice([0.5, 0.6, 0.75, 0.8, 1.25, 1.5, 2.0, 2.5, 3.0]) for _ in range(2)]
        model = resize_model(x, **kw)
        try:
            want = run_ort(model, {"x": x})
        except Exception:  # noqa: BLE001, S112  (a configuration onnxruntime refuses)
            continue
        try:
            got = run_glow(model, {"x": x})
        except UnsupportedError:
            continue
        assert_same(got, want, 1e-4, 1e-4)
        compared += 1
    assert compared > 40


# -- refusals ---------------------------------------------------------------------------------

def test_refusals() -> None:
    x = rand((1, 1, 4, 4), F32)
    refused(x, "align_corners with scale", mode="linear", coordinate_transformation_mode="align_corners",
            scales=[1, 1, 0.6, 0.6])
    refused(x, "crop box", mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
            roi=[0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], scales=[1, 1, 2, 2])
    refused(x, "keeps its length", mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
            roi=[0, 0, 0.1, 0, 1, 1, 0.9, 1], sizes=[1, 1, 4, 3])
    refused(x, "to length 1", mode="cubic", coordinate_transformation_mode="pytorch_half_pixel", sizes=[1, 1, 1, 3])
    refused(rand((1, 1, 5, 4), F32), "rounding boundaries", mode="nearest", nearest_mode="floor", sizes=[1, 1, 3, 4])
    refused(x, "keeps its length", mode="linear", antialias=1, scales=[1, 1, 1.2, 0.5])
    refused(x, "keep the shape", mode="nearest", nearest_mode="floor", scales=[1, 1, 1.2, 1.2])
    refused(x, "antialias", mode="nearest", scales=[1, 1, 0.5, 0.5], antialias=1)
    refused(rand((1, 1, 4, 4), U8), "linear resize of uint8", mode="linear", scales=[1, 1, 2, 2])
    refused(x, "fractional scales", mode="nearest", opset=10, scales=[1, 1, 1.5, 2])
    refused(rand((1, 2, 4, 4), F32), "tf_half_pixel_for_nn", mode="nearest", opset=11, nearest_mode="ceil",
            coordinate_transformation_mode="tf_half_pixel_for_nn", scales=[1, 1, 2, 2])
