"""The row-block depthwise kernel (``emit/depthwise.py``) gives the direct path's bits.

Each case is compiled twice, with the row-block path and with it turned off (the direct path of
``emit/conv.py``), and the outputs must be bitwise equal, with infinite weights, NaN and huge inputs
(the taps over padding multiply 0.0 in both), strides 1 and 2, dilation, asymmetric pads, rows of
one to four vectors, a depth multiplier, bias, residual and activation.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_backend_cpu.emit import conv as conv_emit
from glow_backend_cpu.emit.depthwise import depthwise_rows_fit

F = TensorProto.FLOAT

CASES = {  # id: (C, H, W, multiplier, k, stride, dilation, pads, activation)
    "k3-s1-14": (8, 14, 14, 1, 3, 1, 1, (1, 1, 1, 1), "Relu"),
    "k5-s2-14": (6, 14, 14, 1, 5, 2, 1, (2, 2, 2, 2), "HardSwish"),
    "k3-s2-asym-15": (5, 15, 13, 1, 3, 2, 1, (0, 1, 1, 0), None),
    "k3-d2-28": (4, 28, 28, 1, 3, 1, 2, (2, 2, 2, 2), "Relu"),
    "k5-mult2-7": (3, 7, 7, 2, 5, 1, 1, (2, 2, 2, 2), None),
    "k3-s1-60": (3, 20, 60, 1, 3, 1, 1, (1, 1, 1, 1), None),
}


def _model(c: int, h: int, w: int, mult: int, k: int, s: int, d: int, pads: tuple[int, ...],
           act: str | None, rng: np.random.Generator) -> tuple[object, dict[str, np.ndarray]]:
    wt = rng.standard_normal((c * mult, 1, k, k)).astype(np.float32)
    wt[0, 0, 0, 0] = np.inf  # an infinite tap in plane 0: NaN wherever it meets padding or a zero
    bias = rng.standard_normal(c * mult).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, kernel_shape=[k, k], strides=[s, s],
                              dilations=[d, d], pads=list(pads))]
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    out_shape = [1, c * mult, oh, ow]
    nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
    nodes.append(helper.make_node(act, ["a"], ["y"]) if act else helper.make_node("Identity", ["a"], ["y"]))
    g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", F, [1, c, h, w]),
                                         helper.make_tensor_value_info("r", F, out_shape)],
                          [helper.make_tensor_value_info("y", F, out_shape)],
                          [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(bias, "b")])
    x = rng.uniform(-4, 4, (1, c, h, w)).astype(np.float32)
    x.reshape(-1)[::11] = 0.0
    x.reshape(-1)[5::97] = np.nan
    x.reshape(-1)[3::89] = 3e38
    feeds = {"x": x, "r": rng.standard_normal(out_shape).astype(np.float32)}
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), feeds


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_row_blocks_give_the_direct_paths_bits(case: str, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = _model(*CASES[case], rng=np.random.default_rng(len(case)))
    opts = {"cache": False, "parallel_threshold": 0, "solo_ns": 0}
    rows = glow_core.compile(model, "cpu", threads=threads, options=opts).run(feeds)["y"]
    monkeypatch.setattr(conv_emit, "depthwise_rows_fit", lambda s, lanes: False)
    direct = glow_core.compile(model, "cpu", threads=threads, options=opts).run(feeds)["y"]
    assert np.isnan(rows).any() and np.isfinite(rows).any()
    np.testing.assert_array_equal(rows.view(np.uint32), direct.view(np.uint32))
    ref = glow_core.compile(model, "interpreter").run(feeds)["y"]
    np.testing.assert_array_equal(np.isnan(rows), np.isnan(ref))
    keep = np.isfinite(ref)
    np.testing.assert_allclose(rows[keep], ref[keep], rtol=1e-4, atol=1e-3)


def test_which_convolutions_take_the_row_blocks() -> None:
    def shape(c: int, oh: int, ow: int, k: int, group: int, m: int | None = None) -> conv_emit.ConvShape:
        m = c if m is None else m
        return conv_emit.ConvShape(N=1, C=c, H=oh, W=ow, M=m, KH=k, KW=k, OH=oh, OW=ow, sh=1, sw=1, ph=k // 2,
                                   pw=k // 2, dh=1, dw=1, G=group)
    assert depthwise_rows_fit(shape(64, 14, 14, 3, 64), 16)
    assert depthwise_rows_fit(shape(64, 56, 56, 3, 64), 16)  # 4 vectors a row: blocks of 2 rows
    assert not depthwise_rows_fit(shape(64, 56, 56, 11, 64), 16)  # 2 * 121 * 4 multiply-adds a block
    assert not depthwise_rows_fit(shape(64, 112, 112, 3, 64), 16)  # rows of 7 vectors: the direct path
    assert not depthwise_rows_fit(shape(64, 14, 14, 3, 32), 16)  # two input channels per group
    assert not depthwise_rows_fit(shape(8, 60, 60, 9, 8), 16)  # 2 * 81 * 4 multiply-adds a block
