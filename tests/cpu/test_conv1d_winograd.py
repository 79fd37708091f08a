"""1-D convolutions on the Winograd F(2, 3) / F(2, 5) path (``emit/conv1d_winograd.py``).

Each case must take the path (``conv1d_winograd_fits``, on 16-lane vectors; with AVX2 alone the same cases
run on the GEMM paths and must match all the same) and match a float64 direct sum within a few float32
roundings of the output's scale, and the interpreter: 3 and 5 taps, 1-D and column (``[N, C, L, 1]``)
layouts, padding (asymmetric too), batch 2, odd lengths (a last tile half outside the row), more input
channels than one K block, several N tiles with a short last one, output channels that leave a short last
panel, and the fused activations. Infinite and NaN inputs, and a value whose transforms overflow, give the
direct sum's infinities and NaNs (the output stage recomputes such vectors directly).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_backend_cpu.emit import conv1d_winograd
from glow_backend_cpu.emit.conv import ConvShape, as_row, conv_shape
from glow_backend_cpu.emit.conv1d_winograd import conv1d_winograd_fits, transforms

F = TensorProto.FLOAT

CASES = {  # id: (N, C, L, M, K, pads (begin, end), activation, bias, column layout)
    "magika-column": (1, 64, 140, 70, 5, (0, 0), None, True, True),
    "same5-relu-batch2": (2, 33, 129, 40, 5, (2, 2), "Relu", False, False),
    "k3-clip-asym": (1, 40, 77, 100, 3, (1, 0), "Clip", True, False),
    "k-blocks": (1, 150, 100, 30, 5, (1, 3), None, True, False),
    "n-tiles": (1, 32, 300, 13, 3, (0, 0), "Relu", True, True),
    "short-row": (1, 8, 10, 8, 5, (0, 0), None, True, False),
    "many-panels": (1, 16, 40, 200, 3, (1, 1), "Relu", True, False),
}


def _model(n: int, c: int, length: int, m: int, k: int, pads: tuple[int, int], act: str | None, with_bias: bool,
           column: bool, rng: np.random.Generator) -> tuple[object, np.ndarray, np.ndarray]:
    wt = (rng.standard_normal((m, c, k)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    ol = length + pads[0] + pads[1] - k + 1
    ins = ["x", "w", "b"] if with_bias else ["x", "w"]
    attrs = {"kernel_shape": [k, 1], "pads": [pads[0], 0, pads[1], 0]} if column else \
        {"kernel_shape": [k], "pads": list(pads)}
    nodes = [helper.make_node("Conv", ins, ["c"], **attrs)]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node(act or "Identity", ["c"], ["y"]))
    tail = [1] if column else []
    inits = [numpy_helper.from_array(wt.reshape(m, c, k, *tail), "w"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(-1.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(2.0, np.float32), "hi")]
    graph = helper.make_graph(nodes, "wino1d", [helper.make_tensor_value_info("x", F, [n, c, length, *tail])],
                              [helper.make_tensor_value_info("y", F, [n, m, ol, *tail])],
                              [t for t in inits if t.name in ins or (act == "Clip" and t.name in ("lo", "hi"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, wt, bias if with_bias else np.zeros(m, np.float32)


def _direct(x: np.ndarray, wt: np.ndarray, bias: np.ndarray, pads: tuple[int, int], act: str | None) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), pads))
    k = wt.shape[2]
    ol = xp.shape[2] - k + 1
    with np.errstate(invalid="ignore", over="ignore"):
        y = sum(np.einsum("mc,ncl->nml", wt[:, :, t].astype(np.float64), xp[:, :, t:t + ol]) for t in range(k))
        y = y + bias[None, :, None]
    if act == "Relu":
        y = np.where(np.isnan(y), y, np.maximum(y, 0))
    elif act == "Clip":
        y = np.where(np.isnan(y), y, np.clip(y, -1.5, 2.0))
    return y


@pytest.fixture
def small_convs_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the small cases take the path (the thresholds keep it to convolutions where it pays)."""
    for name in ("MIN_C", "MIN_M", "MIN_TILES"):
        monkeypatch.setattr(conv1d_winograd, name, 1)


def _shape_of(spec: tuple) -> ConvShape:
    n, c, length, m, k, pads, _, _, column = spec
    ol = length + pads[0] + pads[1] - k + 1
    if column:
        attrs = {"strides": [1, 1], "pads": [pads[0], 0, pads[1], 0], "dilations": [1, 1], "group": 1}
        return as_row(conv_shape((n, c, length, 1), (m, c, k, 1), (n, m, ol, 1), attrs))
    attrs = {"strides": [1], "pads": list(pads), "dilations": [1], "group": 1}
    return conv_shape((n, c, length), (m, c, k), (n, m, ol), attrs)


def _run(spec: tuple, x: np.ndarray, model: object, threads: int) -> np.ndarray:
    column = spec[-1]
    got = glow_core.compile(model, "cpu", threads=threads, options={"cache": False}).run(
        {"x": x[..., None] if column else x})["y"]
    return got[..., 0] if column else got


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_1d_matches_the_direct_sum(case: str, threads: int, small_convs_too: None) -> None:
    spec = CASES[case]
    assert conv1d_winograd_fits(_shape_of(spec), 16, True, False), "the case must take the 1-D Winograd path"
    rng = np.random.default_rng(len(case))
    model, wt, bias = _model(*spec, rng=rng)
    n, c, length, _, _, pads, act, _, column = spec
    x = rng.uniform(-3, 3, (n, c, length)).astype(np.float32)
    got = _run(spec, x, model, threads)
    ref = _direct(x, wt, bias, pads, act)
    scale = np.abs(_direct(x, wt, bias, pads, None)).max()  # the sums' scale, before a clip
    assert scale > 1.0
    np.testing.assert_allclose(got, ref, rtol=0, atol=4e-6 * scale)
    interp = glow_core.compile(model, "interpreter").run({"x": x[..., None] if column else x})["y"]
    np.testing.assert_allclose(got, interp[..., 0] if column else interp, rtol=0, atol=4e-6 * scale)


@pytest.mark.parametrize("case", ["magika-column", "same5-relu-batch2", "n-tiles"])
def test_infinities_and_nan_follow_the_direct_sum(case: str, small_convs_too: None) -> None:
    spec = CASES[case]
    rng = np.random.default_rng(7)
    model, wt, bias = _model(*spec, rng=rng)
    n, c, length, _, _, pads, act, _, _ = spec
    x = rng.uniform(-3, 3, (n, c, length)).astype(np.float32)
    x[0, 1, 3] = np.inf
    x[-1, 2, length - 1] = -np.inf
    x[0, 3, length // 2] = np.nan
    x[-1, 0, length // 3] = 3e38  # finite, but its transforms overflow
    got = _run(spec, x, model, 2)
    ref = _direct(x, wt, bias, pads, act)
    assert np.isinf(ref).any() and np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    np.testing.assert_array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    fin = np.isfinite(ref) & (np.abs(ref) < 1e30)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=0, atol=4e-6 * np.abs(ref[fin]).max())


@pytest.mark.parametrize("r", [3, 5])
def test_transforms_compute_a_correlation(r: int) -> None:
    at, g, bt = transforms(r)
    assert np.array_equal(bt, np.round(bt))  # integer input transform
    rng = np.random.default_rng(r)
    for _ in range(5):
        gg, d = rng.standard_normal(r), rng.standard_normal(r + 1)
        want = [gg @ d[i:i + r] for i in range(2)]
        np.testing.assert_allclose(at @ ((g @ gg) * (bt @ d)), want, rtol=0, atol=1e-12)


def test_the_path_takes_the_long_1d_convolutions() -> None:
    magika = as_row(conv_shape((1, 256, 512, 1), (512, 256, 5, 1), (1, 512, 508, 1),
                               {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1}))
    assert conv1d_winograd_fits(magika, 16, True, False)
    assert not conv1d_winograd_fits(magika, 8, True, False)  # AVX2: the GEMM paths
    assert not conv1d_winograd_fits(magika, 16, False, False)  # a run-time filter
    assert not conv1d_winograd_fits(magika, 16, True, True)  # a fused residual

    def one_d(c: int, length: int, m: int, k: int, **attrs: object) -> ConvShape:
        a = {"strides": [1], "pads": [0, 0], "dilations": [1], "group": 1, **attrs}
        ol = (length - (k - 1) * a["dilations"][0] - 1) // a["strides"][0] + 1  # type: ignore[index]
        return conv_shape((1, c, length), (m, c // a["group"], k), (1, m, ol), a)  # type: ignore[operator]
    assert conv1d_winograd_fits(one_d(64, 1024, 128, 3), 16, True, False)
    assert conv1d_winograd_fits(one_d(512, 68, 512, 5), 16, True, False)  # a short row, many channels
    assert not conv1d_winograd_fits(one_d(64, 1024, 128, 7), 16, True, False)
    assert not conv1d_winograd_fits(one_d(64, 1024, 128, 5, strides=[2]), 16, True, False)
    assert not conv1d_winograd_fits(one_d(64, 1024, 128, 5, dilations=[2]), 16, True, False)
    assert not conv1d_winograd_fits(one_d(64, 1024, 128, 5, group=2), 16, True, False)
    assert not conv1d_winograd_fits(one_d(8, 1024, 128, 5), 16, True, False)  # few input channels
    assert not conv1d_winograd_fits(one_d(64, 1024, 64, 5), 16, True, False)  # few output channels
    assert not conv1d_winograd_fits(one_d(64, 200, 128, 5), 16, True, False)  # a short row


def test_the_emitter_takes_the_path_on_16_lanes(small_convs_too: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """emit_conv routes a fitting convolution to the 1-D Winograd emitter on 16-lane vectors (AVX-512), and
    only there."""
    from glow_backend_cpu.emit import conv as conv_emit
    from glow_backend_cpu.target import host_codegen

    calls: list[ConvShape] = []
    real = conv_emit.emit_conv1d_winograd
    monkeypatch.setattr(conv_emit, "emit_conv1d_winograd", lambda ctx, s, *a: (calls.append(s), real(ctx, s, *a)))
    spec = CASES["magika-column"]
    model, _, _ = _model(*spec, rng=np.random.default_rng(1))
    _run(spec, np.ones(spec[:3], np.float32), model, 1)
    assert bool(calls) == (host_codegen().target.vector_lanes == 16)
