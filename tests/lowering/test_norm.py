"""Lowering of the normalization kinds and NegativeLogLikelihoodLoss: primitives-only interpreter vs interpreter.

Same harness as test_reduce: native and lowered results agree, and the lowered
function holds primitive kinds only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_core.errors import GlowError
from glow_core.ir.types import ElemKind
from tests.lowering.test_reduce import BF16, F16, F32, F64, check_lowering, rand, run

STASHES = [ElemKind.FLOAT32, ElemKind.FLOAT64]


# -- BatchNormalization / InstanceNormalization / GroupNormalization -------------------------------------

@pytest.mark.parametrize("pdtype", [None, F32, F64, F16], ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
def test_batchnorm(dtype: np.dtype, pdtype: np.dtype | None) -> None:
    pdtype = pdtype or dtype  # parameters may have another float kind than the input
    for shape in ((2, 3), (2, 3, 5), (1, 3, 4, 4)):
        c = shape[1]
        params = [rand((c,), pdtype, 0.5, 2, seed=1), rand((c,), pdtype, seed=2), rand((c,), pdtype, seed=3),
                  rand((c,), pdtype, 0.1, 2, seed=4)]
        check_lowering("BatchNormalization", [rand(shape, dtype), *params], {"epsilon": 1e-3})


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # the native kernel, on the empty spatial case
@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
def test_instancenorm(dtype: np.dtype) -> None:
    for shape in ((2, 3), (2, 3, 7), (2, 3, 4, 5), (1, 2, 0)):
        c = shape[1]
        check_lowering("InstanceNormalization",
                       [rand(shape, dtype), rand((c,), dtype, 0.5, 2, 1), rand((c,), dtype, seed=2)],
                       {"epsilon": 1e-5})


@pytest.mark.parametrize("stash", STASHES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_groupnorm(dtype: np.dtype, stash: ElemKind) -> None:
    for shape, groups in (((2, 4, 3, 3), 2), ((2, 4, 5), 4), ((3, 6), 1), ((1, 6, 2, 2), 3)):
        c = shape[1]
        check_lowering("GroupNormalization",
                       [rand(shape, dtype), rand((c,), dtype, 0.5, 2, 1), rand((c,), dtype, seed=2)],
                       {"num_groups": groups, "epsilon": 1e-5, "stash": stash})


# -- LayerNormalization / RMSNormalization -------------------------------------------------------------

@pytest.mark.parametrize("stash", STASHES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
def test_layernorm_with_its_statistics(dtype: np.dtype, stash: ElemKind) -> None:
    shape = (2, 3, 4)
    for axis in (0, 1, 2):
        for with_bias in (True, False):
            for pshape in (shape[axis:], shape[-1:]):  # the scale and bias broadcast to the input
                bias = rand(pshape, dtype, seed=2) if with_bias else None
                got = check_lowering("LayerNormalization", [rand(shape, dtype), rand(pshape, dtype, 0.5, 2, 1), bias],
                                     {"axis": axis, "epsilon": 1e-5, "stash": stash})
                assert got[1].dtype == stash.dtype and got[1].shape == shape[:axis] + (1,) * (3 - axis)


@pytest.mark.parametrize("stash", STASHES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
def test_rmsnorm(dtype: np.dtype, stash: ElemKind) -> None:
    shape = (2, 3, 4)
    for axis in (0, 1, 2):
        check_lowering("RMSNormalization", [rand(shape, dtype), rand(shape[axis:], dtype, 0.5, 2, 1)],
                       {"axis": axis, "epsilon": 1e-5, "stash": stash})


# -- LpNormalization / MeanVarianceNormalization / LRN -----------------------------------------------

@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_lpnorm(dtype: np.dtype, p: int) -> None:
    x = rand((3, 4, 5), dtype)
    x[1, :, 2] = 0  # a zero norm along axis 1 gives 0, not NaN
    x[:, 3, :] = 0
    for axis in (0, 1, 2):
        got = check_lowering("LpNormalization", [x], {"axis": axis, "p": p})[0]
        assert not np.isnan(got).any()


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_mvn(dtype: np.dtype) -> None:
    x = rand((2, 3, 4, 5), dtype)
    for axes in ((0, 2, 3), (1,), (2, 3), (0, 1, 2, 3), ()):
        check_lowering("MeanVarianceNormalization", [x], {"axes": axes, "epsilon": 1e-9})


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
def test_lrn(dtype: np.dtype) -> None:
    x = rand((2, 5, 3, 3), dtype)
    for size in (1, 2, 3, 4, 5, 8):  # even sizes pad one more channel after than before; 8 > C
        check_lowering("LRN", [x], {"size": size, "alpha": 1e-2, "beta": 0.75, "bias": 1.0})
    check_lowering("LRN", [rand((1, 3, 4), dtype)], {"size": 3, "alpha": 0.5, "beta": 0.5, "bias": 2.0})


# -- NegativeLogLikelihoodLoss -----------------------------------------------------------------------

def _nll_attrs(reduction: str, ignore: int | None) -> dict[str, Any]:
    return {"reduction": reduction, "ignore_index": 0 if ignore is None else ignore,
            "has_ignore_index": ignore is not None}


@pytest.mark.parametrize("dtype", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll(reduction: str, dtype: np.dtype) -> None:
    rng = np.random.default_rng(5)
    for shape in ((4, 3), (2, 3, 5), (2, 4, 3, 2)):
        c = shape[1]
        x = rand(shape, dtype, -3, 0)
        for tdtype in (np.int64, np.int32):
            target = rng.integers(0, c, shape[:1] + shape[2:]).astype(tdtype)
            target.reshape(-1)[0] = 1  # ignore_index 1 below is always hit
            for weight in (None, rand((c,), dtype, 0.2, 1, seed=9)):
                for ignore in (None, 1, -5):
                    check_lowering("NegativeLogLikelihoodLoss", [x, target, weight], _nll_attrs(reduction, ignore))


def test_nll_mean_with_every_target_ignored_is_nan() -> None:
    x = rand((3, 4), F32)
    target = np.full((3,), 2, np.int64)
    got = check_lowering("NegativeLogLikelihoodLoss", [x, target, None], _nll_attrs("mean", 2))[0]
    assert np.isnan(got)


@pytest.mark.parametrize("bad", [4, -1])
def test_nll_target_outside_the_classes_fails_on_both_backends(bad: int) -> None:
    x = rand((2, 4), F32)
    target = np.array([0, bad], np.int64)
    for backend in ("interpreter", "interpreter-primitives"):
        with pytest.raises(GlowError, match="range"):
            run("NegativeLogLikelihoodLoss", [x, target, None], _nll_attrs("none", None), backend)
