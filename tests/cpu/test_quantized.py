"""The cpu backend's quantized kernels against the interpreter: bit-identical int8 / int32 results.

Operands fed as inputs take the general kernels (IntConv / IntMatMul loops and
Requantize); constant filters take the fused int8 kernels (``emit/qconv.py``:
VNNI when the host has it, the widening path under ``GLOW_CPU_FEATURES=avx2``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.pipeline import compile_options, prepare_function
from glow_core.ir.graph import Function
from glow_core.ir.types import TensorType
from glow_core.plugin_host import get_backend
from tests.lowering.test_nn_quant import CONV_CASES, _conv_attrs, _q8, _scale
from tests.lowering.test_reduce import F32, I8, I32, U8, rand, run
from tests.cpu.util import run_at_feature_level


def _compare(kind: str, ops: list[np.ndarray | None], attrs: dict[str, Any]) -> None:
    want, _ = run(kind, ops, attrs, "interpreter")
    got, _ = run(kind, ops, attrs, "cpu")
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[0])}d-g{c[5]}")
@pytest.mark.parametrize("xdt,wdt,ydt", [(U8, U8, U8), (I8, I8, I8), (U8, I8, U8)], ids=str)
def test_qlinear_conv_general(xdt: np.dtype, wdt: np.dtype, ydt: np.dtype, case: tuple[Any, ...]) -> None:
    sp, k, *_, g = case
    m = 3 * g
    x, w = _q8((2, 2 * g) + sp, xdt, 1), _q8((m, 2) + k, wdt, 2)
    for per_channel in (False, True):
        wshape = (m,) if per_channel else ()
        ops = [x, _scale((), F32, 3), _q8((), xdt, 4), w, _scale(wshape, F32, 5), _q8(wshape, wdt, 6),
               _scale((), F32, 7) * 20, _q8((), ydt, 8), rand((m,), I32, -5000, 5000, seed=9)]
        _compare("QLinearConv", ops, _conv_attrs(case))


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((5,), (2, 5, 3))], ids=str)
def test_matmul_integer_general(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, w = _q8(sa, U8, 1), _q8(sb, I8, 2)
    for az, bz in ((None, None), (_q8((), U8, 3), _q8((), I8, 4)), (None, _q8((sb[-1],), I8, 6))):
        _compare("MatMulInteger", [a, w, az, bz], {})


def test_qlinear_matmul_general() -> None:
    a, w = _q8((3, 5), U8, 1), _q8((5, 4), I8, 2)
    ops = [a, _scale((3,), F32, 3), _q8((3,), U8, 4), w, _scale((4,), F32, 5), _q8((4,), I8, 6),
           _scale((), F32, 7) * 20, _q8((), U8, 8)]
    _compare("QLinearMatMul", ops, {})


# -- the fused int8 kernels (constant weights) ----------------------------------------------------------------------

def _run_const(kind: str, operands: list[np.ndarray | None], const: set[int], attrs: dict[str, Any],
               backend: str, env: dict[str, str] | None = None) -> tuple[np.ndarray, list[str]]:
    """One ``kind`` node with operands ``const`` as constants; (result, kinds that ran)."""
    fn = Function("main")
    vals = []
    for i, a in enumerate(operands):
        if a is None:
            vals.append(None)
        elif i in const:
            vals.append(fn.add_constant(a, f"c{i}"))
        else:
            vals.append(fn.add_input(f"in{i}", TensorType.of(a)))
    node = fn.create(kind, vals, attrs, name=kind.lower())
    fn.set_output("out", node.outputs[0])
    be = get_backend(backend)
    prepare_function(fn, be, debug=True)
    exe = be.compile(fn, compile_options(threads=2))
    feeds = {f"in{i}": a for i, a in enumerate(operands) if a is not None and i not in const}
    return exe.execute(feeds)["out"], sorted({n.kind.name for n in fn.nodes})


QCONV_CASES = [
    # (N, C, H, W, M, K, stride, pad, dilation)
    (1, 16, 9, 9, 13, 3, 1, 1, 1),      # 3x3 padded, channels not a multiple of the panel
    (2, 8, 7, 7, 20, 1, 1, 0, 1),       # pointwise (contiguous rows), two images
    (1, 5, 12, 11, 7, 3, 2, 0, 1),      # strided, K not a multiple of 4
    (1, 4, 10, 10, 6, 3, 1, 2, 2),      # dilated
    (1, 3, 20, 20, 8, 7, 2, 3, 1),      # a ResNet stem-like 7x7 stride 2
    (1, 32, 9, 9, 70, 1, 2, 0, 1),      # 1x1 stride 2 (gathered), more than one tile of pixels
    (1, 6, 11, 100, 9, 3, 3, 1, 1),     # stride 3 over wide rows (strided vector loads of whole runs)
    (1, 4, 9, 140, 7, 2, 4, 0, 1),      # stride 4, unpadded
]


@pytest.mark.parametrize("case", QCONV_CASES, ids=str)
@pytest.mark.parametrize("xdt,wdt,ydt", [(U8, I8, U8), (I8, I8, I8), (U8, U8, I8)], ids=str)
def test_fused_qconv_fast(xdt: np.dtype, wdt: np.dtype, ydt: np.dtype, case: tuple[int, ...]) -> None:
    n, c, h, w_, m, k, st, pad, dil = case
    x, w = _q8((n, c, h, w_), xdt, 1), _q8((m, c, k, k), wdt, 2)
    wz = np.zeros((m,), wdt) if wdt == I8 else np.full((m,), 128, wdt)  # uint8 filters: W - 128 is int8
    info = np.iinfo(ydt)
    ops = [x, np.array(0.02, np.float32), np.array(0 if xdt == U8 else 127, xdt), w,
           _scale((m,), F32, 5), wz, np.array(0.5, np.float32), np.array(info.min + 3, ydt),
           rand((m,), I32, -5000, 5000, seed=9)]
    attrs = {"strides": [st, st], "pads": [pad] * 4, "dilations": [dil, dil], "group": 1}
    want, _ = _run_const("QLinearConv", ops, {1, 2, 3, 4, 5, 6, 7, 8}, attrs, "interpreter")
    got, kinds = _run_const("QLinearConv", ops, {1, 2, 3, 4, 5, 6, 7, 8}, attrs, "cpu")
    assert "FusedIntConv" in kinds, kinds
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 3  # neither all saturated nor constant


@pytest.mark.parametrize("shape", [(1, 40), (5, 33), (70, 64)], ids=str)
@pytest.mark.parametrize("adt", [U8, I8], ids=str)
def test_fused_qmatmul_fast(adt: np.dtype, shape: tuple[int, int]) -> None:
    rows, k = shape
    a, b = _q8((rows, k), adt, 1), _q8((k, 19), I8, 2)
    ops = [a, np.array(0.03, np.float32), np.array(3, adt), b, _scale((19,), F32, 5), np.zeros((19,), I8),
           np.array(0.4, np.float32), np.array(-2, I8)]
    want, _ = _run_const("QLinearMatMul", ops, {1, 2, 3, 4, 5, 6, 7}, {}, "interpreter")
    got, kinds = _run_const("QLinearMatMul", ops, {1, 2, 3, 4, 5, 6, 7}, {}, "cpu")
    assert "FusedIntMatMul" in kinds, kinds
    np.testing.assert_array_equal(got, want)


def test_fused_qconv_declines_filters_beyond_int8() -> None:
    """A filter whose W - FilterZero leaves [-128, 127] runs on the general kernels, still exact."""
    x, w = _q8((1, 4, 6, 6), U8, 1), _q8((5, 4, 3, 3), U8, 2)
    ops = [x, np.array(0.02, np.float32), np.array(7, U8), w, _scale((5,), F32, 5), np.full((5,), 3, U8),
           np.array(0.5, np.float32), np.array(0, U8), None]
    attrs = {"strides": [1, 1], "pads": [1] * 4, "dilations": [1, 1], "group": 1}
    want, _ = _run_const("QLinearConv", ops, {1, 2, 3, 4, 5, 6, 7}, attrs, "interpreter")
    got, kinds = _run_const("QLinearConv", ops, {1, 2, 3, 4, 5, 6, 7}, attrs, "cpu")
    assert "FusedIntConv" not in kinds and "IntConv" in kinds, kinds
    np.testing.assert_array_equal(got, want)


GROUPED_CASES = [
    # (C, H, W, group, M, K, stride, pad, dilation)
    (24, 9, 37, 24, 24, 3, 1, 1, 1),    # depthwise 3x3, rows of more than one vector
    (16, 11, 70, 16, 16, 3, 2, 1, 1),   # depthwise strided (wide loads), several chunks
    (8, 12, 40, 8, 16, 5, 5, 2, 1),     # depthwise multiplier 2, stride 5 (gather)
    (6, 10, 20, 2, 4, 3, 1, 2, 2),      # two groups of 3 channels, dilated
    (8, 1, 33, 8, 8, 1, 1, 0, 1),       # 1x1 depthwise
]


@pytest.mark.parametrize("case", GROUPED_CASES, ids=str)
@pytest.mark.parametrize("xdt,wdt,ydt", [(U8, I8, U8), (I8, I8, I8), (U8, U8, I8)], ids=str)
def test_grouped_qconv_direct(xdt: np.dtype, wdt: np.dtype, ydt: np.dtype, case: tuple[int, ...]) -> None:
    """Depthwise / grouped QLinearConv (declined by the fused kernels): the vectorized IntConv, exact."""
    c, h, w_, g, m, k, st, pad, dil = case
    x, w = _q8((2, c, h, w_), xdt, 1), _q8((m, c // g, k, k), wdt, 2)
    wz = _q8((m,), wdt, 6)
    info = np.iinfo(ydt)
    ops = [x, np.array(0.02, np.float32), _q8((), xdt, 4), w, _scale((m,), F32, 5), wz,
           np.array(0.5, np.float32), np.array(info.min + 60, ydt), rand((m,), I32, -5000, 5000, seed=9)]
    attrs = {"strides": [st, st], "pads": [pad] * 4, "dilations": [dil, dil], "group": g}
    for const in ({1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 4, 5, 7, 8}):  # constant filter, then the filter as an input
        want, _ = _run_const("QLinearConv", ops, const, attrs, "interpreter")
        got, kinds = _run_const("QLinearConv", ops, const, attrs, "cpu")
        assert "IntConv" in kinds, kinds
        np.testing.assert_array_equal(got, want)
        assert len(np.unique(got)) > 3


def test_grouped_conv_integer_1d() -> None:
    """ConvInteger (int32 result) depthwise over one spatial axis, per-tensor zero points."""
    x, w = _q8((2, 6, 50), U8, 1), _q8((6, 1, 3), I8, 2)
    ops = [x, w, _q8((), U8, 3), _q8((), I8, 4)]
    _compare("ConvInteger", ops, {"strides": [2], "pads": [1, 1], "dilations": [1], "group": 6})


@pytest.mark.parametrize("dt", [U8, I8], ids=str)
@pytest.mark.parametrize("k,st,pad,dil,width", [(3, 2, 1, 1, 37), (2, 2, 0, 1, 37), (3, 1, 1, 1, 37),
                                                (3, 1, 1, 1, 150), (3, 3, 1, 2, 150), (2, 5, 1, 1, 90)], ids=str)
def test_int8_maxpool(dt: np.dtype, k: int, st: int, pad: int, dil: int, width: int) -> None:
    """MaxPool on 8-bit integers (the vectorized byte rows path: strides 1, 2..4 wide loads, 5 a gather;
    outputs wider than a chunk): exact, range ends included."""
    x = _q8((2, 3, 23, width), dt, 1)
    x[0, 0, :2, :2] = np.iinfo(dt).min  # a window of range ends next to the padding
    x[1, 2, 5:9, -4:] = np.iinfo(dt).max
    attrs = {"kernel_shape": [k, k], "strides": [st, st], "pads": [pad] * 4, "dilations": [dil, dil],
             "ceil_mode": False}
    _compare("MaxPool", [x], attrs)


@pytest.mark.parametrize("dt", [U8, I8], ids=str)
def test_int8_maxpool_1d_ceil(dt: np.dtype) -> None:
    x = _q8((2, 4, 71), dt, 3)
    attrs = {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "dilations": [1], "ceil_mode": True}
    _compare("MaxPool", [x], attrs)


@pytest.mark.parametrize("level,isa", [("avx2", "avx2"), ("avx512-novnni", "bw"), ("generic", "widen")])
def test_widening_path_without_vnni(tmp_path: Path, level: str, isa: str) -> None:
    """Without VNNI the fused kernels multiply by vpmaddwd on 16-bit pairs (AVX512-BW: GLOW_CPU_FEATURES=
    avx512-novnni; AVX2: two 256-bit halves) or, without AVX2 (generic), by plain widening; the grouped
    IntConv / int8 MaxPool run on narrower vectors: still exact."""
    from glow_backend_cpu.target import host_codegen

    needs = {"bw": "+avx512bw", "avx2": "+avx2"}.get(isa)
    if needs and needs not in host_codegen().features.split(","):
        pytest.skip(f"the host has no {needs[1:]}")
    code = ("from glow_backend_cpu.target import host_codegen\n"
            "from glow_backend_cpu.emit.qconv import dot_isa\n"
            "class Ctx: target = host_codegen()\n"
            f"assert dot_isa(Ctx) == {isa!r}, dot_isa(Ctx)\n"
            "from tests.cpu.test_quantized import QCONV_CASES, I8, U8, test_fused_qconv_fast, test_fused_qmatmul_fast\n"
            "for i in (0, 1, 2, 6):\n"
            "    for x, w, y in ((U8, I8, U8), (I8, I8, I8)):\n"
            "        test_fused_qconv_fast(x, w, y, QCONV_CASES[i])\n"
            "test_fused_qmatmul_fast(I8, (5, 33))\n"
            "from tests.cpu.test_quantized import GROUPED_CASES, test_grouped_qconv_direct, test_int8_maxpool\n"
            "for i in (0, 2):\n"
            "    test_grouped_qconv_direct(U8, I8, U8, GROUPED_CASES[i])\n"
            "test_int8_maxpool(I8, 3, 2, 1, 1, 37)\n"
            "test_int8_maxpool(U8, 2, 5, 1, 1, 90)\n"
            "print('ok')\n")
    run_at_feature_level(code, level, tmp_path)


def test_own_quantized_matmul_keeps_the_fused_kernel() -> None:
    """glow's own int8 conversion of a classifier head (MatMul by a constant, as a 1x1 QLinearConv) hands the
    cpu backend a constant filter, so the product runs on the fused int8 kernel; same result as the interpreter."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import glow_core
    from glow_core.quantization import QuantizationConfig

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    calib = [{"x": rng.standard_normal((3, 32)).astype(np.float32)} for _ in range(4)]
    feed = {"x": rng.standard_normal((3, 32)).astype(np.float32)}
    outs = {}
    for backend in ("cpu", "interpreter"):
        config = QuantizationConfig(profile=glow_core.profile(model, calib, backend=backend))
        net = glow_core.compile(model, backend=backend, threads=2, quantize=config)
        if backend == "cpu":
            kinds = {n.kind.name for n in net.function.nodes}
            assert "FusedIntConv" in kinds and "IntConv" not in kinds, kinds
        outs[backend] = net.run(feed)["y"]
    np.testing.assert_array_equal(outs["cpu"], outs["interpreter"])
    assert np.abs(outs["cpu"]).max() > 0
