"""Spatial sampling ops on the interpreter vs onnxruntime: MaxUnpool, Col2Im, GridSample, RoiAlign, DeformConv."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from glow_core.errors import UnsupportedError
from tests.ops.oputil import assert_same, check_against_ort, one_node_model, run_glow, run_reference

RNG = np.random.default_rng(3)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_maxunpool_roundtrip() -> None:
    x = rand(2, 3, 6, 6)
    pool = one_node_model("MaxPool", {"x": x}, n_outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    vals, idx = run_glow(pool, {"x": x})
    inputs = {"v": vals, "i": idx}
    check_against_ort("MaxUnpool", inputs, kernel_shape=[2, 2], strides=[2, 2], opset=11)


def test_maxunpool_larger_output_shape_as_onnx_reference() -> None:
    """onnxruntime re-encodes the indices for output_shape, onnx.reference (which decides) does not: the result of
    the inferred shape lands in the leading corner of output_shape."""
    from onnx.reference import ReferenceEvaluator

    inputs = {"v": rand(1, 1, 2, 2), "i": np.array([[[[0, 3], [9, 15]]]], np.int64)}
    model = one_node_model("MaxUnpool", inputs, initializers={"s": np.array([1, 1, 5, 5], np.int64)},
                           kernel_shape=[2, 2], strides=[2, 2], opset=11)
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("out0", onnx.TensorProto.FLOAT, [1, 1, 5, 5]))
    (got,) = run_glow(model, inputs)
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape == (1, 1, 5, 5) and not got[..., 4, :].any() and not got[..., :, 4].any()


def test_maxunpool_smaller_output_shape_is_a_model_error() -> None:
    from glow_core.errors import ModelError

    inputs = {"v": rand(1, 1, 2, 2), "i": np.array([[[[0, 3], [9, 15]]]], np.int64)}
    model = one_node_model("MaxUnpool", inputs, initializers={"s": np.array([1, 1, 3, 5], np.int64)},
                           kernel_shape=[2, 2], strides=[2, 2], opset=11)
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("out0", onnx.TensorProto.FLOAT, [1, 1, 3, 5]))
    with pytest.raises(ModelError, match="at least the inferred shape"):
        run_glow(model, inputs)


@pytest.mark.parametrize("image,block,attrs", [
    ((5, 5), (1, 5), {}),
    ((6, 7), (2, 3), {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    ((4, 5, 3), (2, 2, 2), {}),
])
def test_col2im(image: tuple[int, ...], block: tuple[int, ...], attrs: dict[str, Any]) -> None:
    nd = len(image)
    s = attrs.get("strides", [1] * nd)
    p = attrs.get("pads", [0] * 2 * nd)
    d = attrs.get("dilations", [1] * nd)
    blocks = [(image[i] + p[i] + p[nd + i] - ((block[i] - 1) * d[i] + 1)) // s[i] + 1 for i in range(nd)]
    x = rand(2, 3 * int(np.prod(block)), int(np.prod(blocks)))
    inits = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    check_against_ort("Col2Im", {"x": x}, initializers=inits, opset=18, **attrs)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode: str, padding: str, align: int) -> None:
    x = rand(2, 3, 5, 6)
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)
    if mode == "cubic" and padding == "border":
        # onnxruntime clamps each cubic tap of the raw coordinate (as PyTorch does); onnx.reference clamps an
        # outside coordinate first and takes its taps around that, and the reference decides
        feeds = {"x": x, "grid": grid}
        model = one_node_model("GridSample", feeds, opset=20, mode=mode, padding_mode=padding, align_corners=align)
        assert_same(run_glow(model, feeds), run_reference(model, feeds), rtol=1e-4, atol=1e-5)
        return
    check_against_ort("GridSample", {"x": x, "grid": grid}, opset=20, mode=mode, padding_mode=padding,
                      align_corners=align, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode: str, padding: str) -> None:
    x = rand(1, 2, 3, 4, 5)
    grid = RNG.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    check_against_ort("GridSample", {"x": x, "grid": grid}, opset=20, mode=mode, padding_mode=padding,
                      rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(mode: str, ctm: str, ratio: int) -> None:
    x = rand(2, 3, 10, 12)
    rois = np.array([[0, 0, 9, 9], [1.5, 2.2, 6.1, 8.9], [5, 5, 11, 9], [-2, -1, 3, 4]], np.float32)
    inits = {"rois": rois, "idx": np.array([0, 1, 1, 0], np.int64)}
    check_against_ort("RoiAlign", {"x": x}, initializers=inits, opset=16, mode=mode,
                      coordinate_transformation_mode=ctm, sampling_ratio=ratio, output_height=3, output_width=4,
                      spatial_scale=0.9, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 1]}, {"dilations": [2, 1]}])
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv(attrs: dict[str, Any], with_mask: bool) -> None:
    x = rand(1, 4, 7, 6)
    w = rand(6, 2, 3, 2)
    s = attrs.get("strides", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    d = attrs.get("dilations", [1, 1])
    oh = (7 + p[0] + p[2] - ((3 - 1) * d[0] + 1)) // s[0] + 1
    ow = (6 + p[1] + p[3] - ((2 - 1) * d[1] + 1)) // s[1] + 1
    inputs = {"x": x, "w": w, "offset": rand(1, 2 * 6 * 2, oh, ow), "b": rand(6)}
    if with_mask:
        inputs["mask"] = RNG.uniform(0, 1, (1, 2 * 6, oh, ow)).astype(np.float32)
    check_against_ort("DeformConv", inputs, opset=19, group=2, offset_group=2, **attrs, rtol=1e-4, atol=1e-5)
