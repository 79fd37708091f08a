"""Symbolic image sizes from one compile (issue 28): convolutions, pools, nearest resizes and global averages over
a symbolic height and width, planned in multiples (``SymbolicPlan.steps``), on cpu and the interpreter.

Each model is compiled once for symbolic dims and run at several image sizes and batch sizes; every output is
compared with a compile per shape (``symbolic_dims`` off). The largest size runs first, so the padding of the
smaller runs holds that run's values (and the cpu tests run a NaN image at the bound before each size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from tests.dynamic.models import LIGHT_RESNET, light_resnet50
from glow_core.errors import GlowError

RNG = np.random.default_rng(0)
OPSET = [helper.make_opsetid("", 17)]


class _Graph:
    """A small onnx.helper graph builder: ``conv``/``bn``/``node`` append nodes and their weights."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def _name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def weight(self, *shape: int, scale: float = 0.3) -> str:
        name = self._name("w")
        self.inits.append(numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int | list[int] = 1, relu: bool = True,
             bn: bool = True) -> str:
        strides = stride if isinstance(stride, list) else [stride, stride]
        y = self.node("Conv", [x, self.weight(cout, cin, k, k, scale=1.0 / np.sqrt(cin * k * k))], pads=[k // 2] * 4,
                      strides=strides)
        if bn:
            params = [self.weight(cout), self.weight(cout), self.weight(cout)]
            var = self._name("var")
            self.inits.append(numpy_helper.from_array((RNG.random(cout) + 0.5).astype(np.float32), var))
            y = self.node("BatchNormalization", [y, *params, var])
        return self.node("Relu", [y]) if relu else y

    def model(self, x_dims: list, out: str, out_dims: list) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_dims)], self.inits)
        return helper.make_model(g, opset_imports=OPSET)


def resnet_like(x_dims: list | None = None) -> onnx.ModelProto:
    """Conv+BN+Relu (7x7, stride 2), MaxPool 3x3/2 with pads, a residual block, a strided block with a 1x1
    projection, GlobalAveragePool, Flatten, Gemm."""
    g = _Graph()
    x = g.conv("x", 3, 8, 7, stride=2)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    r = g.conv(g.conv(x, 8, 8, 3), 8, 8, 3, relu=False)
    x = g.node("Relu", [g.node("Add", [r, x])])
    r = g.conv(g.conv(x, 8, 16, 3, stride=2), 16, 16, 3, relu=False)
    x = g.node("Relu", [g.node("Add", [r, g.conv(x, 8, 16, 1, stride=2, relu=False)])])
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    y = g.node("Gemm", [x, g.weight(10, 16), g.weight(10)], transB=1)
    return g.model(x_dims or ["batch", 3, "height", "width"], y, ["batch", 10])


def recognizer_like() -> onnx.ModelProto:
    """PaddleOCR-rec-like, declared ``[-1, 3, '?', '?']``: convolutions and pools over H and W (a stride (2, 1)
    on H only), the height averaged away, the width a sequence ``[N, W', C]``, a MatMul and a Softmax."""
    g = _Graph()
    x = g.conv("x", 3, 8, 3, stride=2)
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, 8, 16, 3, stride=[2, 1])
    x = g.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)
    x = g.node("ReduceMean", [x], axes=[2], keepdims=0)  # [N, C, W']
    x = g.node("Transpose", [x], perm=[0, 2, 1])  # [N, W', C]
    x = g.node("MatMul", [x, g.weight(16, 12)])
    y = g.node("Softmax", [x], axis=-1)
    return g.model([-1, 3, "?", "?"], y, ["n", "w", 12])


def detector_like() -> onnx.ModelProto:
    """YOLO-style: a conv backbone (strides 2, 2, 2), the deepest map upsampled x2 (nearest Resize), Concat with
    the shallower one on channels, a head of two convolutions (the output stays [N, K, H/4, W/4]: flattening
    H*W into one axis merges symbolic axes, which the padded layout does not do)."""
    g = _Graph()
    p1 = g.conv(g.conv("x", 3, 8, 3, stride=2), 8, 8, 3, stride=2)
    p2 = g.conv(p1, 8, 16, 3, stride=2)
    scales = g._name("scales")
    g.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), scales))
    up = g.node("Resize", [p2, "", scales], mode="nearest")
    x = g.node("Concat", [up, p1], axis=1)
    x = g.conv(x, 24, 16, 3)
    y = g.node("Sigmoid", [g.conv(x, 16, 6, 1, relu=False, bn=False)])
    return g.model(["batch", 3, "height", "width"], y, ["batch", 6, "h4", "w4"])


def _feeds(batch: int, h: int, w: int, name: str = "x") -> dict[str, np.ndarray]:
    return {name: RNG.standard_normal((batch, 3, h, w)).astype(np.float32)}


def _check(model: onnx.ModelProto, backend: str, sizes: list[tuple[int, int, int]], dims: dict | None = None,
           poison: bool = False) -> glow_core.DynamicNetwork:
    """One compile runs every (batch, height, width) of ``sizes`` with the outputs of a compile per shape."""
    net = glow_core.compile(model, backend, dims=dims)
    ref = glow_core.compile(model, backend, dims=dims, options={"symbolic_dims": False})
    bound = None
    name = model.graph.input[0].name
    for batch, h, w in sizes:
        if poison and bound is not None:  # padding holds NaN: a kernel reading it spoils its result
            net.run({name: np.full((1, 3, *bound), np.nan, np.float32)})
        feeds = _feeds(batch, h, w, name)
        got = list(net.run(feeds).values())[0]
        want = list(ref.run(feeds).values())[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=f"{backend} {batch}x{h}x{w}")
        bound = bound or (h, w)
    assert net.specializations_compiled == 1, net.symbolic.refused
    return net


SIZES = [(1, 96, 128), (1, 64, 96), (2, 96, 128), (4, 32, 64), (8, 64, 32)]


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_resnet_runs_every_image_size_and_batch_from_one_compile(backend: str) -> None:
    net = _check(resnet_like(), backend, SIZES, dims={"height": (1, 96), "width": (1, 128)}, poison=backend == "cpu")
    assert [p.describe() for p in net.symbolic.plans] == \
        ["height<=96 (multiple of 16), width<=128 (multiple of 16), batch=1"]
    assert str(net.specializations[0].input_types["x"]) == "float32[1,3,16*height/16<=96,16*width/16<=128]"


def test_anonymous_image_dims_plan_in_the_largest_step_and_other_sizes_compile_again() -> None:
    net = _check(resnet_like([-1, 3, "?", "?"]), "cpu", [(1, 64, 96), (2, 32, 160)])
    plan = net.symbolic.plans[0]
    assert dict(plan.steps) == {"x:2": 32, "x:3": 32}  # the largest step that divides the sizes first
    net.run(_feeds(1, 40, 40))  # no multiple of 32: a second compile, in steps of 8 (the net's stride)
    assert net.specializations_compiled == 2 and dict(net.symbolic.plans[0].steps) == {"x:2": 8, "x:3": 8}


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_text_recognizer_runs_48x192_and_48x320_from_one_compile(backend: str) -> None:
    net = _check(recognizer_like(), backend, [(1, 48, 320), (1, 48, 192), (2, 48, 192)])
    assert list(net.run(_feeds(1, 48, 192)).values())[0].shape == (1, 48, 12)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_detector_with_upsampling_runs_two_image_sizes_from_one_compile(backend: str) -> None:
    # equal bounds: the resize's index tables along the height and the width are one constant at the bounds
    _check(detector_like(), backend, [(1, 64, 64), (2, 32, 64), (4, 64, 32)],
           dims={"height": (1, 64), "width": (1, 64)}, poison=backend == "cpu")


def test_a_size_the_window_formula_does_not_give_refuses_at_emit_time() -> None:
    from glow_backend_cpu.emit.symconv import check_windows
    from glow_backend_cpu.emit.context import Instr, Operand
    from glow_core.errors import UnsupportedError
    from glow_core.ir.symbolic import SymExpr
    from glow_core.ir.types import ElemKind, TensorType

    q = SymExpr.symbol("q")
    x = Operand(None, TensorType(ElemKind.FLOAT32, (1, 4, 64, 8)).with_sym((None, None, SymExpr.of({("q",): 8}), None)))
    attrs = {"strides": [2, 1], "pads": [1, 0, 1, 0], "dilations": [1, 1]}
    right = Operand(None, TensorType(ElemKind.FLOAT32, (1, 4, 32, 8)).with_sym((None, None, SymExpr.of({("q",): 4}), None)))
    check_windows(Instr("Conv", attrs, [right], [x]), x, right, [3, 1])
    wrong = Operand(None, TensorType(ElemKind.FLOAT32, (1, 4, 32, 8)).with_sym((None, None, q, None)))
    with pytest.raises(UnsupportedError, match="window gives"):
        check_windows(Instr("Conv", attrs, [wrong], [x]), x, wrong, [3, 1])


@pytest.mark.full  # (the exhaustive tier: the handmade ResNet above covers the same kernels in the default run)
@pytest.mark.skipif(not LIGHT_RESNET.exists(), reason="onnx's light model zoo is not installed")
def test_light_resnet50_with_symbolic_height_and_width() -> None:
    net = _check(light_resnet50(), "cpu", [(1, 224, 224), (1, 160, 192), (2, 160, 192)],
                 dims={"height": (1, 224), "width": (1, 224)})
    assert [p.describe() for p in net.symbolic.plans] == \
        ["height<=224 (multiple of 32), width<=224 (multiple of 32), batch=1"]


def test_a_yolov8_like_detector_from_one_compile_on_the_interpreter_and_where_cpu_stops() -> None:
    """The YOLOv8-style detector of tests/runtime/detector.py with ``[N, 3, ?, ?]``: its head flattens H*W into
    one axis (Reshape ``[0, C, -1]``) and concatenates the three scales along it. The interpreter runs it from
    one compile; the cpu backend refuses that Reshape (a merge of symbolic axes: every Reshape is a view of its
    input there, and the padded layout would need a compacting copy) and compiles per image size."""
    from tests.dynamic.test_batches import symbolic_batch
    from tests.runtime.detector import yolov8n_like

    model = symbolic_batch(yolov8n_like(size=96), spatial=True)
    net = glow_core.compile(model, "interpreter")
    ref = glow_core.compile(model, "interpreter", options={"symbolic_dims": False})
    for batch, size in ((1, 128), (2, 96), (1, 64)):
        feeds = {"images": RNG.standard_normal((batch, 3, size, size)).astype(np.float32)}
        np.testing.assert_allclose(net.run(feeds)["output0"], ref.run(feeds)["output0"], rtol=1e-5, atol=1e-5)
    assert net.specializations_compiled == 1
    cpu = glow_core.compile(model, "cpu")
    cpu.run({"images": np.zeros((1, 3, 64, 64), np.float32)})
    assert any("merges or splits a symbolic axis" in why for why in cpu.symbolic.refused.values())


def test_unknown_dims_are_bounded_by_input_and_axis() -> None:
    """dims={"x:2": ...} names the anonymous height of [-1, 3, '?', '?']: the plan takes that bound (not the
    default), a feed past it is refused clearly, and so is an axis that is not unknown."""
    model = recognizer_like()
    net = glow_core.compile(model, "cpu", dims={"x:2": (1, 64), "x:3": (1, 320)})
    assert net.input_dims["x"] == "float32[?,3,x:2,x:3]"
    for h, w in ((48, 192), (48, 320)):
        x = _feeds(1, h, w)
        (want,) = glow_core.compile(model, "cpu", {"x": (1, 3, h, w)}).run(x).values()
        (got,) = net.run(x).values()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (plan,) = net.symbolic.plans
    assert dict(plan.free) == {"x:2": 64, "x:3": 320}
    with pytest.raises(GlowError, match="x:2"):
        net.run(_feeds(1, 80, 192))  # past the bound the user gave: a clear refusal
    with pytest.raises(GlowError, match=r"unknown dims, named input:axis: x:0, x:2, x:3"):
        glow_core.compile(model, "cpu", dims={"x:1": 3})
