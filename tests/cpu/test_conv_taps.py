"""Stride-1 convolutions that read B in place by taps (``emit/taps.py``) give the im2col path's bits.

Each case is compiled twice, with the taps path and with it turned off (im2col tiles packed per K
block), and the outputs must be bitwise equal where every micro-kernel keeps one accumulator set;
the others (a one-vector tail tile of few rows sums in two partial sets on the im2col path) must
match the interpreter. Inputs hold NaN, zeros and huge values and the filter an infinite tap, so a
lane that read a neighbouring row or past the plane instead of the padding's 0.0 shows.
Cases: 3x3 with rows wider and narrower than a tile, 5x5 dilated with asymmetric pads, 1-D,
groups, a 3x1 kernel, no vertical padding (fewer output rows), three input channels, batch 2,
residual and activation; 1x1 convolutions read as plain rows (16 channels on an odd plane, two groups
of 16, batch 2 with a tail tile).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_backend_cpu.emit import taps
from glow_backend_cpu.emit.conv import ConvShape, conv_shape
from glow_backend_cpu.emit.vecops import geometry

F = TensorProto.FLOAT

CASES = {  # id: (N, C, H, W, M, (KH, KW), dilation, pads, group, activation, exact)
    "k3-w56": (1, 16, 10, 56, 48, (3, 3), 1, (1, 1, 1, 1), 1, "Relu", True),
    "k3-w224": (1, 8, 3, 224, 36, (3, 3), 1, (1, 1, 1, 1), 1, None, True),
    "k5-d2-asym": (1, 8, 10, 50, 24, (5, 5), 2, (4, 3, 4, 5), 1, "Relu", True),
    "1d-k7": (1, 6, 0, 300, 12, (1, 7), 1, (0, 3, 0, 3), 1, None, True),
    "groups": (1, 8, 6, 64, 32, (3, 3), 1, (1, 1, 1, 1), 2, "Relu", True),
    "k3x1": (1, 5, 7, 70, 18, (3, 1), 1, (1, 0, 1, 0), 1, None, True),
    "no-vpad": (1, 4, 12, 48, 30, (3, 3), 1, (0, 1, 0, 1), 1, "Relu", True),
    "c3-batch2": (2, 3, 5, 64, 64, (3, 3), 1, (1, 1, 1, 1), 1, "Relu", True),
    "narrow-tail": (1, 7, 9, 50, 10, (3, 3), 1, (1, 1, 1, 1), 1, None, False),
    "1x1-m16-55": (1, 64, 55, 55, 16, (1, 1), 1, (0, 0, 0, 0), 1, "Relu", True),
    "1x1-m16-groups": (1, 32, 8, 56, 32, (1, 1), 1, (0, 0, 0, 0), 2, None, True),
    "1x1-batch2-tail": (2, 5, 7, 9, 12, (1, 1), 1, (0, 0, 0, 0), 1, "Relu", True),
}


def _model(n: int, c: int, h: int, w: int, m: int, k: tuple[int, int], d: int, pads: tuple[int, ...], g: int,
           act: str | None, rng: np.random.Generator) -> tuple[object, dict[str, np.ndarray], tuple[int, ...]]:
    one_d = h == 0
    kshape = [k[1]] if one_d else list(k)
    pads_ = [pads[1], pads[3]] if one_d else list(pads)
    wt = (rng.standard_normal((m, c // g, *kshape)) * 0.3).astype(np.float32)
    wt.reshape(-1)[4] = np.inf  # an infinite tap: NaN wherever it meets padding or a zero
    bias = rng.standard_normal(m).astype(np.float32)
    x_shape = [n, c, w] if one_d else [n, c, h, w]
    ow = w + pads[1] + pads[3] - d * (k[1] - 1)
    oh = h + pads[0] + pads[2] - d * (k[0] - 1)
    out_shape = [n, m, ow] if one_d else [n, m, oh, ow]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=g, kernel_shape=kshape,
                              dilations=[d] * len(kshape), pads=pads_),
             helper.make_node("Add", ["c", "r"], ["a"]),
             helper.make_node(act, ["a"], ["y"]) if act else helper.make_node("Identity", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "taps", [helper.make_tensor_value_info("x", F, x_shape),
                                              helper.make_tensor_value_info("r", F, out_shape)],
                              [helper.make_tensor_value_info("y", F, out_shape)],
                              [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(bias, "b")])
    x = rng.uniform(-4, 4, x_shape).astype(np.float32)
    x.reshape(-1)[::13] = 0.0
    x.reshape(-1)[5::97] = np.nan
    x.reshape(-1)[3::89] = 3e38
    feeds = {"x": x, "r": rng.standard_normal(out_shape).astype(np.float32)}
    attrs = {"strides": [1] * len(kshape), "pads": pads_, "dilations": [d] * len(kshape), "group": g}
    shape = conv_shape(tuple(x_shape), tuple(wt.shape), tuple(out_shape), attrs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds, shape


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_taps_give_the_im2col_paths_bits(case: str, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    *spec, exact = CASES[case]
    model, feeds, shape = _model(*spec, rng=np.random.default_rng(len(case)))
    monkeypatch.setattr(taps, "TAPS_MIN_W", 1)  # narrow rows too: a row edge inside most tiles
    assert taps.taps_fit(shape, 16), "the case must take the taps path"
    opts = {"cache": False, "parallel_threshold": 0, "solo_ns": 0}
    got = glow_core.compile(model, "cpu", threads=threads, options=opts).run(feeds)["y"]
    assert np.isnan(got).any() and np.isfinite(got).any()
    ref = glow_core.compile(model, "interpreter").run(feeds)["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    keep = np.isfinite(ref)
    np.testing.assert_allclose(got[keep], ref[keep], rtol=1e-4, atol=1e-3)
    if exact:
        monkeypatch.setattr(taps, "TAPS", False)
        packed = glow_core.compile(model, "cpu", threads=threads, options=opts).run(feeds)["y"]
        np.testing.assert_array_equal(got.view(np.uint32), packed.view(np.uint32))


def _shape(C: int, H: int, W: int, M: int, k: int, s: int = 1, pad: int = 1) -> ConvShape:
    OH, OW = (H + 2 * pad - k) // s + 1, (W + 2 * pad - k) // s + 1
    return ConvShape(1, C, H, W, M, k, k, OH, OW, s, s, pad, pad, 1, 1, 1)


def test_which_convolutions_read_taps_in_place() -> None:
    assert taps.taps_fit(_shape(64, 224, 224, 64, 3), 16)  # VGG's conv1_2
    assert taps.taps_fit(_shape(128, 112, 112, 128, 3), 16)
    assert not taps.taps_fit(_shape(64, 56, 56, 64, 3), 16)  # rows of 56: too little gain for the compile time
    assert not taps.taps_fit(_shape(256, 56, 56, 256, 3), 16)  # 256 channels: the im2col tile pays
    assert not taps.taps_fit(_shape(256, 112, 112, 256, 3), 16)  # 256 channels: the im2col tile pays
    assert not taps.taps_fit(_shape(64, 224, 224, 64, 3, s=2), 16)  # stride 2
    assert not taps.taps_fit(_shape(64, 112, 112, 64, 3, pad=0), 16)  # output rows narrower than the input's
    assert taps.taps_fit(_shape(64, 55, 55, 16, 1, pad=0), 16)  # 1x1 to 16 channels: plain rows in place
    assert not taps.taps_fit(_shape(64, 112, 112, 64, 1, pad=0), 16)  # 1x1 to 64 channels: packed rows
    assert not taps.taps_fit(_shape(128, 27, 27, 32, 1, pad=0), 16)
    assert not taps.taps_fit(_shape(64, 112, 112, 64, 1, pad=1), 16)  # padded 1x1: not plain rows
    assert not taps.taps_fit(_shape(16, 128, 128, 16, 7, pad=3), 16)  # 49 taps


def test_tap_masks_mark_padding_row_edges_and_the_planes_end() -> None:
    geo = geometry(16)
    s = _shape(2, 3, 50, 8, 3)  # 150 pixels: tiles of 64, 64 and 22
    masks = taps.tap_masks(s, geo)
    assert masks.shape == (3, 9, 4)
    n = np.arange(3 * 64).reshape(3, 4, 16)
    oh, ow = n // 50, n % 50
    for kh in range(3):
        for kw in range(3):
            ih, iw = oh + kh - 1, ow + kw - 1
            ok = (n < 150) & (ih >= 0) & (ih < 3) & (iw >= 0) & (iw < 50)
            bits = (ok * (1 << np.arange(16))).sum(axis=2)
            np.testing.assert_array_equal(masks[:, kh * 3 + kw, :], bits)
    tiles, kinds = taps.tile_kinds(masks, 150, geo)
    assert len(tiles) == 3 and len(kinds) <= taps.TAP_KINDS
    nvec, tail, need = kinds[tiles[2]]
    assert (nvec, tail) == (2, 6)  # 22 pixels: a whole vector and 6 lanes
    assert need[4 * 2 + 1]  # the centre tap's second vector runs past the plane: masked
    assert not kinds[tiles[0]][2][4 * 4 + 1]  # the centre tap of row 0's second vector is whole
