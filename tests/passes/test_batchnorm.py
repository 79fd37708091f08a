"""fold-batchnorm and fold-conv-arith: folded into the Conv, equal results; refusals; ResNet-50."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import glow_core
from glow_core import zoo
from glow_core.importer import import_model
from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from tests.passes.passutil import check, f, kinds

RNG = np.random.default_rng(7)


def bn_params(c: int, dtype: Any = np.float32) -> list[np.ndarray]:
    return [RNG.uniform(0.5, 1.5, c).astype(dtype), RNG.standard_normal(c).astype(dtype),
            RNG.standard_normal(c).astype(dtype), RNG.uniform(0.2, 2.0, c).astype(dtype)]


def conv_bn(x_shape: tuple[int, ...] = (2, 4, 7, 6), m: int = 6, group: int = 2, bias: bool = True,
            dtype: Any = np.float32, bn_dtype: Any = None) -> tuple[Function, Value]:
    fn = Function()
    elem = ElemKind.from_dtype(dtype)
    nd = len(x_shape) - 2
    x = fn.add_input("x", TensorType(elem, x_shape))
    w = fn.add_constant(f((m, x_shape[1] // group) + (3,) * nd, dtype), "w")
    b = fn.add_constant(f((m,), dtype, seed=3), "b") if bias else None
    conv = fn.create("Conv", [x, w, b], {"strides": (1,) * nd, "pads": (1,) * (2 * nd), "dilations": (1,) * nd,
                                         "group": group})
    params = [fn.add_constant(p, f"bn{i}") for i, p in enumerate(bn_params(m, bn_dtype or dtype))]
    bn = fn.create("BatchNormalization", [conv.result, *params], {"epsilon": 1e-3})
    return fn, bn.result


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape,group", [((2, 4, 7, 6), 2), ((1, 3, 9), 1), ((1, 4, 5, 5), 4), ((1, 2, 4, 3, 5), 1)])
def test_batchnorm_folded_into_conv(x_shape: tuple[int, ...], group: int, bias: bool) -> None:
    m = 4 if group == 4 else 6
    fn, y = conv_bn(x_shape, m, group, bias)
    fn.set_output("y", fn.create("Relu", [y]).result)
    assert check(fn, "fold-batchnorm", rtol=1e-4, atol=1e-5)
    assert kinds(fn) == {"Conv": 1, "Relu": 1}
    conv = fn.nodes_of("Conv")[0]
    assert conv.inputs[2] is not None  # a folded bias is always present
    assert fn.constants and all(c.users for c in fn.constants)  # the old weights are gone


@pytest.mark.parametrize("dtype,bn_dtype,rtol", [(np.float64, None, 1e-10), (np.float16, np.float32, 1e-2)])
def test_batchnorm_fold_other_float_kinds(dtype: Any, bn_dtype: Any, rtol: float) -> None:
    fn, y = conv_bn(dtype=dtype, bn_dtype=bn_dtype)
    fn.set_output("y", y)
    assert check(fn, "fold-batchnorm", rtol=rtol, atol=rtol)
    assert kinds(fn) == {"Conv": 1}
    filt = fn.nodes[0].inputs[1]
    assert filt is not None and filt.type.elem == ElemKind.from_dtype(dtype)


def test_bn_output_is_function_output() -> None:
    fn, y = conv_bn()
    fn.set_output("y", y)
    fn.set_output("y2", y)
    assert check(fn, "fold-batchnorm", rtol=1e-4, atol=1e-5)
    assert kinds(fn) == {"Conv": 1}
    assert fn.outputs[0][1] is fn.outputs[1][1] is fn.nodes[0].result


def test_refused_when_conv_result_has_another_user() -> None:
    fn, y = conv_bn()
    conv = fn.nodes_of("Conv")[0]
    fn.set_output("y", fn.create("Add", [y, fn.create("Relu", [conv.result]).result]).result)
    assert not check(fn, "fold-batchnorm")
    assert kinds(fn)["BatchNormalization"] == 1


def test_refused_when_conv_result_is_a_function_output() -> None:
    fn, y = conv_bn()
    fn.set_output("conv", fn.nodes_of("Conv")[0].result)
    fn.set_output("y", y)
    assert not check(fn, "fold-batchnorm")
    assert kinds(fn) == {"BatchNormalization": 1, "Conv": 1}


def test_refused_when_params_are_not_constants() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (1, 2, 5, 5)))
    scale = fn.add_input("scale", TensorType(ElemKind.FLOAT32, (3,)))
    w = fn.add_constant(f((3, 2, 1, 1)), "w")
    conv = fn.create("Conv", [x, w, None], {"strides": (1, 1), "pads": (0,) * 4, "dilations": (1, 1)})
    rest = [fn.add_constant(p, "p") for p in bn_params(3)[1:]]
    var = fn.add_constant(np.full(3, 2.0, np.float32), "v")
    fn.set_output("y", fn.create("BatchNormalization", [conv.result, scale, rest[0], rest[1], var]).result)
    assert not check(fn, "fold-batchnorm")
    assert "BatchNormalization" in kinds(fn)


def test_refused_when_conv_filter_is_not_constant() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (1, 2, 5, 5)))
    w = fn.add_input("w", TensorType(ElemKind.FLOAT32, (3, 2, 1, 1)))
    conv = fn.create("Conv", [x, w, None], {"strides": (1, 1), "pads": (0,) * 4, "dilations": (1, 1)})
    params = [fn.add_constant(p, "p") for p in bn_params(3)]
    fn.set_output("y", fn.create("BatchNormalization", [conv.result, *params]).result)
    assert not check(fn, "fold-batchnorm")
    assert "BatchNormalization" in kinds(fn)


def test_refused_when_not_after_a_conv() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (1, 3, 4, 4)))
    params = [fn.add_constant(p, "p") for p in bn_params(3)]
    fn.set_output("y", fn.create("BatchNormalization", [fn.create("Relu", [x]).result, *params]).result)
    assert not check(fn, "fold-batchnorm")
    assert "BatchNormalization" in kinds(fn)


# -- fold-conv-arith -------------------------------------------------------------------------------------

def conv_then(kind: str, const_shape: tuple[int, ...], conv_left: bool = True, value: Any = None) -> Function:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (2, 3, 5, 5)))
    w = fn.add_constant(f((4, 3, 3, 3)), "w")
    conv = fn.create("Conv", [x, w, None], {"strides": (1, 1), "pads": (1,) * 4, "dilations": (1, 1)})
    c = fn.add_constant(value if value is not None else np.abs(f(const_shape, seed=5)) + np.float32(0.5), "c")
    ops = [conv.result, c] if conv_left else [c, conv.result]
    fn.set_output("y", fn.create(kind, ops).result)
    return fn


@pytest.mark.parametrize("kind,left", [("Mul", True), ("Mul", False), ("Add", True), ("Add", False),
                                       ("Sub", True), ("Sub", False), ("Div", True)])
@pytest.mark.parametrize("shape", [(4, 1, 1), (1, 4, 1, 1), (1,), ()])
def test_per_channel_arith_folded(kind: str, left: bool, shape: tuple[int, ...]) -> None:
    fn = conv_then(kind, shape, left)
    assert check(fn, "fold-conv-arith", rtol=1e-5, atol=1e-5)
    assert kinds(fn) == {"Conv": 1}


@pytest.mark.parametrize("kind,left,shape", [
    ("Mul", True, (1, 1, 5, 1)),      # varies along a spatial axis
    ("Add", True, (1, 1, 1, 5, 5)),   # broadcasting grows the rank
    ("Div", False, (4, 1, 1)),        # c / conv is not affine in the conv
    ("Mul", True, (2, 4, 1, 1)),      # varies along the batch axis
])
def test_arith_not_per_channel_is_kept(kind: str, left: bool, shape: tuple[int, ...]) -> None:
    fn = conv_then(kind, shape, left)
    before = kinds(fn)
    assert not check(fn, "fold-conv-arith")
    assert kinds(fn) == before


def test_arith_fold_refused_for_a_zero_divisor() -> None:
    fn = conv_then("Div", (4, 1, 1), value=np.array([1, 0, 2, 3], np.float32).reshape(4, 1, 1))
    assert not check(fn, "fold-conv-arith")
    assert "Div" in kinds(fn)


def test_batchnorm_then_scale_and_shift_become_one_conv() -> None:
    """inception_v2 / densenet write Conv -> BatchNormalization -> Mul -> Add."""
    fn, y = conv_bn(m=6)
    m = fn.create("Mul", [y, fn.add_constant(np.abs(f((6, 1, 1))) + np.float32(0.1), "s")]).result
    fn.set_output("y", fn.create("Add", [m, fn.add_constant(f((6, 1, 1), seed=9), "t")]).result)
    from glow_core.passinfra import FixedPoint

    assert check(fn, FixedPoint("fold-batchnorm", "fold-conv-arith", "dce"), rtol=1e-4, atol=1e-5)
    assert kinds(fn) == {"Conv": 1}


# -- ResNet-50 (light model) ------------------------------------------------------------------------------

RESNET = "zoo:resnet50"


@pytest.mark.slow
def test_resnet50_has_no_batchnorm_left_and_matches_onnxruntime() -> None:
    pytest.importorskip("onnxruntime")
    from tests.test_models import load_shipped, random_feeds, run_onnxruntime, with_random_weights

    assert kinds(import_model(zoo.resolve_model(RESNET)))["BatchNormalization"] == 53
    shipped = load_shipped("resnet50")
    randomized = with_random_weights(shipped, 0.8)  # the shipped weights are all 0.02: every channel alike
    for model in (shipped, randomized):
        net = glow_core.compile(model, "interpreter")
        counts = net.function.count_by_kind()
        assert not {"BatchNormalization", "Dropout", "Identity"} & set(counts), counts
        feeds = random_feeds(model)
        got = net.run(feeds)
        want = run_onnxruntime(model, feeds)
        for name, w in zip(net.output_names, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-3, atol=1e-5)
    assert np.ptp(want[-1]) > 0  # the randomized model's logits differ: the comparison means something


def test_resnet50_folding_counts() -> None:
    """53 BatchNormalization nodes, each folded into its Conv (53 Convs, no new kinds)."""
    from glow_core.passinfra import FixedPoint

    fn = import_model(zoo.resolve_model(RESNET))
    n_conv = kinds(fn)["Conv"]
    from tests.passes.passutil import apply

    ctx = apply(fn, FixedPoint("fold-batchnorm", "dce"))
    assert ctx.changes.get("fold-batchnorm") == 1
    assert "BatchNormalization" not in kinds(fn) and kinds(fn)["Conv"] == n_conv == 53
