"""Lowering of the neural-network compute kinds: primitives-only interpreter vs interpreter.

Gemm, ConvTranspose, LpPool, MaxPoolWithArgmax, Einsum, Identity and Dropout,
over attribute variants and element kinds. Same harness as test_reduce: the
lowered results agree with the native kernels and the lowered function holds
primitive kinds only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.pipeline import compile_options
from glow_core.lowering import lower_node
from glow_core.plugin_host import get_backend
from tests.lowering.test_reduce import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I32,
    I64,
    U8,
    assert_primitive_only,
    build,
    check_lowering,
    rand,
)

FLOATS = [F32, F16, BF16, F64]
U32, U64, I16 = np.dtype(np.uint32), np.dtype(np.uint64), np.dtype(np.int16)


def _spatial(nd: int, strides: int = 1, dil: int = 1, pads: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    return {"strides": (strides,) * nd, "dilations": (dil,) * nd, "pads": (pads[0],) * nd + (pads[1],) * nd}


# -- Gemm ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_gemm_float(dtype: np.dtype) -> None:
    for ta in (False, True):
        for tb in (False, True):
            a = rand((4, 3) if ta else (3, 4), dtype, seed=1)
            w = rand((5, 4) if tb else (4, 5), dtype, seed=2)
            for c_shape in (None, (5,), (3, 1), (3, 5), (1,)):
                c = None if c_shape is None else rand(c_shape, dtype, seed=3)
                for alpha, beta in ((1.0, 1.0), (0.5, 2.0), (1.0, 0.0)):
                    check_lowering("Gemm", [a, w, c], {"alpha": alpha, "beta": beta, "trans_a": ta, "trans_b": tb})


@pytest.mark.parametrize("dtype", [I32, I64, U32, U64], ids=str)
def test_gemm_int(dtype: np.dtype) -> None:
    a, w = rand((3, 4), dtype, 0, 50, 1), rand((5, 4), dtype, 0, 50, 2)
    for c, beta in ((None, 1.0), (rand((5,), dtype, 0, 9, 3), 1.0), (rand((3, 5), dtype, 0, 9, 3), 0.0)):
        check_lowering("Gemm", [a, w, c], {"beta": beta, "trans_b": True})


# -- ConvTranspose ----------------------------------------------------------------------------------------

CONV_T_CASES = [
    # (input spatial, kernel, strides, dilations, pads begin, pads end, output_padding, group)
    ((5,), (3,), (1,), (1,), (0,), (0,), (0,), 1),
    ((5,), (3,), (2,), (1,), (1,), (1,), (1,), 1),
    ((4, 3), (3, 2), (2, 3), (1, 1), (0, 0), (0, 0), (1, 0), 1),
    ((4, 4), (3, 3), (2, 2), (2, 1), (1, 2), (2, 0), (1, 1), 2),
    ((3, 3), (2, 2), (1, 1), (1, 1), (-1, 0), (0, -2), (0, 0), 1),  # negative pads: zeros beyond the full result
    ((3, 3), (3, 3), (3, 2), (1, 2), (4, 0), (0, 3), (0, 1), 3),
    ((2, 3, 2), (2, 2, 2), (2, 1, 2), (1, 1, 1), (0, 1, 0), (1, 0, 0), (1, 0, 1), 1),
    ((1, 1), (2, 2), (1, 1), (1, 1), (9, 9), (-9, -9), (0, 0), 1),  # every tap outside: the bias alone
]


@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{len(c[0])}d-s{c[2]}-p{c[4]}{c[5]}-g{c[7]}")
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_conv_transpose(dtype: np.dtype, case: tuple[Any, ...]) -> None:
    sp, k, s, d, pb, pe, op, g = case
    c, mg = 2 * g, 2
    x = rand((2, c) + sp, dtype, seed=1)
    w = rand((c, mg) + k, dtype, seed=2)
    attrs = {"strides": s, "dilations": d, "pads": pb + pe, "output_padding": op, "group": g}
    check_lowering("ConvTranspose", [x, w, None], attrs)
    check_lowering("ConvTranspose", [x, w, rand((mg * g,), dtype, seed=3)], attrs)


# -- LpPool / MaxPoolWithArgmax ------------------------------------------------------------------------------

POOL_CASES = [
    # (spatial, kernel, strides, dilations, pads begin, pads end, ceil_mode)
    ((6,), (3,), (1,), (1,), (0,), (0,), False),
    ((7,), (2,), (2,), (1,), (1,), (1,), True),
    ((5, 6), (3, 2), (2, 2), (1, 2), (1, 0), (1, 1), False),
    ((5, 6), (2, 3), (2, 3), (1, 1), (0, 1), (1, 1), True),
    ((4, 4, 5), (2, 2, 3), (1, 2, 2), (2, 1, 1), (0, 1, 1), (1, 0, 1), True),
]


def _pool_attrs(case: tuple[Any, ...]) -> dict[str, Any]:
    _, k, s, d, pb, pe, ceil = case
    return {"kernel_shape": k, "strides": s, "dilations": d, "pads": pb + pe, "ceil_mode": ceil}


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{len(c[0])}d-k{c[1]}-ceil{int(c[6])}")
@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_lppool(dtype: np.dtype, p: int, case: tuple[Any, ...]) -> None:
    x = rand((2, 3) + case[0], dtype)
    check_lowering("LpPool", [x], {**_pool_attrs(case), "p": p})


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{len(c[0])}d-k{c[1]}-ceil{int(c[6])}")
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("dtype", FLOATS + [I8, U8], ids=str)
def test_maxpool_with_argmax(dtype: np.dtype, storage_order: int, case: tuple[Any, ...]) -> None:
    x = rand((2, 3) + case[0], dtype, -100, 100)
    if dtype.kind == "f":
        x.flat[::7] = x.flat[3]  # ties: the first maximum in window order wins
        x.flat[5] = -np.inf
    check_lowering("MaxPoolWithArgmax", [x], {**_pool_attrs(case), "storage_order": storage_order})


def test_maxpool_with_argmax_nan_and_all_lowest() -> None:
    x = rand((1, 2, 4, 4), F32)
    x[0, 0, 1, 1] = np.nan
    x[0, 1] = -np.inf  # windows over padding only see the lowest value: the first tap wins
    check_lowering("MaxPoolWithArgmax", [x], {**_pool_attrs(((4, 4), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True)),
                                              "storage_order": 0})


# -- Einsum --------------------------------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii->", [(3, 3)]),
    ("bii->bi", [(2, 3, 3)]),
    ("iij->ji", [(3, 3, 2)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ijk,ikl,il->jl", [(2, 3, 4), (2, 4, 5), (2, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
    ("i...,i...->...", [(3, 2, 1), (3, 1, 4)]),
    ("...,...->...", [(2, 3), (1, 3)]),
    ("ab,cd->", [(2, 3), (4, 5)]),
    ("abc,cba->ab", [(2, 3, 4), (4, 3, 2)]),
    (",i->i", [(), (3,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijj,k->ik", [(2, 3, 3), (4,)]),
    ("i->i", [(0,)]),
    ("ij,jk->ik", [(2, 0), (0, 3)]),
]


@pytest.mark.parametrize("case", EINSUM_CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", FLOATS + [I8, U8, I16, I32, I64, U32], ids=str)
def test_einsum(dtype: np.dtype, case: tuple[str, list[tuple[int, ...]]]) -> None:
    eq, shapes = case
    operands = [rand(s, dtype, -20 if dtype.kind != "u" else 0, 20, seed=i) for i, s in enumerate(shapes)]
    tol = None
    check_lowering("Einsum", operands, {"equation": eq}, tol=tol)


# -- no-ops --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["Identity", "Dropout"])
@pytest.mark.parametrize("dtype", [F32, F16, I64, np.dtype(np.bool_)], ids=str)
def test_noops(kind: str, dtype: np.dtype) -> None:
    # the optimizer removes these before lowering: apply the rule itself, then run what is left
    x = rand((2, 3), dtype) if dtype != np.bool_ else np.array([[True, False, True], [False, False, True]])
    fn = build(kind, [x], {})
    assert lower_node(fn, fn.nodes[0])
    assert_primitive_only(fn)
    assert not fn.nodes and fn.outputs[0][1] is fn.inputs[0]
    be = get_backend("interpreter-primitives")
    out = be.compile(fn, compile_options()).execute({"in0": x})
    np.testing.assert_array_equal(out["out0"], x)
