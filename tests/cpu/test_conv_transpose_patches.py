"""ConvTranspose whose kernel tiles the output (stride = kernel, no padding, dilation 1, one group) is lowered
to a matrix product and one transpose (``lowering/rules/nn.py``: ``_conv_transpose_patches``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core

F = TensorProto.FLOAT


def _model(x_shape: tuple[int, ...], cout: int, kernel: tuple[int, ...], bias: bool, **attrs):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(sum(x_shape) + cout)
    cin = x_shape[1]
    inits = [numpy_helper.from_array(rng.standard_normal((cin, cout) + kernel).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
        ins.append("b")
    strides = attrs.pop("strides", list(kernel))
    node = helper.make_node("ConvTranspose", ins, ["y"], kernel_shape=list(kernel), strides=strides, **attrs)
    g = helper.make_graph([node], "ct", [helper.make_tensor_value_info("x", F, list(x_shape))],
                          [helper.make_tensor_value_info("y", F, [])], inits)
    g.output[0].type.tensor_type.ClearField("shape")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m = onnx.shape_inference.infer_shapes(m)
    return m, {"x": rng.standard_normal(x_shape).astype(np.float32)}


@pytest.mark.parametrize("x_shape,cout,kernel,bias", [
    ((1, 24, 9, 7), 1, (2, 2), True),  # the text detector's last layer, odd sizes
    ((2, 5, 6, 3), 3, (2, 2), False),
    ((1, 3, 4, 5), 4, (3, 2), True),  # non-square kernel
    ((1, 4, 11), 2, (4,), True),  # 1-D
    ((1, 2, 3, 2, 3), 2, (2, 2, 2), True),  # 3-D
])
def test_tiling_conv_transpose_is_a_matrix_product(x_shape: tuple[int, ...], cout: int, kernel: tuple[int, ...],
                                                   bias: bool) -> None:
    m, feeds = _model(x_shape, cout, kernel, bias)
    net = glow_core.compile(m, "cpu", options={"cache": False})
    kinds = {i.kind for i in net.executable.lir.instrs}
    assert "Conv" not in kinds and any("MatMul" in k for k in kinds), kinds
    want = glow_core.compile(m, "interpreter").run(feeds)["y"]
    got = net.run(feeds)["y"]
    assert got.shape == want.shape == (x_shape[0], cout) + tuple(s * k for s, k in zip(x_shape[2:], kernel))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [{"strides": [1, 1]}, {"pads": [1, 1, 1, 1]}, {"output_padding": [1, 1]}])
def test_other_conv_transposes_keep_the_general_lowering(attrs: dict) -> None:
    m, feeds = _model((1, 3, 5, 4), 2, (2, 2), True, **attrs)
    net = glow_core.compile(m, "cpu", options={"cache": False})
    assert "Conv" in {i.kind for i in net.executable.lir.instrs} or "FusedConv" in {
        i.kind for i in net.executable.lir.instrs}
    np.testing.assert_allclose(net.run(feeds)["y"], glow_core.compile(m, "interpreter").run(feeds)["y"],
                               rtol=1e-5, atol=1e-5)
