"""The cpu backend's quantized kernels against the interpreter: bit-identical int8 / int32 results.

Operands fed as inputs take the general kernels (QConv / QMatMul loops and
Requantize); constant filters take the fused int8 kernels (``emit/qconv.py``:
VNNI when the host has it, the widening path under ``GLOW_CPU_FEATURES=avx2``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.api import compile_options, prepare_function
from glow_core.ir.graph import Function
from glow_core.ir.types import TensorType
from glow_core.plugin_host import get_backend
from tests.lowering.test_nn_quant import CONV_CASES, _conv_attrs, _q8, _scale
from tests.lowering.test_reduce import F32, I8, I32, U8, rand, run


def _compare(kind: str, ops: list[np.ndarray | None], attrs: dict[str, Any]) -> None:
    want, _ = run(kind, ops, attrs, "interpreter")
    got, _ = run(kind, ops, attrs, "cpu")
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[0])}d-g{c[5]}")
@pytest.mark.parametrize("xdt,wdt,ydt", [(U8, U8, U8), (I8, I8, I8), (U8, I8, U8)], ids=str)
def test_qlinear_conv_general(xdt: np.dtype, wdt: np.dtype, ydt: np.dtype, case: tuple[Any, ...]) -> None:
    sp, k, *_, g = case
    m = 3 * g
    x, w = _q8((2, 2 * g) + sp, xdt, 1), _q8((m, 2) + k, wdt, 2)
    for per_channel in (False, True):
        wshape = (m,) if per_channel else ()
        ops = [x, _scale((), F32, 3), _q8((), xdt, 4), w, _scale(wshape, F32, 5), _q8(wshape, wdt, 6),
               _scale((), F32, 7) * 20, _q8((), ydt, 8), rand((m,), I32, -5000, 5000, seed=9)]
        _compare("QLinearConv", ops, _conv_attrs(case))


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((5,), (2, 5, 3))], ids=str)
def test_matmul_integer_general(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, w = _q8(sa, U8, 1), _q8(sb, I8, 2)
    for az, bz in ((None, None), (_q8((), U8, 3), _q8((), I8, 4)), (None, _q8((sb[-1],), I8, 6))):
        _compare("MatMulInteger", [a, w, az, bz], {})


def test_qlinear_matmul_general() -> None:
    a, w = _q8((3, 5), U8, 1), _q8((5, 4), I8, 2)
    ops = [a, _scale((3,), F32, 3), _q8((3,), U8, 4), w, _scale((4,), F32, 5), _q8((4,), I8, 6),
           _scale((), F32, 7) * 20, _q8((), U8, 8)]
    _compare("QLinearMatMul", ops, {})
