"""Generators of the typed quantized kinds (``glow_core.ir.defs.quant``: scale and offset in the type).

Operands are typed ``int8q`` / ``uint8q`` inputs with explicit parameters (the kinds' ``in_params``
must match them); weights, their scales and biases are constants, as conversion makes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_core.ir.types import ElemKind, TensorType

E = ElemKind
F32 = E.FLOAT32
I8Q = frozenset({E.INT8Q})


def _q(rng: np.random.Generator, shape: tuple[int, ...], elem: ElemKind = E.INT8Q) -> np.ndarray:
    lo, hi = (0, 256) if elem == E.UINT8Q else (-128, 128)
    return rng.integers(lo, hi, shape).astype(np.uint8 if elem == E.UINT8Q else np.int8)


def _t(a: np.ndarray, scale: float, offset: int, elem: ElemKind = E.INT8Q) -> TensorType:
    return TensorType(elem, a.shape, scale, offset)


def _out(elem: ElemKind = E.INT8Q, scale: float = 0.125, offset: int = -3) -> dict[str, Any]:
    return {"elem": elem, "scale": scale, "offset": offset if elem == E.INT8Q else offset + 128}


def _unary(kind: str, shape: tuple[int, ...], extra: dict[str, Any], out: bool = True) -> Build:
    def b(rng: np.random.Generator) -> Variant:
        x = _q(rng, shape)
        attrs: dict[str, Any] = {**extra, **({"in_params": (0.05, 4)} if kind != "QMaxPool" else {})}
        if out:
            attrs.update(_out())
        if kind in ("QClip", "QMaxPool"):
            attrs.pop("in_params", None)
        return Variant([x], attrs, [_t(x, 0.05, 4)])

    return b


@generator("Quantize", elems={F32})
def _quantize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(to: ElemKind) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            return Variant([rng.uniform(-20, 20, (3, 5, 7)).astype(np.float32)], _out(to))

        return b

    return {"int8q": build(E.INT8Q), "uint8q": build(E.UINT8Q)}


@generator("Dequantize", elems=I8Q)
def _dequantize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"odd": _unary(kind, (3, 5, 7), {}, out=False)}


@generator("Rescale", "QClip", elems=I8Q)
def _rescale(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    extra = {"lo": -20, "hi": 90} if kind == "QClip" else {}
    return {"odd": _unary(kind, (3, 5, 7), extra, out=kind == "Rescale")}


_POOL = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1)}


@generator("QMaxPool", "QAvgPool", elems=I8Q)
def _pool(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"pads": _unary(kind, (1, 3, 7, 6), dict(_POOL), out=kind == "QAvgPool")}


@generator("QAdd", "QMul", elems=I8Q)
def _binary(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def b(rng: np.random.Generator) -> Variant:
        a, c = _q(rng, (3, 1, 5)), _q(rng, (4, 1))
        return Variant([a, c], {"in_params": (0.05, 4, 0.02, -7), **_out()}, [_t(a, 0.05, 4), _t(c, 0.02, -7)])

    return {"broadcast": b}


@generator("QConv", "QMatMul", elems=I8Q)
def _linear(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(bias: bool, per_channel: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            if kind == "QConv":
                x, w, m = _q(rng, (1, 4, 6, 5)), _q(rng, (3, 4, 3, 3)), 3
                attrs: dict[str, Any] = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
            else:
                x, w, m = _q(rng, (2, 3, 16), E.UINT8Q), _q(rng, (16, 5)), 5
                attrs = {}
            ws = rng.uniform(0.002, 0.01, m if per_channel else 1).astype(np.float32)
            bb = rng.integers(-900, 900, m).astype(np.int32) if bias else None
            xt = _t(x, 0.05, 4) if kind == "QConv" else _t(x, 0.05, 130, E.UINT8Q)
            types = [xt, TensorType(E.INT8, w.shape), TensorType(F32, ws.shape),
                     None if bb is None else TensorType(E.INT32, bb.shape)]
            return Variant([x, w, ws, bb], {**attrs, "in_params": (0.05, xt.offset), **_out()}, types, consts=(1, 2, 3))

        return b

    return {"per-channel-bias": build(True, True), "per-tensor": build(False, False)}


@generator("QLookup", elems=I8Q)
def _lookup(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def b(rng: np.random.Generator) -> Variant:
        x, table = _q(rng, (3, 5, 7)), _q(rng, (256,))
        return Variant([x, table], {}, [_t(x, 0.05, 4), _t(table, 0.125, -3)], consts=(1,))

    return {"odd": b}
