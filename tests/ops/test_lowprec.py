"""float8 / float4e2m1 / int4 / int2 element kinds: Cast, QuantizeLinear and DequantizeLinear, import.

Expected values come from a small model of the formats written here from their
definitions (sign, exponent field, mantissa; round to nearest, ties to even
code; overflow per ``saturate``), independent of ml_dtypes, and from hand-written
tables; the ONNX reference implementation (``onnx.reference``, which decides
where onnxruntime differs) is checked to agree with that model. Every result is
compared bit for bit on the interpreter and on the cpu backend.
"""

from __future__ import annotations

import bisect
import functools
import math
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import ModelError
from glow_core.ir.types import ElemKind
from tests.ops.oputil import run_reference

E = ElemKind
BACKENDS = ("interpreter", "cpu")
#: kind -> (exponent bits, mantissa bits, bias, specials): "fn" NaN is S.1..1.1..1, no inf;
#: "fnuz" NaN is 0x80, no inf, no -0; "ieee" inf and NaN; "none" neither (float4e2m1)
FORMATS = {
    E.FLOAT8E4M3FN: (4, 3, 7, "fn"),
    E.FLOAT8E4M3FNUZ: (4, 3, 8, "fnuz"),
    E.FLOAT8E5M2: (5, 2, 15, "ieee"),
    E.FLOAT8E5M2FNUZ: (5, 2, 16, "fnuz"),
    E.FLOAT4E2M1: (2, 1, 1, "none"),
}
ONNX_TYPE = {
    E.FLOAT8E4M3FN: TensorProto.FLOAT8E4M3FN, E.FLOAT8E4M3FNUZ: TensorProto.FLOAT8E4M3FNUZ,
    E.FLOAT8E5M2: TensorProto.FLOAT8E5M2, E.FLOAT8E5M2FNUZ: TensorProto.FLOAT8E5M2FNUZ,
    E.FLOAT4E2M1: TensorProto.FLOAT4E2M1, E.INT4: TensorProto.INT4, E.UINT4: TensorProto.UINT4,
    E.INT2: TensorProto.INT2, E.UINT2: TensorProto.UINT2,
}


# -- the formats, from their definitions ------------------------------------------------------------

def decode(kind: ElemKind, code: int) -> float:
    e, m, bias, specials = FORMATS[kind]
    sign = (code >> (e + m)) & 1
    field, mant = (code >> m) & ((1 << e) - 1), code & ((1 << m) - 1)
    top = (1 << e) - 1
    if (specials == "fn" and field == top and mant == (1 << m) - 1) or (specials == "fnuz" and code == 1 << (e + m)):
        return math.nan
    if specials == "ieee" and field == top:
        return math.copysign(math.inf, -1.0 if sign else 1.0) if mant == 0 else math.nan
    v = mant * 2.0 ** (1 - bias - m) if field == 0 else (1 + mant / 2 ** m) * 2.0 ** (field - bias)
    return -v if sign else v


@functools.lru_cache(maxsize=None)
def finite_table(kind: ElemKind) -> list[tuple[float, int]]:
    """(value, code) of the non-negative finite codes, ascending."""
    e, m, _, _ = FORMATS[kind]
    vals = [(decode(kind, c), c) for c in range(1 << (e + m))]
    return sorted((v, c) for v, c in vals if math.isfinite(v))


def encode(kind: ElemKind, x: float, saturate: bool) -> int:
    """The code ONNX Cast gives ``x`` (a float32 value)."""
    e, m, _, specials = FORMATS[kind]
    s = 1 if math.copysign(1.0, x) < 0 else 0
    sbit = s << (e + m)
    if math.isnan(x):
        return {"fn": (1 << (e + m)) - 1 | sbit, "ieee": (((1 << e) - 1) << m) | (1 << (m - 1)) | sbit,
                "fnuz": 1 << (e + m), "none": (1 - s) << (e + m)}[specials]
    table = finite_table(kind)
    a, (vmax, cmax) = abs(x), table[-1]
    if a > vmax:
        mid = vmax + (vmax - table[-2][0]) / 2
        if saturate or specials == "none" or a < mid or (a == mid and cmax % 2 == 0):
            mag = cmax
        else:
            return {"fn": (1 << (e + m)) - 1 | sbit, "fnuz": 1 << (e + m),
                    "ieee": (((1 << e) - 1) << m) | sbit}[specials]
    else:
        lo = bisect.bisect_right(table, (a, 1 << 9)) - 1
        if table[lo][0] == a or lo == len(table) - 1:
            mag = table[lo][1]
        else:
            (v0, c0), (v1, c1) = table[lo], table[lo + 1]
            d0, d1 = a - v0, v1 - a
            mag = c0 if d0 < d1 or (d0 == d1 and c0 % 2 == 0) else c1
    if specials == "fnuz" and mag == 0:
        return 0
    return mag | sbit


# -- running -----------------------------------------------------------------------------------------

def _type_of(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def cast_model(x: np.ndarray, to: int, **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _type_of(x), x.shape)],
                          [helper.make_tensor_value_info("y", to, x.shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> np.ndarray:
    out = glow_core.compile(model, backend).run(feeds)
    return out[model.graph.output[0].name]


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


def all_float16() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16)


SPECIAL_F32 = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17e-38, 3.4e38, -3.4e38, 1e6, -1e6,
     448.0, 449.0, 464.0, 465.0, 470.0, 480.0, 240.0, 247.9, 248.0, 250.0, 57344.0, 61439.0, 61440.0, 65536.0,
     6.0, 6.5, 7.0, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 3 * 2.0 ** -18, 2.0 ** -18,
     1.0625, 1.1875, -1.0625, 0.25, 0.75, 2.5, 3.5, 5.0, -0.1, 0.48, 1.05],
    dtype=np.float32)


def test_model_agrees_with_onnx_reference() -> None:
    """The format model above is what onnx.reference computes (it decides the semantics)."""
    x = np.concatenate([SPECIAL_F32, all_float16()[::37].astype(np.float32)])
    for kind in FORMATS:
        for sat in (0, 1):
            (got,) = run_reference(cast_model(x, ONNX_TYPE[kind], saturate=sat), {"x": x})
            want = np.array([encode(kind, float(v), bool(sat)) for v in x], dtype=np.uint8)
            np.testing.assert_array_equal(bits(got), want, err_msg=f"{kind.value} saturate={sat}")


# hand-written: (kind, input, code with saturate=1, code with saturate=0)
EXACT = [
    (E.FLOAT8E4M3FN, 448.0, 0x7E, 0x7E), (E.FLOAT8E4M3FN, 464.0, 0x7E, 0x7E),  # tie: to even 0x7E
    (E.FLOAT8E4M3FN, 470.0, 0x7E, 0x7F), (E.FLOAT8E4M3FN, np.inf, 0x7E, 0x7F), (E.FLOAT8E4M3FN, -np.inf, 0xFE, 0xFF),
    (E.FLOAT8E4M3FN, np.nan, 0x7F, 0x7F), (E.FLOAT8E4M3FN, -0.0, 0x80, 0x80),
    (E.FLOAT8E4M3FN, 2.0 ** -9, 0x01, 0x01), (E.FLOAT8E4M3FN, 2.0 ** -10, 0x00, 0x00),  # min subnormal; tie to 0
    (E.FLOAT8E4M3FN, 3 * 2.0 ** -10, 0x02, 0x02), (E.FLOAT8E4M3FN, 1.0625, 0x38, 0x38),  # ties to even
    (E.FLOAT8E4M3FN, 1.1875, 0x3A, 0x3A), (E.FLOAT8E4M3FN, -1e-9, 0x80, 0x80),
    (E.FLOAT8E4M3FNUZ, 240.0, 0x7F, 0x7F), (E.FLOAT8E4M3FNUZ, 248.0, 0x7F, 0x80), (E.FLOAT8E4M3FNUZ, -0.0, 0, 0),
    (E.FLOAT8E4M3FNUZ, np.nan, 0x80, 0x80), (E.FLOAT8E4M3FNUZ, -np.inf, 0xFF, 0x80),
    (E.FLOAT8E4M3FNUZ, 2.0 ** -10, 0x01, 0x01), (E.FLOAT8E4M3FNUZ, -1e-9, 0x00, 0x00),
    (E.FLOAT8E5M2, 57344.0, 0x7B, 0x7B), (E.FLOAT8E5M2, 61440.0, 0x7B, 0x7C), (E.FLOAT8E5M2, np.inf, 0x7B, 0x7C),
    (E.FLOAT8E5M2, -np.inf, 0xFB, 0xFC), (E.FLOAT8E5M2, np.nan, 0x7E, 0x7E), (E.FLOAT8E5M2, 2.0 ** -16, 0x01, 0x01),
    (E.FLOAT8E5M2, -(2.0 ** -17), 0x80, 0x80), (E.FLOAT8E5M2, 3 * 2.0 ** -17, 0x02, 0x02),
    (E.FLOAT8E5M2FNUZ, 2.0 ** -17, 0x01, 0x01), (E.FLOAT8E5M2FNUZ, np.inf, 0x7F, 0x80),
    (E.FLOAT8E5M2FNUZ, 57344.0, 0x7F, 0x7F), (E.FLOAT8E5M2FNUZ, np.nan, 0x80, 0x80),
    (E.FLOAT4E2M1, 0.25, 0x0, 0x0), (E.FLOAT4E2M1, 0.75, 0x2, 0x2), (E.FLOAT4E2M1, 5.0, 0x6, 0x6),
    (E.FLOAT4E2M1, 7.0, 0x7, 0x7), (E.FLOAT4E2M1, -np.inf, 0xF, 0xF), (E.FLOAT4E2M1, np.nan, 0x8, 0x8),
    (E.FLOAT4E2M1, -0.1, 0x8, 0x8), (E.FLOAT4E2M1, 1.5, 0x3, 0x3),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_float_encodings(backend: str) -> None:
    for kind in FORMATS:
        rows = [r for r in EXACT if r[0] is kind]
        x = np.array([r[1] for r in rows], dtype=np.float32)
        for sat, col in ((1, 2), (0, 3)):
            want = np.array([r[col] for r in rows], dtype=np.uint8)
            np.testing.assert_array_equal(
                bits(run(cast_model(x, ONNX_TYPE[kind], saturate=sat), {"x": x}, backend)), want,
                err_msg=f"{backend} {kind.value} saturate={sat} of {x}")
            # the table agrees with the format model
            np.testing.assert_array_equal([encode(kind, float(v), bool(sat)) for v in x], want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(FORMATS), ids=lambda k: k.value)
def test_every_float16_to_small_float(backend: str, kind: ElemKind) -> None:
    """All 65,536 float16 values (subnormals, ties, inf, NaN) and float32 specials, both saturate modes."""
    x16 = all_float16()
    for sat in (0, 1):
        want = np.array([encode(kind, float(v), bool(sat)) for v in x16.astype(np.float32)], dtype=np.uint8)
        got = run(cast_model(x16, ONNX_TYPE[kind], saturate=sat), {"x": x16}, backend)
        np.testing.assert_array_equal(bits(got), want, err_msg=f"{backend} float16 -> {kind.value} sat={sat}")
        want32 = np.array([encode(kind, float(v), bool(sat)) for v in SPECIAL_F32], dtype=np.uint8)
        got32 = run(cast_model(SPECIAL_F32, ONNX_TYPE[kind], saturate=sat), {"x": SPECIAL_F32}, backend)
        np.testing.assert_array_equal(bits(got32), want32, err_msg=f"{backend} float32 -> {kind.value} sat={sat}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_and_int_sources_round_through_float32(backend: str) -> None:
    # 1 + 2^-4 + 2^-30 is above the tie 1.0625, but float32 drops 2^-30: onnx.reference (ml_dtypes) gives 1.0
    x64 = np.array([1 + 2.0 ** -4 + 2.0 ** -30, 1e300, -1e-300, 449.0], dtype=np.float64)
    got = run(cast_model(x64, TensorProto.FLOAT8E4M3FN, saturate=1), {"x": x64}, backend)
    np.testing.assert_array_equal(bits(got), [0x38, 0x7E, 0x80, 0x7E])
    (ref,) = run_reference(cast_model(x64, TensorProto.FLOAT8E4M3FN, saturate=1), {"x": x64})
    np.testing.assert_array_equal(bits(ref), [0x38, 0x7E, 0x80, 0x7E])
    xi = np.array([0, 1, -3, 17, 300, -100000, 2 ** 40], dtype=np.int64)
    for kind in FORMATS:
        for sat in (0, 1):
            want = [encode(kind, float(np.float32(v)), bool(sat)) for v in xi]
            got = run(cast_model(xi, ONNX_TYPE[kind], saturate=sat), {"x": xi}, backend)
            np.testing.assert_array_equal(bits(got), want, err_msg=f"{backend} int64 -> {kind.value} sat={sat}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(FORMATS), ids=lambda k: k.value)
def test_every_code_decodes(backend: str, kind: ElemKind) -> None:
    e, m, _, _ = FORMATS[kind]
    codes = np.arange(1 << (e + m), dtype=np.uint8).view(kind.dtype)
    want = np.array([decode(kind, c) for c in range(1 << (e + m))])
    for to, dt in ((TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64)):
        got = run(cast_model(codes, to), {"x": codes}, backend)
        assert got.dtype == dt
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(dt).astype(np.float64))
    # to an integer: truncation of the value (NaN converts as float32 NaN does: 0 for int8)
    got = run(cast_model(codes, TensorProto.INT8), {"x": codes}, backend)
    finite = np.isfinite(want) & (np.abs(want) < 128)
    np.testing.assert_array_equal(got[finite], np.trunc(want[finite]).astype(np.int8))


# -- 4- and 2-bit integers ---------------------------------------------------------------------------

SMALL_INTS = {E.INT4: (4, True), E.UINT4: (4, False), E.INT2: (2, True), E.UINT2: (2, False)}


def wrap(v: int, nbits: int, signed: bool) -> int:
    v &= (1 << nbits) - 1
    return v - (1 << nbits) if signed and v >= 1 << (nbits - 1) else v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(SMALL_INTS), ids=lambda k: k.value)
def test_small_int_casts(backend: str, kind: ElemKind) -> None:
    nbits, signed = SMALL_INTS[kind]
    xf = np.array([-9, -8, -2.7, -0.5, 0, 2.7, 3.99, 7, 8.5, 14, 100, 1e10], dtype=np.float32)
    want = [wrap(int(v), nbits, signed) for v in xf]  # truncation toward zero, then the low bits
    got = run(cast_model(xf, ONNX_TYPE[kind]), {"x": xf}, backend)
    assert got.dtype == kind.dtype
    np.testing.assert_array_equal(got.astype(np.int64), want)
    xi = np.array([-300, -9, -1, 0, 1, 5, 255, 2 ** 40 + 3], dtype=np.int64)
    got = run(cast_model(xi, ONNX_TYPE[kind]), {"x": xi}, backend)
    np.testing.assert_array_equal(got.astype(np.int64), [wrap(int(v), nbits, signed) for v in xi])
    # every value back to int8, float32 and float16
    vals = np.array([wrap(c, nbits, signed) for c in range(1 << nbits)])
    codes = vals.astype(kind.dtype)
    for to, dt in ((TensorProto.INT8, np.int8), (TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16),
                   (TensorProto.INT64, np.int64), (TensorProto.BOOL, np.bool_)):
        got = run(cast_model(codes, to), {"x": codes}, backend)
        np.testing.assert_array_equal(got, vals.astype(dt), err_msg=f"{backend} {kind.value} -> {np.dtype(dt)}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_int_to_small_int_and_float8(backend: str) -> None:
    x = np.array([-8, -1, 0, 3, 7], dtype=np.int8).astype(ml_dtypes.int4)
    np.testing.assert_array_equal(run(cast_model(x, TensorProto.UINT4), {"x": x}, backend).astype(np.int64),
                                  [8, 15, 0, 3, 7])
    np.testing.assert_array_equal(run(cast_model(x, TensorProto.INT2), {"x": x}, backend).astype(np.int64),
                                  [0, -1, 0, -1, -1])
    got = run(cast_model(x, TensorProto.FLOAT8E4M3FN), {"x": x}, backend)
    np.testing.assert_array_equal(bits(got), [encode(E.FLOAT8E4M3FN, float(v), True) for v in (-8, -1, 0, 3, 7)])


# -- quantization ------------------------------------------------------------------------------------

def qdq_model(op: str, ins: dict[str, np.ndarray], out_type: int, **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node(op, list(ins), ["y"], **attrs)
    shape = next(iter(ins.values())).shape
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, _type_of(a), a.shape) for n, a in ins.items()],
                          [helper.make_tensor_value_info("y", out_type, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_quantize_int4_saturates_and_rounds_half_even(backend: str) -> None:
    x = np.array([[0, 2.5, 3, 5, -30, 40], [1, -1, 6, -6, 100, -100]], dtype=np.float32)
    s = np.array([2, 4], dtype=np.float32)
    zp = np.array([1, -2], dtype=np.int8).astype(ml_dtypes.int4)
    m = qdq_model("QuantizeLinear", {"x": x, "s": s, "zp": zp}, TensorProto.INT4, axis=0)
    # row 0: rint(x / 2) + 1 = [1, 2, 3, 3, -14, 21] -> clip [-8, 7]; row 1: rint(x / 4) - 2
    want = [[1, 2, 3, 3, -8, 7], [-2, -2, -0, -4, 7, -8]]
    np.testing.assert_array_equal(run(m, {"x": x, "s": s, "zp": zp}, backend).astype(np.int64), want)
    (ref,) = run_reference(m, {"x": x, "s": s, "zp": zp})
    np.testing.assert_array_equal(ref.astype(np.int64), want)
    q = np.array([[-8, 7, 0], [1, -1, 3]], dtype=np.int8).astype(ml_dtypes.int4)
    m = qdq_model("DequantizeLinear", {"q": q, "s": s, "zp": zp}, TensorProto.FLOAT, axis=0)
    np.testing.assert_array_equal(run(m, {"q": q, "s": s, "zp": zp}, backend),
                                  [[-18, 12, -2], [12, 4, 20]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_quantize_float8_and_float4(backend: str) -> None:
    x = np.array([0, 1, 2, 1e5, 200, -1e6, np.nan], dtype=np.float32)
    s = np.array(2, dtype=np.float32)
    for kind, sat in ((E.FLOAT8E4M3FN, 1), (E.FLOAT8E4M3FN, 0), (E.FLOAT8E5M2, 0), (E.FLOAT8E5M2FNUZ, 1)):
        zp = np.zeros(1, dtype=kind.dtype)
        m = qdq_model("QuantizeLinear", {"x": x, "s": s, "zp": zp}, ONNX_TYPE[kind], saturate=sat)
        want = [encode(kind, float(np.float32(v / 2)), bool(sat)) for v in x]
        np.testing.assert_array_equal(bits(run(m, {"x": x, "s": s, "zp": zp}, backend)), want)
        (ref,) = run_reference(m, {"x": x, "s": s, "zp": zp})
        np.testing.assert_array_equal(bits(ref), want)
    # float4e2m1: the zero point is added (onnx.reference), then the Cast saturates
    x4 = np.array([[0, 2.5, 4.8, 8.6], [-30, -20, 6, 9]], dtype=np.float32)
    s4 = np.array([2, 3], dtype=np.float32)
    zp4 = np.array([0, 1], dtype=np.float32).astype(ml_dtypes.float4_e2m1fn)
    m = qdq_model("QuantizeLinear", {"x": x4, "s": s4, "zp": zp4}, TensorProto.FLOAT4E2M1, axis=0)
    want = [[encode(E.FLOAT4E2M1, float(np.float32(v / d) + z), True) for v in row]
            for row, d, z in zip(x4, (2, 3), (0, 1))]
    np.testing.assert_array_equal(bits(run(m, {"x": x4, "s": s4, "zp": zp4}, backend)), want)
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    m = qdq_model("DequantizeLinear", {"q": codes, "s": s}, TensorProto.FLOAT)
    want = np.array([decode(E.FLOAT8E5M2, c) for c in range(256)], dtype=np.float32) * 2
    np.testing.assert_array_equal(run(m, {"q": codes, "s": s}, backend), want)


# -- ONNX files: int4 / int2 packed two / four per byte ------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "int32_data"])
def test_packed_initializers_import(backend: str, raw: bool) -> None:
    vals = {E.INT4: [-8, 7, -1, 0, 3], E.UINT4: [15, 0, 9, 1, 2, 3, 4], E.INT2: [-2, 1, -1, 0, 1], E.UINT2: [3, 0, 2]}
    for kind, v in vals.items():
        t = helper.make_tensor("w", ONNX_TYPE[kind], [len(v)], v, raw=False)
        if raw:
            t = numpy_helper.from_array(np.array(v, dtype=kind.dtype), "w")
            assert t.raw_data and len(t.raw_data) == -(-len(v) * SMALL_INTS[kind][0] // 8)  # packed
        else:
            assert len(t.int32_data) == -(-len(v) * SMALL_INTS[kind][0] // 8)
        node = helper.make_node("Cast", ["w"], ["y"], to=TensorProto.INT8)
        g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.INT8, [len(v)])], [t])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
        np.testing.assert_array_equal(run(m, {}, backend), v, err_msg=f"{kind.value} raw={raw}")


def test_low_precision_kinds_are_declared() -> None:
    for kind, name in ((E.FLOAT8E4M3FN, "float8_e4m3fn"), (E.INT4, "int4"), (E.FLOAT4E2M1, "float4_e2m1fn")):
        assert kind.dtype.name == name and kind.itemsize == 1
        assert E.from_dtype(kind.dtype) is kind
        assert kind.is_low_precision and not kind.is_float and not kind.is_int


# -- data movement -----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", [E.FLOAT8E4M3FN, E.FLOAT8E5M2FNUZ, E.FLOAT4E2M1, E.INT4, E.UINT2],
                         ids=lambda k: k.value)
def test_data_movement_keeps_every_code(backend: str, kind: ElemKind) -> None:
    n = 1 << (8 if kind in (E.FLOAT8E4M3FN, E.FLOAT8E5M2FNUZ) else 4 if kind in (E.FLOAT4E2M1, E.INT4) else 2)
    codes = (np.arange(4 * 6 * 5) % n).astype(np.uint8)
    if kind in (E.INT4,):
        x = np.where(codes >= 8, codes.astype(np.int16) - 16, codes).astype(np.int8).astype(kind.dtype)
    elif kind is E.UINT2:
        x = codes.astype(kind.dtype)
    else:
        x = codes.view(kind.dtype)
    x = x.reshape(4, 6, 5)
    t = ONNX_TYPE[kind]
    # the ops whose opset-25 schema takes these types (Slice, Gather and Concat do not: tested below)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Unsqueeze", ["t", "ax"], ["u"]),
        helper.make_node("Flatten", ["u"], ["f"], axis=2),
        helper.make_node("Reshape", ["f", "shape"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), name) for name, v in
             (("ax", [1]), ("shape", [-1]))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", t, x.shape)],
                          [helper.make_tensor_value_info("y", t, [x.size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    want = x.transpose(2, 0, 1).reshape(-1)
    got = run(m, {"x": x}, backend)
    assert got.dtype == kind.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# -- float8e8m0 (a power of two) ---------------------------------------------------------------------

def encode_e8m0(x: float, saturate: bool, mode: str) -> int:
    """The exponent of |x| (float32), rounded by ``mode``; written from the definition with frexp."""
    a = abs(x)
    if not math.isfinite(a):
        return 0xFF
    if a == 0:
        return 0
    frac_part, e = math.frexp(a)  # a = f * 2^e, f in [0.5, 1)
    if e - 1 < -126:  # below the normal range: the field is 0, the fraction counts in units of 2^-126
        field, frac = 0, a / 2.0 ** -126
        up = {"up": frac > 0, "down": False, "nearest": frac > 0.5}[mode]
    else:
        field, frac = e - 1 + 127, frac_part * 2 - 1
        up = {"up": frac > 0, "down": False, "nearest": frac >= 0.5}[mode]
    if saturate and field == 0xFE:
        up = False
    return field + int(up)


@pytest.mark.parametrize("backend", BACKENDS)
def test_e8m0_encodings(backend: str) -> None:
    x = np.concatenate([SPECIAL_F32, all_float16()[::7].astype(np.float32),
                        np.array([3.0 * 2.0 ** 126, 2.0 ** 127, 1.5 * 2 ** -127, 2.0 ** -127, 1.25 * 2 ** -127],
                                 dtype=np.float32)])
    for mode in ("up", "down", "nearest"):
        for sat in (0, 1):
            want = np.array([encode_e8m0(float(v), bool(sat), mode) for v in x], dtype=np.uint8)
            m = cast_model(x, TensorProto.FLOAT8E8M0, saturate=sat, round_mode=mode)
            (ref,) = run_reference(m, {"x": x})
            np.testing.assert_array_equal(bits(ref), want, err_msg=f"onnx.reference {mode} sat={sat}")
            np.testing.assert_array_equal(bits(run(m, {"x": x}, backend)), want, err_msg=f"{backend} {mode} sat={sat}")
    # hand-written: 1.1 -> 2 (up) / 1 (down, nearest); 1.5 -> 2 (nearest); 3 * 2^126 is 2^127 (0xFE) down and saturated
    y = np.array([1.1, 1.5, 0.0, -4.0, np.inf, 3.0 * 2.0 ** 126], dtype=np.float32)
    for mode, want in (("up", [128, 128, 0, 129, 255, 254]), ("down", [127, 127, 0, 129, 255, 254]),
                       ("nearest", [127, 128, 0, 129, 255, 254])):
        got = run(cast_model(y, TensorProto.FLOAT8E8M0, round_mode=mode), {"x": y}, backend)
        np.testing.assert_array_equal(bits(got), want, err_msg=f"{backend} {mode}")
    codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    got = run(cast_model(codes, TensorProto.FLOAT), {"x": codes}, backend)
    want_f = np.array([2.0 ** (c - 127) for c in range(255)] + [np.nan], dtype=np.float32)
    np.testing.assert_array_equal(got, want_f)


# -- bad input ---------------------------------------------------------------------------------------

def test_bad_cast_attributes_and_truncated_packed_data_are_clear_errors() -> None:
    from glow_core.errors import GlowError

    x = np.ones((3,), np.float32)
    with pytest.raises(GlowError, match="saturate.*must be 0 or 1"):
        glow_core.compile(cast_model(x, TensorProto.FLOAT8E4M3FN, saturate=2), "interpreter")
    with pytest.raises(GlowError, match="round_mode"):
        glow_core.compile(cast_model(x, TensorProto.FLOAT8E8M0, round_mode="sideways"), "interpreter")
    # 5 int4 values need 3 packed bytes; 2 is a damaged file
    t = onnx.TensorProto(name="w", data_type=TensorProto.INT4, dims=[5], raw_data=b"\x12\x34")
    node = helper.make_node("Cast", ["w"], ["y"], to=TensorProto.INT8)
    g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.INT8, [5])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    with pytest.raises(GlowError, match="raw_data size"):
        glow_core.compile(m, "interpreter")


@pytest.mark.parametrize("backend", BACKENDS)
def test_blocked_float8_quantization_matches_onnx_reference(backend: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-500, 500, (2, 5, 3)).astype(np.float32)
    s = rng.uniform(0.5, 2, (2, 3, 3)).astype(np.float32)  # blocks of 2 along axis 1 (the last one short)
    zp = np.zeros((2, 3, 3), dtype=ml_dtypes.float8_e4m3fn)
    m = qdq_model("QuantizeLinear", {"x": x, "s": s, "zp": zp}, TensorProto.FLOAT8E4M3FN, axis=1, block_size=2)
    (q,) = run_reference(m, {"x": x, "s": s, "zp": zp})
    np.testing.assert_array_equal(bits(run(m, {"x": x, "s": s, "zp": zp}, backend)), bits(q))
    scale = np.repeat(s, 2, axis=1)[:, :5]
    want = np.array([encode(E.FLOAT8E4M3FN, float(v), True) for v in (x / scale).reshape(-1)], dtype=np.uint8)
    np.testing.assert_array_equal(bits(q).reshape(-1), want)
    m = qdq_model("DequantizeLinear", {"q": q, "s": s}, TensorProto.FLOAT, axis=1, block_size=2)
    got = run(m, {"q": q, "s": s}, backend)
    np.testing.assert_array_equal(got, q.astype(np.float32) * scale)


def test_slice_of_a_type_its_schema_does_not_take_is_an_invalid_model() -> None:
    """Slice's opset-25 schema has no int4: such a model breaks the op's definition (ModelError naming the op,
    the type and the opset), it is not one glow runs anyway."""
    x = np.zeros((4,), E.INT4.dtype)
    nodes = [helper.make_node("Slice", ["x", "st", "en"], ["y"], name="s")]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "st"), numpy_helper.from_array(np.array([3], np.int64), "en")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", ONNX_TYPE[E.INT4], x.shape)],
                          [helper.make_tensor_value_info("y", ONNX_TYPE[E.INT4], [2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    with pytest.raises(ModelError, match=r"'s' \(Slice, opset 25\).*int4, which Slice does not accept at opset 25"):
        run(m, {"x": x}, "interpreter")
