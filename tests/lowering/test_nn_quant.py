"""Lowering of the quantization kinds: primitives-only interpreter vs interpreter (bit-exact).

QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked; every
precision), DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul
and QLinearConv. Integer results must be equal, not close.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.ir.types import ElemKind
from tests.lowering.test_reduce import BF16, F16, F32, I8, I32, U8, check_lowering, rand

E = ElemKind
I16, U16 = np.dtype(np.int16), np.dtype(np.uint16)
Q_OUT: dict[ElemKind, np.dtype] = {E.INT8: I8, E.UINT8: U8, E.INT16: I16, E.UINT16: U16}


def _granular_operands(shape: tuple[int, ...], gran: str, sdtype: np.dtype,
                       zdtype: np.dtype | None) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:
    """(scale, zero point, granularity attributes) for an input of ``shape``."""
    sshape: tuple[int, ...]
    if gran == "tensor":
        sshape, attrs = (), {"axis": 0, "block_size": 0}
    elif gran == "tensor1":
        sshape, attrs = (1,), {"axis": 0, "block_size": 0}
    elif gran == "axis":
        sshape, attrs = (shape[1],), {"axis": 1, "block_size": 0}
    else:  # blocked along axis 2 by 2 (the last block short)
        sshape = shape[:2] + (-(-shape[2] // 2),)
        attrs = {"axis": 2, "block_size": 2}
    scale = rand(sshape, sdtype, 0.01, 0.2, seed=7)
    zp = None if zdtype is None else rand(sshape, zdtype, -20 if zdtype.kind == "i" else 0, 20, seed=8)
    return scale, zp, attrs


GRANULARITIES = ["tensor", "tensor1", "axis", "blocked"]


@pytest.mark.parametrize("gran", GRANULARITIES)
@pytest.mark.parametrize("out", [E.INT8, E.UINT8, E.INT16, E.UINT16], ids=str)
@pytest.mark.parametrize("xdtype,prec", [(F32, E.FLOAT32), (F16, E.FLOAT16), (BF16, E.BFLOAT16), (F16, E.FLOAT32),
                                         (I32, E.FLOAT32), (BF16, E.FLOAT16)], ids=str)
def test_quantize(xdtype: np.dtype, prec: ElemKind, out: ElemKind, gran: str) -> None:
    shape = (2, 3, 5)
    x = rand(shape, xdtype, -40, 40) if xdtype.kind == "i" else rand(shape, xdtype, -3, 3)
    if xdtype.kind == "f":
        x[0, 0, :4] = [np.nan, np.inf, -np.inf, 0.5]  # NaN -> zero point; infinities saturate
    x[1, 1, 0] = 1000 if xdtype.kind == "i" else 30  # saturates
    for with_zp in (True, False):
        scale, zp, attrs = _granular_operands(shape, gran, F32 if prec == E.FLOAT32 else prec.dtype,
                                              Q_OUT[out] if with_zp else None)
        if not with_zp and out != E.UINT8:
            continue  # without a zero point the result is uint8
        check_lowering("QuantizeLinear", [x, scale, zp], {**attrs, "elem": out, "precision": prec})


def test_quantize_ties_round_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5], np.float32)
    got = check_lowering("QuantizeLinear", [x, np.array(1.0, np.float32), np.array(0, np.int8)],
                         {"axis": 0, "block_size": 0, "elem": E.INT8, "precision": E.FLOAT32})[0]
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, -2, 4])


@pytest.mark.parametrize("gran", GRANULARITIES)
@pytest.mark.parametrize("xdtype", [I8, U8, I16, U16, I32], ids=str)
@pytest.mark.parametrize("out", [E.FLOAT32, E.FLOAT16, E.BFLOAT16], ids=str)
def test_dequantize(out: ElemKind, xdtype: np.dtype, gran: str) -> None:
    shape = (2, 3, 5)
    info = np.iinfo(xdtype)
    x = rand(shape, xdtype, max(info.min, -1000), min(info.max, 1000))
    x.flat[0], x.flat[1] = info.min, info.max
    for with_zp in (True, False):
        scale, zp, attrs = _granular_operands(shape, gran, out.dtype, xdtype if with_zp else None)
        check_lowering("DequantizeLinear", [x, scale, zp], {**attrs, "elem": out})


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "inf", "nan", "empty", "scalar"])
def test_dynamic_quantize(case: str) -> None:
    x = {
        "mixed": rand((3, 4), F32, -2, 5),
        "positive": rand((2, 3, 4), F32, 0.5, 3),
        "negative": rand((5,), F32, -4, -1),
        "zeros": np.zeros((2, 3), np.float32),
        "inf": np.array([1.0, np.inf, -2.0], np.float32),
        "nan": np.array([1.0, np.nan, -2.0], np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(-1.5, np.float32),
    }[case]
    check_lowering("DynamicQuantizeLinear", [x], {})


# -- integer products ------------------------------------------------------------------------------------

def _q8(shape: tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    return rand(shape, dtype, -128 if dtype == I8 else 0, 127 if dtype == I8 else 255, seed)


MATMUL_SHAPES = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((2, 1, 3, 4), (3, 4, 2))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("adt,bdt", [(U8, U8), (I8, I8), (U8, I8), (I8, U8)], ids=str)
def test_matmul_integer(adt: np.dtype, bdt: np.dtype, shapes: tuple[tuple[int, ...], ...]) -> None:
    sa, sb = shapes
    a, w = _q8(sa, adt, 1), _q8(sb, bdt, 2)
    zps: list[tuple[np.ndarray | None, np.ndarray | None]] = [
        (None, None), (_q8((), adt, 3), _q8((), bdt, 4)), (_q8((1,), adt, 3), None)]
    if len(sa) >= 2:
        zps.append((_q8((sa[-2],), adt, 5), None))  # per row of A
    if len(sb) >= 2:
        zps.append((None, _q8((sb[-1],), bdt, 6)))  # per column of B
        zps.append((None, _q8((1,) * (len(sb) - 1) + (sb[-1],), bdt, 6)))  # N-D, broadcast
    for az, bz in zps:
        check_lowering("MatMulInteger", [a, w, az, bz], {})


def test_matmul_integer_wraps_to_int32() -> None:
    k = 70000  # 255 * 255 * 70000 > 2**31
    a = np.full((1, k), 255, np.uint8)
    w = np.full((k, 1), 255, np.uint8)
    got = check_lowering("MatMulInteger", [a, w, None, None], {})[0]
    assert got[0, 0] == np.int64(255 * 255 * k).astype(np.int32)


CONV_CASES = [
    # (input spatial, kernel, strides, dilations, pads, group)
    ((5,), (3,), (1,), (1,), (1, 1), 1),
    ((5, 6), (3, 2), (2, 1), (1, 2), (1, 0, 1, 1), 1),
    ((4, 4), (2, 2), (1, 1), (1, 1), (0, 0, 0, 0), 2),
    ((3, 4, 3), (2, 2, 2), (1, 2, 1), (1, 1, 1), (1, 0, 1, 0, 1, 0), 1),
]


def _conv_attrs(case: tuple[Any, ...]) -> dict[str, Any]:
    _, _, s, d, p, g = case
    return {"strides": s, "dilations": d, "pads": p, "group": g}


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[0])}d-g{c[5]}")
@pytest.mark.parametrize("xdt,wdt", [(U8, U8), (I8, I8), (U8, I8)], ids=str)
def test_conv_integer(xdt: np.dtype, wdt: np.dtype, case: tuple[Any, ...]) -> None:
    sp, k, *_, g = case
    x, w = _q8((2, 2 * g) + sp, xdt, 1), _q8((3 * g, 2) + k, wdt, 2)
    for xz, wz in ((None, None), (_q8((), xdt, 3), _q8((), wdt, 4)), (_q8((1,), xdt, 3), _q8((3 * g,), wdt, 5))):
        check_lowering("ConvInteger", [x, w, xz, wz], _conv_attrs(case))


def _scale(shape: tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    return rand(shape, dtype, 0.001, 0.05, seed)


@pytest.mark.parametrize("shapes", MATMUL_SHAPES[:3], ids=str)
@pytest.mark.parametrize("sdtype", [F32, F16, BF16], ids=str)
@pytest.mark.parametrize("adt,bdt,ydt", [(U8, U8, U8), (I8, I8, I8), (U8, I8, I8), (I8, U8, U8)], ids=str)
def test_qlinear_matmul(adt: np.dtype, bdt: np.dtype, ydt: np.dtype, sdtype: np.dtype,
                        shapes: tuple[tuple[int, ...], ...]) -> None:
    sa, sb = shapes
    a, w = _q8(sa, adt, 1), _q8(sb, bdt, 2)
    grans: list[tuple[tuple[int, ...], tuple[int, ...]]] = [((), ())]
    if len(sa) == 2:
        grans.append(((sa[0],), (sb[-1],)))  # per row of A, per column of B
    for ga, gb in grans:
        ops = [a, _scale(ga, sdtype, 3), _q8(ga, adt, 4), w, _scale(gb, sdtype, 5), _q8(gb, bdt, 6),
               _scale((), sdtype, 7) * 20, _q8((), ydt, 8)]
        check_lowering("QLinearMatMul", ops, {})


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[0])}d-g{c[5]}")
@pytest.mark.parametrize("sdtype", [F32, F16], ids=str)
@pytest.mark.parametrize("xdt,wdt,ydt", [(U8, U8, U8), (I8, I8, I8), (U8, I8, U8)], ids=str)
def test_qlinear_conv(xdt: np.dtype, wdt: np.dtype, ydt: np.dtype, sdtype: np.dtype, case: tuple[Any, ...]) -> None:
    sp, k, *_, g = case
    m = 3 * g
    x, w = _q8((2, 2 * g) + sp, xdt, 1), _q8((m, 2) + k, wdt, 2)
    for per_channel in (False, True):
        wshape = (m,) if per_channel else ()
        for bias in (None, rand((m,), I32, -5000, 5000, seed=9)):
            ops = [x, _scale((), sdtype, 3), _q8((), xdt, 4), w, _scale(wshape, sdtype, 5), _q8(wshape, wdt, 6),
                   _scale((), sdtype, 7) * 20, _q8((), ydt, 8), bias]
            check_lowering("QLinearConv", ops, _conv_attrs(case))
