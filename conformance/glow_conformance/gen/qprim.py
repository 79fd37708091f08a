"""Generators of the quantized primitives (IntConv, IntMatMul, Requantize) and their fused forms.

Every case is exact against the interpreter (integer results). The variants
cover per-tensor and per-channel filter zero points and multipliers, zero
points at the ends of their range, saturation at both ends, a fused ReLU
clamp, K not a multiple of 4, and (fused forms, constant weights) the shapes
the cpu backend's int8 kernels take: a padded 3x3, a pointwise and a strided
convolution, and a matrix product with more rows than one tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import arr
from glow_core.ir.types import ElemKind

E = ElemKind
Q8 = frozenset({E.INT8, E.UINT8})


def _ends(elem: ElemKind) -> tuple[int, int]:
    info = np.iinfo(elem.dtype)
    return int(info.min), int(info.max)


def _s(v: Any, dtype: Any) -> np.ndarray:
    return np.asarray(v, dtype)


def _conv_attrs(k: int, stride: int, pad: int) -> dict[str, Any]:
    return {"strides": (stride, stride), "pads": (pad,) * 4, "dilations": (1, 1), "group": 1}


def _filter(elem: ElemKind, shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An int8 filter (zero point 0) for int8 inputs, a uint8 one with zero point 128 for uint8 inputs."""
    if elem is E.INT8:
        return arr(E.INT8, shape, rng, "full"), np.zeros((shape[0],), np.int8)
    return arr(E.UINT8, shape, rng, "full"), np.full((shape[0],), 128, np.uint8)


@generator("IntConv", elems=Q8)
def _qconv(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    lo, hi = _ends(elem)

    def build(per_channel: bool, xz: int, bias: bool, k: int, stride: int, pad: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (1, 5, 7, 6), rng, "full")
            w, wz = _filter(elem, (4, 5, k, k), rng)
            wz = wz if per_channel else wz[:1].reshape(())
            bb = rng.integers(-3000, 3000, (4,)).astype(np.int32) if bias else None
            return Variant([x, w, _s(xz, elem.dtype), wz, bb], _conv_attrs(k, stride, pad), consts=(2, 3))

        return b

    return {"per-tensor": build(False, 3, False, 3, 1, 1), "per-channel-bias": build(True, 5, True, 3, 2, 0),
            "zero-point-min": build(True, lo, True, 1, 1, 0), "zero-point-max": build(False, hi, False, 3, 1, 1)}


@generator("IntMatMul", elems=Q8)
def _qmatmul(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    lo, hi = _ends(elem)

    def build(zps: str) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            a, bb = arr(elem, (3, 7), rng, "full"), arr(elem, (7, 5), rng, "full")
            if zps == "ends":
                az, bz = _s(lo, elem.dtype), _s(hi, elem.dtype)
            elif zps == "per-column":
                az, bz = _s(hi, elem.dtype), arr(elem, (5,), rng, "full")
            else:
                az, bz = None, None
            return Variant([a, bb, az, bz], consts=(2, 3))

        return b

    return {"zero-points-at-ends": build("ends"), "per-column": build("per-column"), "none": build("none")}


@generator("Requantize", elems={E.INT32})
def _requantize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(to: ElemKind, per_channel: bool, zp: str, clamp: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = rng.integers(-40000, 40000, (2, 3, 4, 5)).astype(np.int32)
            x[0, 0, 0, :4] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0, 1]  # saturate both ends
            x[1, 2, 3, :2] = [100, 300]
            # per tensor: 0.005, so that 100 and 300 land on ties (0.5, 1.5: half to even)
            mult = rng.uniform(0.001, 0.01, (1, 3, 1, 1)) if per_channel else np.float32(0.005)
            lo, hi = _ends(to)
            z = {"min": lo, "max": hi, "mid": (lo + hi) // 2}[zp]
            attrs = {"clamp_lo": z, "clamp_hi": hi - 5} if clamp else {}  # a fused ReLU, and a lower top
            return Variant([x, np.asarray(mult, np.float32), _s(z, to.dtype)], attrs, consts=(1, 2))

        return b

    out: dict[str, Build] = {}
    for to in sorted(Q8 & avail, key=lambda e: e.value):
        out[f"per-tensor-{to.value}"] = build(to, False, "mid", False)
        out[f"per-channel-zero-min-{to.value}"] = build(to, True, "min", False)
        out[f"zero-max-{to.value}"] = build(to, False, "max", False)
        out[f"relu-clamped-{to.value}"] = build(to, True, "mid", True)
    return out


def _fused_multiplier(rng: np.random.Generator, m: int, per_channel: bool) -> np.ndarray:
    return rng.uniform(0.002, 0.02, (m,) if per_channel else ()).astype(np.float32)


@generator("FusedIntConv", elems=Q8)
def _fused_qconv(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    lo, hi = _ends(elem)

    def build(shape: tuple[int, ...], m: int, k: int, stride: int, pad: int, per_channel: bool,
              relu: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, shape, rng, "full")
            w, wz = _filter(elem, (m, shape[1], k, k), rng)
            yz = _s(lo + 7, elem.dtype)
            attrs = {**_conv_attrs(k, stride, pad), **({"clamp_lo": lo + 7} if relu else {})}
            ops = [x, w, _s(hi if elem is E.INT8 else lo, elem.dtype), wz, _fused_multiplier(rng, m, per_channel), yz,
                   rng.integers(-20000, 20000, (m,)).astype(np.int32)]
            return Variant(ops, attrs, consts=(1, 2, 3, 4, 5, 6))

        return b

    return {"3x3-padded-per-channel": build((1, 6, 9, 9), 13, 3, 1, 1, True, False),
            "pointwise-relu": build((2, 8, 7, 7), 20, 1, 1, 0, False, True),
            "strided-k-not-multiple-of-4": build((1, 5, 12, 11), 7, 3, 2, 0, True, False)}


@generator("FusedIntMatMul", elems=Q8)
def _fused_qmatmul(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(rows: int, k: int, n: int, per_channel: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            a = arr(elem, (rows, k), rng, "full")
            w = arr(E.INT8, (k, n), rng, "full")
            ops = [a, w, _s(9, elem.dtype), np.zeros((n,) if per_channel else (), np.int8),
                   _fused_multiplier(rng, n, per_channel), _s(-3, np.int8),
                   rng.integers(-20000, 20000, (n,)).astype(np.int32)]
            return Variant(ops, consts=(1, 2, 3, 4, 5, 6))

        return b

    return {"per-column": build(5, 33, 19, True), "many-rows": build(70, 64, 10, False)}
