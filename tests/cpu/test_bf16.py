"""The precision bf16 (``compile(..., precision="bf16")``, ``plugins/cpu/glow_backend_cpu/emit/bf16.py``).

Every product is checked twice: against a numpy emulation (the operands rounded to bf16 to nearest even, the
sums in float64; the kernels sum in float32 in another order, so the tolerance is a small multiple of float32's
epsilon times the sum of the magnitudes) and against the float32 network (within bf16's precision). The
emulation check also fails when the option does nothing: float32 products miss it by bf16's rounding error.
The kernel depends on the host (AMX tiles, ``vdpbf16ps``, or two FMAs of the widened halves): the host's runs
here, the others in fresh processes under ``GLOW_CPU_FEATURES``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_backend_cpu.pack import pack_b_pairs, round_bf16
from glow_core.errors import InputError, UnsupportedError
from tests.cpu.util import run_at_feature_level

#: |bf16 - emulation| <= EMU_TOL * sum |a| |b| (float32 sums in another order than float64's)
EMU_TOL = 2e-6
#: |bf16 - float32| <= F32_TOL * max |float32| (normalized outputs; bf16 keeps 8 bits of mantissa)
F32_TOL = 2e-2


def widen(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to bf16, as float64."""
    return (round_bf16(x).astype(np.uint32) << 16).view(np.float32).reshape(np.shape(x)).astype(np.float64)


def _model(nodes: list[onnx.NodeProto], x_shape: list[int], y_shape: list[int], consts: dict[str, np.ndarray],
           y: str = "y") -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(model: onnx.ModelProto, x: np.ndarray, emu: np.ndarray, bound: np.ndarray) -> None:
    """bf16 within EMU_TOL of the emulation (``bound``: sum |a| |b| per output), within F32_TOL of float32."""
    y16 = glow_core.compile(model, "cpu", precision="bf16", options={"cache": False}).run({"x": x})["y"]
    y32 = glow_core.compile(model, "cpu", options={"cache": False}).run({"x": x})["y"]
    err = np.abs(y16 - emu)
    assert np.all(err <= EMU_TOL * bound + 1e-6), f"emulation: worst {float(np.max(err / (bound + 1e-6))):.3g}"
    assert np.max(np.abs(y16 - y32)) <= F32_TOL * np.max(np.abs(y32))
    # the rounding happened: float32 products are further from the emulation than bf16's
    assert np.max(np.abs(y32 - emu)) > 10 * max(float(np.max(err)), 1e-7)


# -- numpy rounding -------------------------------------------------------------------------------------------

def test_round_to_nearest_even_and_nan() -> None:
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.5, np.inf, -np.inf, 3.4e38,
                  np.nan, 0.0, -0.0], dtype=np.float32)
    r = widen(x)
    assert r[0] == 1.0 and r[1] == 1.0  # a tie rounds to the even mantissa
    assert r[2] == 1 + 4 * 2 ** -8  # the other tie: up to even
    assert r[3] == 1 + 2 ** -7  # past the tie: up
    assert r[4] == -2.5 and np.isposinf(r[5]) and np.isneginf(r[6])
    assert np.isposinf(r[7])  # above bf16's largest finite value: rounds to infinity
    assert np.isnan(r[8]) and r[9] == 0 and np.signbit(r[10])


def test_pair_layout() -> None:
    """``b[k, n]`` at word ``(n // nr, k // 2, n % nr)``, half ``k % 2``; an odd K padded with a zero k."""
    b = np.arange(1, 3 * 5 + 1, dtype=np.float32).reshape(1, 3, 5)
    p = pack_b_pairs(b, 4)
    assert p.shape == (1, 2, 2, 4, 2)
    vals = (p.astype(np.uint32) << 16).view(np.float32)
    assert vals[0, 1, 0, 0, 1] == b[0, 1, 4] and vals[0, 0, 1, 2, 0] == b[0, 2, 2] and vals[0, 0, 1, 2, 1] == 0
    assert np.all(vals[0, 1, :, 1:] == 0)  # columns past N


# -- MatMul / FullyConnected -------------------------------------------------------------------------------------

MATMUL_CASES = [(1, 64, 40), (5, 7, 3), (13, 33, 70), (16, 2, 33), (50, 101, 70), (128, 256, 96), (40, 2501, 24)]


@pytest.mark.parametrize("m,k,n", MATMUL_CASES, ids=lambda v: str(v))
def test_matmul_bias_relu(m: int, k: int, n: int) -> None:
    """Odd K, tails in M and N, several K blocks (K = 2501), M below and above AMX's 16 rows, bias + relu."""
    rng = np.random.default_rng(m * 1000 + k)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [m, k], [m, n], {"w": w, "b": bias})
    emu = np.maximum(widen(x) @ widen(w) + bias, 0)
    _check(model, x, emu, np.abs(widen(x)) @ np.abs(widen(w)) + np.abs(bias))


def test_batched_matmul_constant_weight() -> None:
    """A ``[2, 3, M, K]`` activation times one ``[K, N]`` weight (a transformer's projections)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((48, 20)).astype(np.float32)
    x = rng.standard_normal((2, 3, 17, 48)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [2, 3, 17, 48], [2, 3, 17, 20], {"w": w})
    _check(model, x, widen(x) @ widen(w), np.abs(widen(x)) @ np.abs(widen(w)))


def test_batched_weights() -> None:
    """A ``[2, M, K]`` activation times a constant ``[2, K, N]`` (one weight per batch entry)."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((2, 40, 24)).astype(np.float32)
    x = rng.standard_normal((2, 33, 40)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [2, 33, 40], [2, 33, 24], {"w": w})
    _check(model, x, widen(x) @ widen(w), np.abs(widen(x)) @ np.abs(widen(w)))


# -- Conv (GEMM path) -------------------------------------------------------------------------------------------

def _conv_emulation(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int, pad: int,
                    group: int) -> tuple[np.ndarray, np.ndarray]:
    """The convolution of the rounded operands and the sums of magnitudes, float64, by im2col."""
    n, c, h, _ = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(widen(x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * oh:stride]
                     for i in range(kh) for j in range(kw)], axis=2)  # n, c, taps, oh, ow
    cols = cols.reshape(n, group, cg * kh * kw, oh * oh)
    wm = widen(w).reshape(group, m // group, cg * kh * kw)
    y = np.einsum("gmk,ngkp->ngmp", wm, cols).reshape(n, m, oh, oh)
    mag = np.einsum("gmk,ngkp->ngmp", np.abs(wm), np.abs(cols)).reshape(n, m, oh, oh)
    return y + bias[None, :, None, None], mag + np.abs(bias)[None, :, None, None]


CONV_CASES = [(1, 3, 9, 8, 3, 1, 1, 1), (1, 5, 11, 13, 3, 2, 1, 1), (2, 16, 14, 32, 1, 1, 0, 1),
              (1, 64, 28, 48, 3, 1, 1, 1), (2, 3, 30, 64, 7, 2, 3, 1), (1, 8, 12, 16, 3, 1, 1, 2),
              (1, 40, 9, 20, 3, 1, 1, 1), (1, 64, 10, 64, 3, 1, 1, 2)]


@pytest.mark.parametrize("n,c,h,m,k,stride,pad,group", CONV_CASES, ids=lambda v: str(v))
def test_conv_gemm_path(n: int, c: int, h: int, m: int, k: int, stride: int, pad: int, group: int) -> None:
    """3x3 (Winograd's in float32), 1x1, 7x7 stride 2, grouped; odd K; bias + relu in the epilogue."""
    rng = np.random.default_rng(c * 100 + m)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    oh = (h + 2 * pad - k) // stride + 1
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[stride] * 2,
                            pads=[pad] * 4, group=group)
    model = _model([conv, helper.make_node("Relu", ["c"], ["y"])], [n, c, h, h], [n, m, oh, oh], {"w": w, "b": bias})
    emu, mag = _conv_emulation(x, w, bias, stride, pad, group)
    _check(model, x, np.maximum(emu, 0), mag)


def test_conv_residual() -> None:
    """A 1x1 convolution plus a residual (FusedConv's start block), then relu."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 32, 1, 1)).astype(np.float32)
    bias = np.zeros(32, np.float32)
    x = rng.standard_normal((1, 32, 10, 10)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Add", ["c", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, [1, 32, 10, 10], [1, 32, 10, 10], {"w": w, "b": bias})
    emu, mag = _conv_emulation(x, w, bias, 1, 0, 1)
    _check(model, x, np.maximum(emu + x, 0), mag + np.abs(x))


# -- the option ----------------------------------------------------------------------------------------------------

def _small() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [2, 8], [2, 4], {"w": w})


def test_interpreter_refuses_bf16() -> None:
    with pytest.raises(UnsupportedError, match="does not support precision 'bf16'"):
        glow_core.compile(_small(), "interpreter", precision="bf16")
    glow_core.compile(_small(), "interpreter", precision="fp32")  # the default: accepted everywhere


def test_unknown_precision() -> None:
    with pytest.raises(InputError, match="precision must be one of"):
        glow_core.compile(_small(), "cpu", precision="fp16")


def test_fp32_is_the_default() -> None:
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    a = glow_core.compile(_small(), "cpu", options={"cache": False}).run({"x": x})["y"]
    b = glow_core.compile(_small(), "cpu", precision="fp32", options={"cache": False}).run({"x": x})["y"]
    np.testing.assert_array_equal(a, b)


#: the checks run at each feature level: the kernel chosen for a 64-row GEMM, then products of each path
LEVEL_CODE = """
import numpy as np
import glow_core
from glow_backend_cpu.target import host_codegen
from glow_backend_cpu.emit.bf16 import gemm_mode
assert gemm_mode(host_codegen().target, 64) == {mode!r}, gemm_mode(host_codegen().target, 64)
from tests.cpu.test_bf16 import MATMUL_CASES, CONV_CASES, test_matmul_bias_relu, test_conv_gemm_path, _small
for case in (MATMUL_CASES[1], MATMUL_CASES[4], MATMUL_CASES[6]):
    test_matmul_bias_relu(*case)
for case in (CONV_CASES[1], CONV_CASES[4]):
    test_conv_gemm_path(*case)
# the object cache keeps the precisions apart
x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
a = glow_core.compile(_small(), "cpu").run({{"x": x}})["y"]
b = glow_core.compile(_small(), "cpu", precision="bf16").run({{"x": x}})["y"]
c = glow_core.compile(_small(), "cpu").run({{"x": x}})["y"]
assert not np.array_equal(a, b) and np.array_equal(a, c)
print("ok")
"""


@pytest.mark.parametrize("level,mode,needs", [("avx512", "amx", "+amx-bf16"), ("avx512-noamx", "native", "+avx512bf16"),
                                              ("avx512-nobf16", "emulate", "+avx512f"), ("avx2", "emulate", "+avx2")])
def test_feature_levels(tmp_path: Path, level: str, mode: str, needs: str) -> None:
    """AMX tiles, vdpbf16ps, and the emulation on AVX-512 and AVX2: the same products."""
    from glow_backend_cpu.emit.amx import amx_permitted
    from glow_backend_cpu.target import host_codegen

    if needs not in host_codegen().features.split(","):
        pytest.skip(f"the host has no {needs[1:]}")
    if mode == "amx" and not amx_permitted():
        pytest.skip("Linux does not let this process use AMX")
    run_at_feature_level(LEVEL_CODE.format(mode=mode), level, tmp_path)


def test_cli_precision() -> None:
    """``glow compare --precision bf16`` reports the agreement; ``glow run`` refuses bf16 on the interpreter."""
    from tests.cliutil import glow

    r = glow(["compare", "zoo:digits", "--backend", "cpu", "--precision", "bf16"])
    assert r.returncode == 0, r.stderr
    assert "bf16 against fp32" in r.stdout and "top-1 1/1" in r.stdout
    assert float(re.search(r"cosine ([0-9.]+)", r.stdout).group(1)) > 0.999  # type: ignore[union-attr]
    r = glow(["run", "zoo:digits", "--backend", "interpreter", "--precision", "bf16"])
    assert r.returncode != 0 and "does not support precision 'bf16'" in r.error_line()
    r = glow(["run", "zoo:digits", "--backend", "cpu", "--precision", "bf16"])
    assert r.returncode == 0 and "accuracy on the 360 held-out digits" in r.stdout
