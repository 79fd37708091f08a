"""Generators of the quantization kinds (ONNX QDQ and integer-op style).

Scales and zero points are constants, as in real models (initializers); the
tensors they apply to are inputs.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import BF16, F16, F32, arr
from glow_core.ir.types import SMALL_INT_KINDS, ElemKind

E = ElemKind
Q8 = frozenset({E.INT8, E.UINT8})
QINT = frozenset({E.INT8, E.UINT8, E.INT16, E.UINT16, E.INT32})
REAL = frozenset({F32, F16, BF16})


def _small_ints(elem: ElemKind, shape: tuple[int, ...], rng: np.random.Generator, half: bool = False) -> np.ndarray:
    """int4 / uint4 / int2 / uint2 values over the kind's range (its middle half with ``half``)."""
    info = ml_dtypes.iinfo(elem.dtype)
    lo, hi = int(info.min), int(info.max)
    if half:
        lo, hi = lo // 2, hi // 2
    return rng.integers(lo, hi + 1, size=shape).astype(np.int8).astype(elem.dtype)


def _zp(elem: ElemKind, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if elem in SMALL_INT_KINDS:
        return _small_ints(elem, shape, rng, half=True)
    lo, hi = (-20, 20) if elem.dtype.kind == "i" else (100, 150)
    return rng.integers(lo, hi, size=shape).astype(elem.dtype)


@generator("QuantizeLinear", elems=REAL)
def _quantize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(to: ElemKind, scale_shape: tuple[int, ...], axis: int, block: int, with_zp: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = rng.uniform(-30, 30, (2, 4, 6)).astype(elem.dtype)
            s = rng.uniform(0.05, 0.3, scale_shape).astype(elem.dtype)
            zp = _zp(to, scale_shape, rng) if with_zp else None
            attrs: dict[str, Any] = {"axis": axis, "block_size": block, "elem": to}
            return Variant([x, s, zp], attrs, consts=(1, 2))

        return b

    return {"per-tensor-int8": build(E.INT8, (), 0, 0, True), "per-axis-uint8": build(E.UINT8, (4,), 1, 0, True),
            "blocked-int8": build(E.INT8, (2, 4, 3), 2, 2, True), "no-zero-point": build(E.UINT8, (), 0, 0, False),
            # 4- and 2-bit results: most values saturate (|x / s| is up to 600)
            **{f"per-axis-{k.value}": build(k, (4,), 1, 0, True) for k in sorted(avail & SMALL_INT_KINDS, key=str)}}


@generator("DequantizeLinear", elems=QINT | SMALL_INT_KINDS)
def _dequantize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(to: ElemKind, scale_shape: tuple[int, ...], axis: int, with_zp: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = _small_ints(elem, (2, 4, 6), rng) if elem in SMALL_INT_KINDS else arr(elem, (2, 4, 6), rng, "full")
            s = rng.uniform(0.05, 0.3, scale_shape).astype(to.dtype)
            zp = _zp(elem, scale_shape, rng) if with_zp else None
            return Variant([x, s, zp], {"axis": axis, "block_size": 0, "elem": to}, consts=(1, 2))

        return b

    return {"per-tensor": build(F32, (), 0, True), "per-axis": build(F32, (4,), 1, True),
            "no-zero-point-float16": build(F16, (), 0, False)}


@generator("DynamicQuantizeLinear", elems={F32})
def _dynamic_quantize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"mixed-signs": lambda rng: Variant([rng.uniform(-3, 5, (3, 7)).astype(np.float32)]),
            "positive": lambda rng: Variant([rng.uniform(0.5, 5, (4, 4)).astype(np.float32)])}


@generator("MatMulInteger", elems=Q8)
def _matmul_integer(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(zps: str) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            a = arr(elem, (3, 5), rng, "full")
            bb = arr(elem, (5, 4), rng, "full")
            az = _zp(elem, (3,) if zps == "per-row" else (), rng) if zps != "none" else None
            bz = _zp(elem, (), rng) if zps != "none" else None
            return Variant([a, bb, az, bz], consts=(2, 3))

        return b

    return {"zero-points": build("scalar"), "per-row": build("per-row"), "none": build("none")}


def f(v: float) -> np.ndarray:
    """A float32 scalar (a scale)."""
    return np.asarray(v, np.float32)


def _conv_attrs() -> dict[str, Any]:
    return {"strides": (1, 1), "pads": (1, 0, 1, 0), "dilations": (1, 1), "group": 1}


@generator("ConvInteger", elems=Q8)
def _conv_integer(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def b(rng: np.random.Generator) -> Variant:
        x = arr(elem, (1, 2, 5, 4), rng, "full")
        w = arr(elem, (3, 2, 3, 2), rng, "full")
        return Variant([x, w, _zp(elem, (), rng), _zp(elem, (3,), rng)], _conv_attrs(), consts=(2, 3))

    return {"basic": b}


@generator("QLinearMatMul", elems=Q8)
def _qlinear_matmul(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def b(rng: np.random.Generator) -> Variant:
        a = arr(elem, (3, 5), rng, "full")
        bb = arr(elem, (5, 4), rng, "full")
        return Variant([a, f(0.02), _zp(elem, (), rng), bb, f(0.03), _zp(elem, (), rng), f(0.5), _zp(elem, (), rng)],
                       consts=(1, 2, 4, 5, 6, 7))

    return {"per-tensor": b}


@generator("QLinearConv", elems=Q8)
def _qlinear_conv(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(bias: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (1, 2, 5, 4), rng, "full")
            w = arr(elem, (3, 2, 3, 2), rng, "full")
            ws = rng.uniform(0.01, 0.05, (3,)).astype(np.float32)
            bb = rng.integers(-500, 500, (3,)).astype(np.int32) if bias else None
            return Variant([x, f(0.05), _zp(elem, (), rng), w, ws, _zp(elem, (3,), rng), f(0.7), _zp(elem, (), rng),
                            bb], _conv_attrs(), consts=(1, 2, 4, 5, 6, 7, 8))

        return b

    return {"per-channel": build(False), "bias": build(True)}
