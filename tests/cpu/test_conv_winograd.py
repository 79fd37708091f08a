"""3x3 stride-1 convolutions on the Winograd F(2x2, 3x3) path (``emit/winograd.py``).

Each case must take the path (``winograd_fits``) and match a float64 evaluation of the direct sum within a
few float32 roundings of the output's scale, and the interpreter. The cases cover odd output sizes (a last
row or column of tiles half outside the plane), no padding, wide and asymmetric padding, batch 2, more input
channels than one K block, output channels that leave a short last panel, planes of fewer tiles than one
N tile, several N tiles with a short last one, N tiles dealt unevenly (28 x 28: 196 tiles as 4 + 3 + 3 + 3
vectors; 21 x 17: 7 vectors as 4 + 3), and the fused activations. Infinite and NaN inputs, and a
value whose transforms overflow, must give the direct sum's infinities and NaNs where it has them (the
output stage recomputes such tiles directly).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_backend_cpu.emit import winograd
from glow_backend_cpu.emit.conv import conv_shape
from glow_backend_cpu.emit.winograd import _G, filter_transform, winograd_fits

F = TensorProto.FLOAT

CASES = {  # id: (N, C, H, W, M, pads (top, left, bottom, right), activation, bias)
    "56-relu": (1, 64, 56, 56, 64, (1, 1, 1, 1), "Relu", True),
    "odd-7x7": (1, 32, 7, 7, 16, (1, 1, 1, 1), None, True),
    "odd-rect-batch2": (2, 33, 9, 11, 17, (1, 1, 1, 1), "Relu", False),
    "no-pad": (1, 40, 13, 10, 100, (0, 0, 0, 0), None, True),
    "pad2-asym": (1, 35, 20, 17, 70, (2, 0, 1, 2), "Clip", True),
    "k-blocks": (1, 200, 12, 12, 30, (1, 1, 1, 1), "Relu", True),
    "tiles-tail": (1, 48, 30, 34, 40, (1, 1, 1, 1), None, True),
    "28-dealt": (1, 48, 28, 28, 40, (1, 1, 1, 1), "Relu", True),
    "many-panels": (1, 32, 8, 8, 520, (1, 1, 1, 1), "Relu", True),
}


def _model(n: int, c: int, h: int, w: int, m: int, pads: tuple[int, int, int, int], act: str | None,
           with_bias: bool, rng: np.random.Generator) -> tuple[object, np.ndarray, np.ndarray]:
    wt = (rng.standard_normal((m, c, 3, 3)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    ins = ["x", "w", "b"] if with_bias else ["x", "w"]
    onnx_pads = [pads[0], pads[1], pads[2], pads[3]]
    nodes = [helper.make_node("Conv", ins, ["c"], kernel_shape=[3, 3], pads=onnx_pads)]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node(act or "Identity", ["c"], ["y"]))
    inits = [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(-1.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(2.0, np.float32), "hi")]
    graph = helper.make_graph(nodes, "wino", [helper.make_tensor_value_info("x", F, [n, c, h, w])],
                              [helper.make_tensor_value_info("y", F, [n, m, oh, ow])],
                              [t for t in inits if t.name in ins or (act == "Clip" and t.name in ("lo", "hi"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, wt, bias if with_bias else np.zeros(m, np.float32)


def _direct(x: np.ndarray, wt: np.ndarray, bias: np.ndarray, pads: tuple[int, int, int, int],
            act: str | None) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    with np.errstate(invalid="ignore", over="ignore"):
        y = sum(np.einsum("mc,nchw->nmhw", wt[:, :, kh, kw].astype(np.float64), xp[:, :, kh:kh + oh, kw:kw + ow])
                for kh in range(3) for kw in range(3))
        y = y + bias[None, :, None, None]
    if act == "Relu":
        y = np.where(np.isnan(y), y, np.maximum(y, 0))
    elif act == "Clip":
        y = np.where(np.isnan(y), y, np.clip(y, -1.5, 2.0))
    return y


@pytest.fixture
def small_convs_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the small cases take the path (the thresholds keep it to convolutions where it pays)."""
    for name in ("WINO_MIN_C", "WINO_BIG_MIN_C", "WINO_MIN_M", "WINO_BIG_TILES"):
        monkeypatch.setattr(winograd, name, 1)


def _shape_of(spec: tuple) -> object:
    n, c, h, w, m, pads, _, _ = spec
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    attrs = {"strides": [1, 1], "pads": list(pads), "dilations": [1, 1], "group": 1}
    return conv_shape((n, c, h, w), (m, c, 3, 3), (n, m, oh, ow), attrs)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_matches_the_direct_sum(case: str, threads: int, small_convs_too: None) -> None:
    spec = CASES[case]
    assert winograd_fits(_shape_of(spec), 16, True, False), "the case must take the Winograd path"
    rng = np.random.default_rng(len(case))
    model, wt, bias = _model(*spec, rng=rng)
    n, c, h, w, _, pads, act, _ = spec
    x = rng.uniform(-3, 3, (n, c, h, w)).astype(np.float32)
    got = glow_core.compile(model, "cpu", threads=threads, options={"cache": False}).run({"x": x})["y"]
    ref = _direct(x, wt, bias, pads, act)
    scale = np.abs(_direct(x, wt, bias, pads, None)).max()  # the sums' scale, before a clip
    assert scale > 1.0
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * scale)
    interp = glow_core.compile(model, "interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(got, interp, rtol=0, atol=2e-6 * scale)


@pytest.mark.parametrize("case", ["56-relu", "odd-rect-batch2", "tiles-tail"])
def test_infinities_and_nan_follow_the_direct_sum(case: str, small_convs_too: None) -> None:
    spec = CASES[case]
    assert winograd_fits(_shape_of(spec), 16, True, False)
    rng = np.random.default_rng(7)
    model, wt, bias = _model(*spec, rng=rng)
    n, c, h, w, _, pads, act, _ = spec
    x = rng.uniform(-3, 3, (n, c, h, w)).astype(np.float32)
    x[0, 1, 3, 4] = np.inf
    x[-1, 2, h - 1, w - 1] = -np.inf
    x[0, 3, h // 2, 0] = np.nan
    x[-1, 0, 0, w // 2] = 3e38  # finite, but its transforms overflow
    got = glow_core.compile(model, "cpu", threads=2, options={"cache": False}).run({"x": x})["y"]
    ref = _direct(x, wt, bias, pads, act)
    assert np.isinf(ref).any() and np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    fin = np.isfinite(ref) & (np.abs(ref) < 1e30)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=0, atol=2e-6 * np.abs(ref[fin]).max())


def test_transforms_compute_a_correlation() -> None:
    """1-D F(2, 3): ``A^T [(G g) * (B^T d)]`` is the correlation of d with g (the identity the path rests on),
    and ``filter_transform`` lays out ``G g G^T`` as 16 panelled ``[M, C]`` matrices."""
    rng = np.random.default_rng(3)
    g, d = rng.standard_normal(3), rng.standard_normal(4)
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float)
    np.testing.assert_allclose(at @ ((_G @ g) * (bt @ d)), [d[0:3] @ g, d[1:4] @ g], rtol=1e-12)
    w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    packed = filter_transform(w, 6)  # [16, panels, C, MR]
    assert packed.shape == (16, 2, 5, 6)
    u = np.einsum("ia,mcab,jb->ijmc", _G, w.astype(np.float64), _G).reshape(16, 7, 5)
    np.testing.assert_allclose(packed[:, 0, :, :].transpose(0, 2, 1), u[:, :6, :], rtol=1e-6)
    np.testing.assert_allclose(packed[:, 1, :, 0], u[:, 6, :], rtol=1e-6)
    assert not packed[:, 1, :, 1:].any()


def test_the_path_takes_the_convolutions_where_it_pays() -> None:
    base = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}

    def shape(c: int, hw: int, m: int, **kw: object) -> object:
        attrs = dict(base, **kw)
        out = hw if attrs["strides"] == [1, 1] else hw // 2
        return conv_shape((1, c, hw, hw), (m, c, 3, 3), (1, m, out, out), attrs)
    for c, hw, m in [(64, 56, 64), (128, 56, 32), (64, 224, 64), (256, 56, 256), (128, 28, 128), (64, 28, 96),
                     (256, 28, 512), (512, 28, 512), (16, 56, 64), (16, 55, 32), (16, 112, 32)]:
        assert winograd_fits(shape(c, hw, m), 16, True, False), (c, hw, m)
    for c, hw, m in [(128, 28, 32), (32, 27, 128), (64, 28, 64), (256, 14, 256), (512, 14, 512), (512, 7, 512),
                     (8, 112, 32), (16, 28, 384), (64, 56, 16)]:
        assert not winograd_fits(shape(c, hw, m), 16, True, False), (c, hw, m)
    s = shape(64, 56, 64)
    assert not winograd_fits(s, 8, True, False)  # AVX2: 8 lanes
    assert not winograd_fits(s, 16, False, False)  # run-time filter
    assert not winograd_fits(s, 16, True, True)  # a fused residual
    assert not winograd_fits(shape(64, 56, 64, strides=[2, 2]), 16, True, False)
    assert not winograd_fits(shape(64, 56, 64, dilations=[2, 2], pads=[2, 2, 2, 2]), 16, True, False)
