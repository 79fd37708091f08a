"""The typed quantized kinds: exact integers by hand, against an independent numpy reference, and lowered.

Every kind of ``glow_core.ir.defs.quant`` is checked three ways:

- small cases whose integers are computed by hand (round half to even, saturation);
- random cases against the reference written below (loops / plain numpy, not the kernels' code);
- the same graph run typed on the interpreter and lowered onto QuantizeLinear / QLinearConv /
  float32 arithmetic (``lower_quantized``): the results must be equal bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.errors import GlowTypeError
from glow_core.ir.graph import Function
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import ElemKind, TensorType
from glow_core.quantization.qlower import lower_quantized
from glow_core.reference import run_kernel
from glow_tools.testing import run_function

E = ElemKind
F32 = np.float32


def q8(shape: tuple[int, ...], scale: float, offset: int, elem: ElemKind = E.INT8Q) -> TensorType:
    return TensorType(elem, shape, scale, offset)


def kern(kind: str, inputs: list[np.ndarray | None], in_types: list[TensorType | None], **attrs: Any) -> np.ndarray:
    spec = get_kind(kind)
    norm = spec.normalize_attrs(attrs, kind)
    out = spec.infer(in_types, norm)
    return run_kernel(kind, norm, inputs, out, kind)[0]


# -- hand-computed ---------------------------------------------------------------------------------------

def test_quantize_by_hand() -> None:
    x = np.array([-1.0, 0.0, 0.25, 0.5, 100.0, np.nan, 0.75], F32)
    y = kern("Quantize", [x], [TensorType(E.FLOAT32, (7,))], elem=E.INT8Q, scale=0.5, offset=-3)
    # -1/0.5=-2 -> -5; 0 -> -3; 0.5 rounds to 0 (even) -> -3; 1 -> -2; 200 saturates; NaN -> offset; 1.5 -> 2 -> -1
    assert y.tolist() == [-5, -3, -3, -2, 127, -3, -1]


def test_dequantize_by_hand() -> None:
    y = kern("Dequantize", [np.array([-128, 0, 5], np.int8)], [q8((3,), 0.5, 2)], in_params=(0.5, 2))
    assert y.dtype == F32 and y.tolist() == [-65.0, -1.0, 1.5]


def test_rescale_by_hand() -> None:
    x = np.array([10, 11, -128, 127, 13], np.int8)
    y = kern("Rescale", [x], [q8((5,), 0.5, 0)], in_params=(0.5, 0), elem=E.INT8Q, scale=1.0, offset=0)
    assert y.tolist() == [5, 6, -64, 64, 6]  # 5.5 -> 6, 63.5 -> 64, 6.5 -> 6 (half to even)
    u = kern("Rescale", [x], [q8((5,), 0.5, 0)], in_params=(0.5, 0), elem=E.UINT8Q, scale=0.25, offset=10)
    assert u.dtype == np.uint8 and u.tolist() == [30, 32, 0, 255, 36]  # -512 + 10 and 518 saturate


def test_qclip_by_hand() -> None:
    y = kern("QClip", [np.array([-10, -5, 0, 7], np.int8)], [q8((4,), 1.0, 0)], lo=-5, hi=3)
    assert y.tolist() == [-5, -5, 0, 3]


def test_qconv_by_hand() -> None:
    x = np.arange(1, 10, dtype=np.int8).reshape(1, 1, 3, 3)  # minus offset 1: [[0,1,2],[3,4,5],[6,7,8]]
    w = np.array([[1, -1], [2, 0]], np.int8).reshape(1, 1, 2, 2)
    y = kern("QConv", [x, w, np.array([0.5], F32), np.array([3], np.int32)],
             [q8(x.shape, 1.0, 1), TensorType(E.INT8, w.shape), TensorType(E.FLOAT32, (1,)),
              TensorType(E.INT32, (1,))],
             strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1, in_params=(1.0, 1), elem=E.INT8Q,
             scale=1.0, offset=0)
    # accumulators 5, 7, 11, 13; + bias 3 = 8, 10, 14, 16; * 0.5
    assert y.reshape(-1).tolist() == [4, 5, 7, 8]


def test_qmatmul_by_hand() -> None:
    a = np.array([[1, 2], [3, 4]], np.int8)  # minus offset 1: [[0, 1], [2, 3]]
    w = np.array([[1, 2], [3, 4]], np.int8)
    y = kern("QMatMul", [a, w, np.array([0.25, 0.5], F32), np.array([1, -1], np.int32)],
             [q8((2, 2), 2.0, 1), TensorType(E.INT8, (2, 2)), TensorType(E.FLOAT32, (2,)), TensorType(E.INT32, (2,))],
             in_params=(2.0, 1), elem=E.INT8Q, scale=1.0, offset=-1)
    # products [[3,4],[11,16]] + bias = [[4,3],[12,15]]; multipliers [0.5, 1.0]; offset -1
    assert y.tolist() == [[1, 2], [5, 14]]


def test_qadd_qmul_by_hand() -> None:
    ta, tb = q8((3,), 0.5, 0), q8((3,), 1.0, 2)
    a, b = np.array([10, 100, 1], np.int8), np.array([4, 4, 3], np.int8)
    s = kern("QAdd", [a, b], [ta, tb], in_params=(0.5, 0, 1.0, 2), elem=E.INT8Q, scale=0.25, offset=0)
    assert s.tolist() == [28, 127, 6]  # 20 + 8; 200 + 8 saturates; 2 + 4
    tb = q8((3,), 0.25, 1)
    p = kern("QMul", [np.array([6, 5, -7], np.int8), np.array([5, 3, 3], np.int8)], [ta, tb],
             in_params=(0.5, 0, 0.25, 1), elem=E.INT8Q, scale=0.5, offset=0)
    assert p.tolist() == [6, 2, -4]  # 24 * 0.25; 10 * 0.25 = 2.5 -> 2; -14 * 0.25 = -3.5 -> -4


def test_pools_by_hand() -> None:
    x = np.array([[1, 2], [3, 6]], np.int8).reshape(1, 1, 2, 2)
    pool = dict(kernel_shape=(2, 2), strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1))
    assert kern("QMaxPool", [x], [q8(x.shape, 1.0, 0)], **pool).reshape(-1).tolist() == [6]
    avg = kern("QAvgPool", [x], [q8(x.shape, 1.0, 0)], **pool, in_params=(1.0, 0), elem=E.INT8Q, scale=0.5, offset=1)
    assert avg.reshape(-1).tolist() == [7]  # mean 3 / 0.5 + 1
    x2 = np.array([[1, 2], [3, 4]], np.int8).reshape(1, 1, 2, 2)
    avg2 = kern("QAvgPool", [x2], [q8(x.shape, 1.0, 0)], **pool, in_params=(1.0, 0), elem=E.INT8Q, scale=1.0,
                offset=0)
    assert avg2.reshape(-1).tolist() == [2]  # 2.5 -> 2


def test_type_rules_refuse_mismatched_parameters() -> None:
    with pytest.raises(GlowTypeError, match="in_params"):
        kern("Dequantize", [np.zeros(2, np.int8)], [q8((2,), 0.5, 2)], in_params=(0.5, 3))
    with pytest.raises(GlowTypeError, match="offset"):
        kern("Quantize", [np.zeros(2, F32)], [TensorType(E.FLOAT32, (2,))], elem=E.INT8Q, scale=1.0, offset=200)
    with pytest.raises(GlowTypeError, match="scale"):
        kern("Quantize", [np.zeros(2, F32)], [TensorType(E.FLOAT32, (2,))], elem=E.INT8Q, scale=0.0, offset=0)
    with pytest.raises(GlowTypeError, match="quantized"):
        kern("QClip", [np.zeros(2, np.int8)], [TensorType(E.INT8, (2,))], lo=0, hi=1)


# -- an independent numpy reference ------------------------------------------------------------------------

def ref_requant(acc: np.ndarray, m: np.ndarray, offset: int, lo: int, hi: int) -> np.ndarray:
    """float32 product, round half to even (numpy.round), add the offset, saturate."""
    v = np.round(acc.astype(F32) * m.astype(F32)).astype(np.float64) + offset
    return np.minimum(np.maximum(v, lo), hi)


def ref_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, group: int) -> np.ndarray:
    """Direct loops over a padded int64 input (NCHW)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), np.int64)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for o in range(m):
        g = o // mg
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, o, i, j] = (patch * w[o].astype(np.int64)).sum(axis=(1, 2, 3))
    return out


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("seed", range(4))
def test_qconv_random_against_reference(seed: int) -> None:
    r = _rng(seed)
    group = 2 if seed % 2 else 1
    x = r.integers(-128, 128, (2, 4, 5, 6)).astype(np.int8)
    w = r.integers(-127, 128, (6, 4 // group, 3, 3)).astype(np.int8)
    ws = r.uniform(0.001, 0.02, 6).astype(F32)
    bias = r.integers(-5000, 5000, 6).astype(np.int32)
    s_in, o_in, s_out, o_out = 0.05, int(r.integers(-20, 20)), 0.8, int(r.integers(-10, 10))
    stride, pad = 1 + seed % 2, 1
    y = kern("QConv", [x, w, ws, bias], [q8(x.shape, s_in, o_in), TensorType(E.INT8, w.shape),
                                         TensorType(E.FLOAT32, (6,)), TensorType(E.INT32, (6,))],
             strides=(stride, stride), pads=(pad,) * 4, dilations=(1, 1), group=group, in_params=(s_in, o_in),
             elem=E.INT8Q, scale=s_out, offset=o_out)
    acc = ref_conv(x.astype(np.int64) - o_in, w, stride, pad, group) + bias.reshape(1, -1, 1, 1)
    m = (F32(s_in) * ws / F32(s_out)).reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(y, ref_requant(acc, m, o_out, -128, 127))


@pytest.mark.parametrize("seed", range(4))
def test_qmatmul_random_against_reference(seed: int) -> None:
    r = _rng(seed)
    a = r.integers(0, 256, (3, 4, 16)).astype(np.uint8)
    w = r.integers(-127, 128, (16, 5)).astype(np.int8)
    ws = r.uniform(0.001, 0.02, 5).astype(F32)
    bias = r.integers(-3000, 3000, 5).astype(np.int32)
    s_in, o_in, s_out, o_out = 0.03, 128, 0.2, int(r.integers(0, 255))
    y = kern("QMatMul", [a, w, ws, bias], [q8(a.shape, s_in, o_in, E.UINT8Q), TensorType(E.INT8, w.shape),
                                           TensorType(E.FLOAT32, (5,)), TensorType(E.INT32, (5,))],
             in_params=(s_in, o_in), elem=E.UINT8Q, scale=s_out, offset=o_out)
    acc = np.einsum("bik,kn->bin", a.astype(np.int64) - o_in, w.astype(np.int64)) + bias
    np.testing.assert_array_equal(y, ref_requant(acc, F32(s_in) * ws / F32(s_out), o_out, 0, 255))


@pytest.mark.parametrize("seed", range(4))
def test_elementwise_random_against_reference(seed: int) -> None:
    r = _rng(seed)
    a = r.integers(-128, 128, (4, 6)).astype(np.int8)
    b = r.integers(-128, 128, (1, 6)).astype(np.int8)
    sa, oa, sb, ob, so, oo = 0.05, int(r.integers(-5, 5)), 0.11, int(r.integers(-5, 5)), 0.13, int(r.integers(-9, 9))
    types = [q8(a.shape, sa, oa), q8(b.shape, sb, ob)]
    attrs = dict(in_params=(sa, oa, sb, ob), elem=E.INT8Q, scale=so, offset=oo)
    ca, cb = (a.astype(np.int64) - oa).astype(F32), (b.astype(np.int64) - ob).astype(F32)
    add = ca * (F32(sa) / F32(so)) + cb * (F32(sb) / F32(so))
    np.testing.assert_array_equal(kern("QAdd", [a, b], types, **attrs),
                                  np.clip(np.round(add).astype(np.float64) + oo, -128, 127))
    mul = (ca * cb) * (F32(sa) * F32(sb) / F32(so))
    np.testing.assert_array_equal(kern("QMul", [a, b], types, **attrs),
                                  np.clip(np.round(mul).astype(np.float64) + oo, -128, 127))
    res = kern("Rescale", [a], types[:1], in_params=(sa, oa), elem=E.UINT8Q, scale=so, offset=oo + 100)
    np.testing.assert_array_equal(res, np.clip(np.round(ca * (F32(sa) / F32(so))).astype(np.float64) + oo + 100,
                                               0, 255))
    x = (r.standard_normal((4, 6)) * 3).astype(F32)
    qx = kern("Quantize", [x], [TensorType(E.FLOAT32, x.shape)], elem=E.INT8Q, scale=0.05, offset=oa)
    np.testing.assert_array_equal(qx, np.clip(np.round(x / F32(0.05)).astype(np.float64) + oa, -128, 127))
    dq = kern("Dequantize", [a], types[:1], in_params=(sa, oa))
    np.testing.assert_array_equal(dq, ((a.astype(np.int64) - oa) * np.float64(F32(sa))).astype(F32))


@pytest.mark.parametrize("seed", range(3))
def test_pools_random_against_reference(seed: int) -> None:
    r = _rng(seed)
    x = r.integers(-128, 128, (1, 3, 6, 6)).astype(np.int8)
    s_in, o_in, s_out, o_out = 0.1, int(r.integers(-5, 5)), 0.07, int(r.integers(-5, 5))
    pool = dict(kernel_shape=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1))
    mx = kern("QMaxPool", [x], [q8(x.shape, s_in, o_in)], **pool)
    blocks = x.reshape(1, 3, 3, 2, 3, 2)
    np.testing.assert_array_equal(mx, blocks.max(axis=(3, 5)))
    avg = kern("QAvgPool", [x], [q8(x.shape, s_in, o_in)], **pool, in_params=(s_in, o_in), elem=E.INT8Q,
               scale=s_out, offset=o_out)
    sums = (blocks.astype(np.int64) - o_in).sum(axis=(3, 5))
    mean = (sums / 4.0).astype(F32)  # exact: quarters of small integers
    np.testing.assert_array_equal(avg, ref_requant(mean, np.asarray(F32(s_in) / F32(s_out)), o_out, -128, 127))


# -- typed on the interpreter == lowered onto the ONNX-style kinds ---------------------------------------

def _island(kind: str, seed: int) -> tuple[Function, dict[str, np.ndarray]]:
    """float input(s) -> Quantize -> ``kind`` -> Dequantize -> output; inputs are exact multiples of the scale."""
    r = _rng(seed)
    fn = Function("island")
    shape = (1, 4, 6, 6) if kind in ("QConv", "QMaxPool", "QAvgPool") else (3, 8)
    s_a, o_a = 0.05, int(r.integers(-10, 10))
    xa = fn.add_input("a", TensorType(E.FLOAT32, shape))
    ints = r.integers(-128, 128, shape)
    feeds = {"a": ((ints - o_a) * np.float64(F32(s_a))).astype(F32)}
    qa = fn.create("Quantize", [xa], {"elem": E.INT8Q, "scale": s_a, "offset": o_a}).outputs[0]
    out = {"elem": E.UINT8Q if seed % 2 else E.INT8Q, "scale": 0.09, "offset": 3}
    pin = (s_a, o_a)
    if kind == "QConv":
        w = fn.add_constant(r.integers(-127, 128, (5, 4, 3, 3)).astype(np.int8))
        ws = fn.add_constant(r.uniform(0.001, 0.01, 5).astype(F32))
        b = fn.add_constant(r.integers(-900, 900, 5).astype(np.int32))
        y = fn.create(kind, [qa, w, ws, b], {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1),
                                             "in_params": pin, **out})
    elif kind == "QMatMul":
        w = fn.add_constant(r.integers(-127, 128, (8, 5)).astype(np.int8))
        ws = fn.add_constant(r.uniform(0.001, 0.01, 1).astype(F32))
        y = fn.create(kind, [qa, w, ws, None], {"in_params": pin, **out})
    elif kind in ("QAdd", "QMul"):
        xb = fn.add_input("b", TensorType(E.FLOAT32, (1, 8)))
        feeds["b"] = ((r.integers(-128, 128, (1, 8)) - 2) * np.float64(F32(0.03))).astype(F32)
        qb = fn.create("Quantize", [xb], {"elem": E.INT8Q, "scale": 0.03, "offset": 2}).outputs[0]
        y = fn.create(kind, [qa, qb], {"in_params": pin + (0.03, 2), **out})
    elif kind == "Rescale":
        y = fn.create(kind, [qa], {"in_params": pin, **out})
    elif kind == "QClip":
        y = fn.create(kind, [qa], {"lo": -20, "hi": 40})
    else:
        pool = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
        extra = {"in_params": pin, **out, "count_include_pad": bool(seed % 2)} if kind == "QAvgPool" else {}
        y = fn.create(kind, [qa], {**pool, **extra})
    t = y.outputs[0].type
    moved = fn.create("Transpose", [y.outputs[0]], {"perm": tuple(reversed(range(t.rank)))}).outputs[0]
    d = fn.create("Dequantize", [moved], {"in_params": (t.scale, t.offset)}).outputs[0]
    fn.set_output("y", d)
    return fn, feeds


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("kind", ["QConv", "QMatMul", "QAdd", "QMul", "Rescale", "QClip", "QMaxPool", "QAvgPool"])
def test_lowered_equals_typed(kind: str, seed: int) -> None:
    fn, feeds = _island(kind, seed)
    typed = run_function(fn, "interpreter", feeds, prepared=True)["y"]
    fn2, _ = _island(kind, seed)
    assert lower_quantized(fn2) > 0
    fn2.verify()
    assert not any(v.type.elem.is_quantized for n in fn2.nodes for v in n.outputs)
    kinds = {n.kind.name for n in fn2.nodes}
    assert "QuantizeLinear" in kinds and "DequantizeLinear" in kinds
    if kind in ("QConv", "QMatMul"):
        assert "QLinearConv" in kinds
    lowered = run_function(fn2, "interpreter", feeds, prepared=True)["y"]
    np.testing.assert_array_equal(lowered, typed)
    primitives = run_function(fn2, "interpreter-primitives", feeds)["y"]  # QLinearConv etc. lowered further
    np.testing.assert_array_equal(primitives, typed)
