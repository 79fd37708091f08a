"""The CPU backend's Conv / MatMul / FusedConv / FusedMatMul / MaxPool / AvgPool emitters vs the interpreter.

Each family is compiled once as one module (``linalg_harness.KernelSuite``);
every case then runs with 1 and with 3 threads (thread ids run one after the
other, which exercises the work split). Bounds (docs/cpu-backend-kernels.md,
"Convolution and GEMM kernels"):

- float32 Conv / MatMul: ``|y - y_ref| <= 1e-4 * |x|*|w|`` (the same product
  over absolute values, bias included): rtol 1e-4 relative to the sum of the
  magnitudes, which is what a different summation order can change;
- float16 / bfloat16: one rounding of the result apart (2**-10 / 2**-7 relative)
  plus the float32 bound; float64: 1e-12 relative to the magnitudes;
- integers, MaxPool: exact (NaN where the reference has NaN);
- AvgPool: ``1e-5 * avg(|x|)`` (the same order of summation and a true
  division, except the global-pooling path which sums lanes first).

``python -m tests.cpu.test_kernels_linalg [THREADS...]`` prints the GFLOP/s
table of the ResNet-50 layer shapes instead: real runs on 1 and 2 threads, and
the slowest share of a 2-way split run alone (what two free cores would give).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import glow_backend_cpu.emit.conv
import glow_backend_cpu.emit.matmul
import glow_backend_cpu.emit.pool  # noqa: F401

from glow_core.ir.kinds import get_kind
from glow_core.ir.types import ElemKind, TensorType
from glow_core.reference.kernels import KERNELS
from tests.cpu.linalg_harness import KernelSuite

F32, F16, F64 = np.float32, np.float16, np.float64
try:
    import ml_dtypes

    BF16: Any = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    BF16 = None

THREADS = (1, 3)


def _types(arrays: Sequence[np.ndarray | None]) -> list[TensorType | None]:
    return [TensorType(ElemKind.from_dtype(a.dtype), a.shape) if a is not None else None for a in arrays]


def reference(kind: str, attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> tuple[dict[str, Any],
                                                                                               TensorType, np.ndarray]:
    k = get_kind(kind)
    attrs = k.normalize_attrs(attrs, "test")
    out = k.infer(_types(inputs), attrs)[0]
    y = np.asarray(KERNELS[kind](attrs, [out], *inputs))
    return attrs, out, y


def magnitude(kind: str, attrs: dict[str, Any], inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    """The op over absolute values in float64 (the scale a summation-order difference is relative to)."""
    base = "Conv" if "Conv" in kind else "MatMul"
    ins = [np.abs(a.astype(np.float64)) if a is not None else None for a in inputs]
    if base == "MatMul":
        y = np.matmul(ins[0], ins[1])
        return y + ins[2] if len(ins) > 2 and ins[2] is not None else y
    a = {k: attrs[k] for k in ("strides", "pads", "dilations", "group")}
    _, out, _ = reference("Conv", a, [inputs[0].astype(F32), inputs[1].astype(F32), None])
    y = np.asarray(KERNELS["Conv"](a, [TensorType(ElemKind.FLOAT64, out.shape)], *ins[:2],
                                   ins[2] if len(ins) > 2 else None))
    return y + ins[3] if len(ins) > 3 and ins[3] is not None else y


class Family:
    """All cases of one kind family, compiled into one suite on first use."""

    def __init__(self, cases: list[tuple[str, str, dict[str, Any], list[np.ndarray | None], tuple[int, ...]]]):
        self.cases = cases
        self.suite: KernelSuite | None = None
        self.refs: dict[str, Any] = {}

    def get(self) -> KernelSuite:
        if self.suite is None:
            suite = KernelSuite("linalg")
            for cid, kind, attrs, inputs, const in self.cases:
                full, out, y = reference(kind, attrs, inputs)
                idx = suite.add(kind, full, inputs, [out.shape], out.elem, const)
                self.refs[cid] = (idx, kind, full, inputs, y)
            self.suite = suite.build()
        return self.suite


def rnd(rng: np.random.Generator, shape: Sequence[int], dtype: Any = F32, lo: float = -1, hi: float = 1) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(dtype)


# -- convolution cases -------------------------------------------------------------------------------------

def _conv(rng: np.random.Generator, cid: str, x: tuple[int, ...], w: tuple[int, ...], stride: Sequence[int],
          pads: Sequence[int], dil: Sequence[int] | None = None, group: int = 1, bias: bool = True,
          dtype: Any = F32, const_w: bool = True, act: str | None = None, lo: float = -math.inf,
          hi: float = math.inf, residual: bool = False
          ) -> tuple[str, str, dict[str, Any], list[np.ndarray | None], tuple[int, ...]]:
    nd = len(x) - 2
    attrs: dict[str, Any] = {"strides": tuple(stride), "pads": tuple(pads), "dilations": tuple(dil or (1,) * nd),
                             "group": group}
    kind = "Conv"
    if act is not None:
        kind = "FusedConv"
        attrs.update(activation=act, clip_min=lo, clip_max=hi)
    inputs = [rnd(rng, x, dtype), rnd(rng, w, dtype), rnd(rng, (w[0],), dtype) if bias else None]
    if residual:  # FusedConv's 4th operand, added before the activation
        d = attrs["dilations"]
        out = [(x[2 + i] + pads[i] + pads[nd + i] - d[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
        inputs.append(rnd(rng, (x[0], w[0], *out), dtype))
    return cid, kind, attrs, inputs, (1,) if const_w else ()


def conv_cases() -> list[Any]:
    r = np.random.default_rng(1)
    return [
        _conv(r, "3x3s1p1", (1, 8, 10, 10), (16, 8, 3, 3), (1, 1), (1, 1, 1, 1)),
        _conv(r, "1x1s1-pointwise", (1, 32, 7, 9), (20, 32, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "1x1s1-wide-tail", (1, 16, 9, 15), (13, 16, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "1x1s2", (1, 24, 13, 13), (12, 24, 1, 1), (2, 2), (0, 0, 0, 0)),
        _conv(r, "3x3s2p1", (1, 16, 15, 15), (24, 16, 3, 3), (2, 2), (1, 1, 1, 1)),
        _conv(r, "7x7s2p3-stem", (1, 3, 40, 40), (16, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
        _conv(r, "5x5s3-wideload", (1, 4, 20, 23), (8, 4, 5, 5), (3, 3), (2, 1, 0, 2)),
        _conv(r, "3x3s5-gather", (1, 4, 21, 27), (8, 4, 3, 3), (5, 5), (1, 1, 1, 1)),
        _conv(r, "3x3-asym-pads", (1, 6, 11, 8), (10, 6, 3, 2), (1, 2), (0, 2, 3, 1)),
        _conv(r, "dilated", (1, 6, 14, 14), (8, 6, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
        _conv(r, "batch2-no-bias", (2, 5, 9, 9), (7, 5, 3, 3), (1, 1), (1, 1, 1, 1), bias=False),
        _conv(r, "groups2-gemm", (1, 16, 8, 8), (12, 8, 3, 3), (1, 1), (1, 1, 1, 1), group=2),
        _conv(r, "depthwise-direct", (1, 12, 13, 13), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=12),
        _conv(r, "depthwise-s2", (1, 8, 14, 14), (8, 1, 3, 3), (2, 2), (1, 1, 1, 1), group=8),
        _conv(r, "depthwise-x2-wide", (1, 4, 6, 40), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=4),
        _conv(r, "groups4-narrow", (1, 8, 9, 9), (8, 2, 3, 3), (1, 1), (0, 0, 0, 0), group=4),
        _conv(r, "direct-11x11", (1, 2, 30, 30), (2, 2, 11, 11), (4, 4), (2, 2, 2, 2)),
        _conv(r, "kblocks", (1, 130, 6, 6), (9, 130, 3, 3), (1, 1), (1, 1, 1, 1)),
        _conv(r, "kblocks-1x1", (1, 1100, 4, 5), (8, 1100, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "runtime-filter", (1, 6, 8, 8), (10, 6, 3, 3), (1, 1), (1, 1, 1, 1), const_w=False),
        _conv(r, "conv1d", (1, 6, 37), (9, 6, 3), (2,), (1, 1)),
        _conv(r, "conv3d-scalar", (1, 3, 5, 6, 4), (4, 3, 2, 3, 2), (1, 1, 1), (0, 1, 1, 1, 0, 0)),
        _conv(r, "pads-beyond-kernel", (1, 5, 6, 7), (8, 5, 3, 3), (1, 1), (3, 2, 4, 3)),
        _conv(r, "tiny-1x1-out", (1, 4, 3, 3), (6, 4, 3, 3), (1, 1), (0, 0, 0, 0)),
        _conv(r, "transposed-7x7", (1, 16, 7, 7), (40, 16, 3, 3), (1, 1), (1, 1, 1, 1)),
        _conv(r, "transposed-5x5-1x1", (1, 24, 5, 5), (70, 24, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "transposed-groups-batch", (2, 8, 6, 6), (64, 4, 3, 3), (1, 1), (1, 1, 1, 1), group=2, act="relu"),
        _conv(r, "transposed-kblocks-s2", (1, 130, 11, 11), (33, 130, 3, 3), (2, 2), (1, 1, 1, 1), bias=False),
        _conv(r, "transposed-wide-3x3", (1, 120, 9, 9), (40, 120, 3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
        _conv(r, "pixels-wide-1x1-10x10", (1, 1030, 10, 10), (33, 1030, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "transposed-panels-split", (1, 40, 7, 7), (100, 40, 1, 1), (1, 1), (0, 0, 0, 0), act="relu"),
        _conv(r, "transposed-panels-3x3-s2", (1, 24, 13, 13), (97, 24, 3, 3), (2, 2), (1, 1, 1, 1)),
        _conv(r, "transposed-wide-1x1-9x9", (1, 1030, 9, 9), (40, 1030, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "pixels-14x14-k1152", (1, 128, 14, 14), (40, 128, 3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
        _conv(r, "l1-kblocks-3x3", (1, 15, 11, 13), (14, 15, 3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
        _conv(r, "l1-kblocks-1x1", (1, 300, 9, 9), (13, 300, 1, 1), (1, 1), (0, 0, 0, 0)),
        _conv(r, "l1-kblocks-7x7s2", (1, 5, 23, 23), (9, 5, 7, 7), (2, 2), (3, 3, 3, 3)),
        _conv(r, "fused-relu", (1, 8, 12, 12), (16, 8, 3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
        _conv(r, "fused-clip", (1, 8, 12, 12), (16, 8, 1, 1), (1, 1), (0, 0, 0, 0), act="clip", lo=0.0, hi=0.5),
        _conv(r, "fused-clip-lo", (1, 4, 7, 7), (4, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=4, act="clip", lo=-0.1),
        _conv(r, "fused-none", (1, 8, 6, 6), (8, 8, 3, 3), (1, 1), (1, 1, 1, 1), act="none"),
        _conv(r, "residual-pixels-kblocks", (1, 130, 12, 12), (16, 130, 3, 3), (1, 1), (1, 1, 1, 1), act="relu",
              residual=True),
        _conv(r, "residual-pixels-groups-batch", (2, 16, 8, 8), (12, 8, 3, 3), (1, 1), (1, 1, 1, 1), group=2,
              act="none", residual=True),
        _conv(r, "residual-transposed", (1, 40, 7, 7), (100, 40, 1, 1), (1, 1), (0, 0, 0, 0), act="relu",
              residual=True),
        _conv(r, "residual-transposed-clip", (2, 8, 6, 6), (64, 4, 3, 3), (1, 1), (1, 1, 1, 1), group=2, act="clip",
              lo=-0.2, hi=0.3, residual=True),
        _conv(r, "residual-direct", (1, 12, 13, 13), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=12, act="relu",
              residual=True),
        _conv(r, "residual-fp16-scalar", (1, 4, 7, 7), (6, 4, 3, 3), (1, 1), (1, 1, 1, 1), dtype=F16, act="relu",
              residual=True),
        _conv(r, "fp16", (1, 4, 7, 7), (6, 4, 3, 3), (1, 1), (1, 1, 1, 1), dtype=F16),
        _conv(r, "fp16-relu", (1, 4, 7, 7), (6, 4, 3, 3), (1, 1), (1, 1, 1, 1), dtype=F16, act="relu"),
        _conv(r, "fp64", (1, 4, 7, 7), (6, 2, 3, 3), (2, 1), (1, 1, 0, 0), group=2, dtype=F64),
    ] + ([_conv(r, "bf16", (1, 3, 6, 6), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), dtype=BF16)] if BF16 else [])


def matmul_cases() -> list[Any]:
    r = np.random.default_rng(2)

    def mm(cid: str, a: tuple[int, ...], b: tuple[int, ...], const: tuple[int, ...] = (1,), dtype: Any = F32,
           bias: tuple[int, ...] | None = None, act: str | None = None, lo: float = -math.inf,
           hi: float = math.inf) -> Any:
        if dtype in (np.int32, np.int64, np.uint32):
            ins = [r.integers(0 if dtype == np.uint32 else -50, 50, size=s).astype(dtype) for s in (a, b)]
        else:
            ins = [rnd(r, a, dtype), rnd(r, b, dtype)]
        attrs: dict[str, Any] = {}
        kind = "MatMul"
        if act is not None or bias is not None:
            kind = "FusedMatMul"
            attrs = {"activation": act or "none", "clip_min": lo, "clip_max": hi}
            ins.append(None if bias is None else (r.integers(-9, 9, size=bias).astype(dtype)
                                                  if np.dtype(dtype).kind in "iu" else rnd(r, bias, dtype)))
        return cid, kind, attrs, ins, const

    return [
        mm("fc-gemv", (1, 300), (300, 70)),
        mm("fc-gemv-wide", (1, 96), (96, 1000), bias=(1000,), act="relu"),
        # M = 1 with a constant weight: narrow panels for few columns (gemv_geometry), odd K and N
        mm("gemv-1x1", (1, 1), (1, 1)),
        mm("gemv-tiny", (1, 3), (3, 5), bias=(5,), act="relu"),
        mm("gemv-k1", (1, 1), (1, 50), bias=(1, 50)),
        mm("gemv-n20-odd-k", (1, 37), (37, 20), bias=(20,), act="clip", lo=-0.3, hi=0.4),
        mm("gemv-n64-one-vector-panels", (1, 1000), (1000, 64), bias=(64,)),
        mm("gemv-n100-tail", (1, 333), (333, 100), bias=(100,), act="relu"),
        mm("gemv-n130-two-vector-panels", (1, 77), (77, 130), act="clip", lo=-1.0, hi=0.5),
        mm("gemv-n255-three-vector-panels", (1, 17), (17, 255), bias=(255,)),
        mm("gemv-m3-narrow", (3, 41), (41, 40), bias=(3, 1), act="relu"),
        mm("gemv-batched", (2, 1, 50), (2, 50, 70), bias=(70,)),
        mm("gemv-large", (1, 3001), (3001, 700), bias=(700,), act="relu"),
        mm("small", (7, 33), (33, 100)),
        mm("runtime-b-direct", (5, 40), (40, 50), const=()),
        mm("runtime-b-packed", (37, 40), (40, 70), const=()),
        mm("const-a", (13, 20), (20, 30), const=(0,)),
        mm("k-blocks", (9, 2100), (2100, 20)),
        mm("k-blocks-runtime", (14, 1500), (1500, 33), const=()),
        mm("batched", (2, 3, 5, 8), (8, 17), const=()),
        mm("batched-const-b", (3, 7, 9), (9, 20)),
        mm("broadcast-both", (3, 1, 6, 10), (1, 4, 10, 19), const=()),
        mm("broadcast-const-b", (2, 7, 9), (3, 1, 9, 16)),
        mm("vec-mat", (12,), (12, 18)),
        mm("mat-vec", (21, 70), (70,), const=()),
        mm("mat-vec-batched", (2, 5, 35), (35, 1)),
        mm("vec-vec", (40,), (40,), const=()),
        mm("k1", (6, 1), (1, 40)),
        mm("bias-col", (10, 20), (20, 35), bias=(35,)),
        mm("bias-row", (10, 20), (20, 35), bias=(10, 1), act="relu"),
        mm("bias-full", (10, 20), (20, 35), bias=(10, 35), act="clip", lo=-0.2, hi=0.3),
        mm("bias-scalar", (10, 20), (20, 35), bias=(1,)),
        mm("bias-batched", (2, 10, 20), (20, 35), bias=(2, 1, 35)),
        mm("bias-matvec", (9, 20), (20,), bias=(9,), act="relu"),
        mm("k0", (3, 0), (0, 4), const=()),
        mm("const-a-batched", (1, 13, 20), (3, 20, 30), const=(0,)),
        mm("int32", (4, 9), (9, 6), dtype=np.int32),
        mm("int64-fused", (3, 5), (5, 4), dtype=np.int64, bias=(4,), act="clip", lo=-20, hi=100),
        mm("uint32-relu", (3, 5), (5, 4), dtype=np.uint32, bias=(4,), act="relu"),
        mm("fp16", (5, 17), (17, 9), dtype=F16, bias=(9,)),
        mm("fp64", (5, 17), (17, 9), dtype=F64),
    ]


def pool_cases() -> list[Any]:
    r = np.random.default_rng(3)

    def pool(cid: str, kind: str, x: tuple[int, ...], k: Sequence[int], s: Sequence[int], p: Sequence[int],
             d: Sequence[int] | None = None, ceil: bool = False, inc: bool = False, dtype: Any = F32) -> Any:
        attrs: dict[str, Any] = {"kernel_shape": tuple(k), "strides": tuple(s), "pads": tuple(p),
                                 "dilations": tuple(d or (1,) * len(k)), "ceil_mode": ceil}
        if kind == "AvgPool":
            attrs["count_include_pad"] = inc
        if np.dtype(dtype).kind in "iu":
            xa = r.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, size=x).astype(dtype)
        else:
            xa = rnd(r, x, dtype, -5, 5)
        return cid, kind, attrs, [xa], ()

    x = (1, 3, 17, 19)
    nan_in = rnd(r, (1, 2, 9, 9), F32)
    nan_in[0, 0, 3, 4] = np.nan
    cases = [
        pool("max3x3s2p1", "MaxPool", (1, 4, 20, 20), (3, 3), (2, 2), (1, 1, 1, 1)),
        pool("max2x2", "MaxPool", x, (2, 2), (2, 2), (0, 0, 0, 0)),
        pool("max-ceil", "MaxPool", x, (3, 3), (2, 2), (0, 0, 0, 0), ceil=True),
        pool("max-dil", "MaxPool", x, (2, 3), (1, 2), (1, 0, 0, 2), d=(2, 2)),
        pool("max-wide", "MaxPool", (1, 2, 5, 70), (3, 3), (1, 1), (1, 1, 1, 1)),
        pool("max-global", "MaxPool", (1, 5, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0)),
        pool("max-1d", "MaxPool", (2, 3, 30), (4,), (3,), (1, 2)),
        pool("max-3d", "MaxPool", (1, 2, 5, 6, 4), (2, 2, 2), (2, 1, 2), (0, 1, 0, 1, 0, 0)),
        pool("max-int8", "MaxPool", (1, 2, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), dtype=np.int8),
        pool("max-uint8", "MaxPool", (1, 2, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), dtype=np.uint8),
        pool("max-fp16", "MaxPool", (1, 2, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), dtype=F16),
        pool("avg3x3", "AvgPool", x, (3, 3), (1, 1), (1, 1, 1, 1)),
        pool("avg-incpad", "AvgPool", x, (3, 3), (2, 2), (1, 1, 1, 1), inc=True),
        pool("avg-ceil", "AvgPool", x, (3, 3), (2, 2), (1, 1, 1, 1), ceil=True),
        pool("avg-ceil-incpad", "AvgPool", x, (2, 2), (2, 2), (0, 1, 0, 1), ceil=True, inc=True),
        pool("avg-global-7x7", "AvgPool", (1, 6, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0)),
        pool("avg-global-13", "AvgPool", (2, 3, 13, 13), (13, 13), (1, 1), (0, 0, 0, 0)),
        pool("avg-1d", "AvgPool", (1, 3, 25), (5,), (2,), (2, 2)),
        pool("avg-3d", "AvgPool", (1, 2, 4, 5, 6), (2, 2, 3), (1, 2, 1), (1, 0, 0, 0, 1, 1)),
        pool("avg-fp64", "AvgPool", (1, 2, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), dtype=F64),
        pool("avg-fp16", "AvgPool", (1, 2, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), dtype=F16),
    ]
    cases.append(("max-nan", "MaxPool", {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                         "dilations": (1, 1), "ceil_mode": False}, [nan_in], ()))
    return cases


CONV = Family(conv_cases())
MATMUL = Family(matmul_cases())
POOL = Family(pool_cases())


def _check_linalg(fam: Family, cid: str, nthreads: int) -> None:
    suite = fam.get()
    idx, kind, attrs, inputs, ref = fam.refs[cid]
    y = suite.run(idx, inputs, nthreads)[0]
    assert y.shape == ref.shape and y.dtype == ref.dtype
    if ref.dtype.kind in "iu":
        np.testing.assert_array_equal(y, ref)
        return
    mag = magnitude(kind, attrs, inputs)
    dt = ref.dtype
    yf, rf = y.astype(np.float64), ref.astype(np.float64)
    if dt == np.float64:
        bound = 1e-12 * mag
    elif dt == np.float32:
        bound = 1e-4 * mag
    else:  # one rounding of the 16-bit result apart, plus the float32 bound
        ulp = 2.0 ** -10 if dt == np.float16 else 2.0 ** -7
        bound = ulp * np.abs(rf) + 1e-4 * mag
    err = np.abs(yf - rf)
    assert np.all(err <= bound + 1e-30), f"max error {err.max()} (bound {bound.ravel()[err.argmax()]})"


@pytest.mark.parametrize("nthreads", THREADS)
@pytest.mark.parametrize("cid", [c[0] for c in CONV.cases])
def test_conv(cid: str, nthreads: int) -> None:
    _check_linalg(CONV, cid, nthreads)


@pytest.mark.parametrize("nthreads", THREADS)
@pytest.mark.parametrize("cid", [c[0] for c in MATMUL.cases])
def test_matmul(cid: str, nthreads: int) -> None:
    _check_linalg(MATMUL, cid, nthreads)


@pytest.mark.parametrize("nthreads", THREADS)
@pytest.mark.parametrize("cid", [c[0] for c in POOL.cases])
def test_pool(cid: str, nthreads: int) -> None:
    suite = POOL.get()
    idx, kind, attrs, inputs, ref = POOL.refs[cid]
    y = suite.run(idx, inputs, nthreads)[0]
    assert y.shape == ref.shape and y.dtype == ref.dtype
    if kind == "MaxPool":
        np.testing.assert_array_equal(y, ref)
        return
    # the average of |x| over each window: what a different summation order is relative to
    out = TensorType(ElemKind.FLOAT64, ref.shape)
    mag = np.asarray(KERNELS["AvgPool"](attrs, [out], np.abs(inputs[0].astype(np.float64))))
    err = np.abs(y.astype(np.float64) - ref.astype(np.float64))
    bound = (2.0 ** -10 * np.abs(ref.astype(np.float64)) if ref.dtype == np.float16 else 0) + 1e-5 * mag
    assert np.all(err <= bound), f"max error {err.max()}"


def test_gemv_panels_are_narrow_only_for_few_columns_of_a_constant_weight() -> None:
    from glow_backend_cpu.emit.vecops import geometry
    from glow_backend_cpu.emit.matmul import gemv_geometry, matmul_shape

    geo = geometry(16)

    def nr(a: tuple[int, ...], b: tuple[int, ...], const: bool = True) -> int:
        s = matmul_shape(a, b, (*a[:-1], b[-1]), None)
        return gemv_geometry(geo, s, const).nr

    assert nr((1, 500), (500, 64)) == 16  # 4 panels: every thread of 2 or 4 streams some weights
    assert nr((1, 500), (500, 130)) == 32
    assert nr((1, 25088), (25088, 4096)) == geo.nr  # enough panels already
    assert nr((1, 500), (500, 64), const=False) == geo.nr  # a run-time B keeps the GEMM geometry
    assert nr((7, 500), (500, 64)) == geo.nr  # several M panels reuse each B panel
    assert nr((8, 1, 500), (8, 500, 64)) == geo.nr  # 8 batches: enough work items already
    assert nr((2, 1, 500), (2, 500, 64)) == 16


def test_pack_layouts() -> None:
    from glow_backend_cpu.pack import even_blocks, pack_a_panels, pack_b_panels

    a = np.arange(2 * 7 * 5, dtype=np.float32).reshape(2, 7, 5)
    pa = pack_a_panels(a, 3)
    assert pa.shape == (2, 3, 5, 3)
    assert pa[1, 2, 4, 0] == a[1, 6, 4] and pa[1, 2, 4, 1] == 0
    b = np.arange(2 * 5 * 9, dtype=np.float32).reshape(2, 5, 9)
    pb = pack_b_panels(b, 4)
    assert pb.shape == (2, 3, 5, 4)
    assert pb[0, 2, 3, 0] == b[0, 3, 8] and pb[0, 2, 3, 1] == 0
    assert even_blocks(2100, 1024) == [0, 700, 1400]
    assert even_blocks(130 * 9, 1024, 9) == [0, 585]
    assert even_blocks(5, 1024, 9) == [0]


# -- benchmark (python -m tests.cpu.test_kernels_linalg) ---------------------------------------------------

#: ResNet-50 convolution shapes (in channels, out channels, input size, kernel, stride) and its FC layer
RESNET50 = [(3, 64, 224, 7, 2), (64, 64, 56, 1, 1), (64, 64, 56, 3, 1), (64, 256, 56, 1, 1), (256, 64, 56, 1, 1),
            (256, 128, 56, 1, 2), (128, 128, 28, 3, 1), (128, 512, 28, 1, 1), (512, 128, 28, 1, 1),
            (256, 256, 14, 3, 1), (256, 1024, 14, 1, 1), (1024, 256, 14, 1, 1), (512, 512, 7, 3, 1),
            (512, 2048, 7, 1, 1), (2048, 512, 7, 1, 1)]


def _ort_seconds(ic: int, oc: int, hw: int, k: int, s: int, x: np.ndarray, w: np.ndarray, b: np.ndarray,
                 threads: int, reps: int) -> float | None:
    """onnxruntime on the same Conv + Relu (best of ``reps``, thread CPU time), or None without onnxruntime."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    import time

    p = k // 2
    oh = (hw + 2 * p - k) // s + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, oh, oh])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    del onnx
    sess.run(None, {"x": x})
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()  # one intra-op thread: the session runs on this thread
        sess.run(None, {"x": x})
        best = min(best, time.thread_time() - t0)
    return best


def bench(threads: Sequence[int] = (1, 2), seconds: float = 0.3) -> None:
    """Markdown table: glow on 1 / 2 threads, the slowest share of a 2-way split run alone, onnxruntime 1 thread."""
    r = np.random.default_rng(0)
    suite = KernelSuite("bench")
    rows = []
    for ic, oc, hw, k, s in RESNET50:
        p = k // 2
        x, w, b = rnd(r, (1, ic, hw, hw)), rnd(r, (oc, ic, k, k)), rnd(r, (oc,))
        attrs = {"strides": (s, s), "pads": (p,) * 4, "dilations": (1, 1), "group": 1, "activation": "relu",
                 "clip_min": -math.inf, "clip_max": math.inf}
        oh = (hw + 2 * p - k) // s + 1
        idx = suite.add("FusedConv", attrs, [x, w, b], [(1, oc, oh, oh)], ElemKind.FLOAT32, (1,))
        rows.append((f"conv {ic}->{oc} {k}x{k}/{s} @{hw}", idx, [x, w, b], 2 * ic * oc * k * k * oh * oh,
                     (ic, oc, hw, k, s)))
    for m, kk, n in ((1, 2048, 1000), (1, 25088, 4096)):
        a, wt, bias = rnd(r, (m, kk)), rnd(r, (kk, n)), rnd(r, (n,))
        attrs = {"activation": "none", "clip_min": -math.inf, "clip_max": math.inf}
        idx = suite.add("FusedMatMul", attrs, [a, wt, bias], [(m, n)], ElemKind.FLOAT32, (1,))
        rows.append((f"fc {m}x{kk}x{n}", idx, [a, wt, bias], 2 * m * kk * n, None))
    suite.build()
    head = " | ".join(f"{t} thr ms | {t} thr GFLOP/s" for t in threads)
    print(f"| layer | {head} | 2-way split ms | split GFLOP/s | onnxruntime 1 thr GFLOP/s |")
    print("|---|" + "---|---|" * (len(threads) + 1) + "---|")
    for name, idx, inputs, flops, conv in rows:
        cells = []
        once = suite.bench(idx, inputs, 1, reps=1, rounds=3)
        reps = max(2, int(seconds / max(once, 1e-6) / 12))
        for t in threads:
            if t == 1:  # one thread: its CPU time (robust against other load on the machine)
                sec = suite.bench_split(idx, inputs, 1, reps=reps, rounds=6)
            else:
                sec = suite.bench(idx, inputs, t, reps=reps, rounds=12)
            cells.append(f"{sec * 1e3:.3f} | {flops / sec / 1e9:.1f}")
        sec = suite.bench_split(idx, inputs, 2, reps=reps, rounds=6)
        cells.append(f"{sec * 1e3:.3f} | {flops / sec / 1e9:.1f}")
        ort_s = _ort_seconds(*conv, *inputs, threads=1, reps=12 * reps) if conv else None
        cells.append(f"{flops / ort_s / 1e9:.1f}" if ort_s else "-")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    bench(tuple(int(a) for a in sys.argv[1:]) or (1, 2))
