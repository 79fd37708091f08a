"""fuse-activations on the transformer blocks (FusedLayerNorm, FusedAttention): the interpreter fuses them
bit for bit, a backend without the fused kinds keeps the pattern, the lowerings give the pattern back."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lowering.table import lower_node
from tests.passes.passutil import f, kinds, run
from tests.transformer_models import attention_model, feeds, layernorm_model

F32 = ElemKind.FLOAT32


def _compiled(model: onnx.ModelProto, backend: str, inputs: dict[str, np.ndarray]) -> tuple[dict[str, int], np.ndarray]:
    net = glow_core.compile(model, backend)
    return net.function.count_by_kind(), np.asarray(net.run(inputs)["y"])


@pytest.mark.parametrize("model", [layernorm_model((2, 5, 13)), layernorm_model((3, 8), square="mul", bias=False),
                                   attention_model(2, 3, 5, 7, 4, 6, "Div", (2, 1, 1, 7)),
                                   attention_model(1, 2, 4, 4, 3, 3, "Mul", None)])
def test_interpreter_fuses_bit_for_bit(model: onnx.ModelProto) -> None:
    x = feeds(model)
    fused_kinds, fused = _compiled(model, "interpreter", x)
    plain_kinds, plain = _compiled(model, "interpreter-primitives", x)
    assert any(k in fused_kinds for k in ("FusedLayerNorm", "FusedAttention")), fused_kinds
    assert not any(k.startswith("Fused") for k in plain_kinds), plain_kinds
    np.testing.assert_allclose(plain, fused, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused, ReferenceEvaluator(model).run(None, x)[0], rtol=1e-5, atol=1e-6)
    if "FusedAttention" not in fused_kinds:  # the layer norm kernel runs the very kernels of the pattern
        np.testing.assert_array_equal(fused, np.asarray(glow_core.compile(model, "interpreter").run(x)["y"]))


@pytest.mark.parametrize("variant", ["axis", "eps-after-sqrt", "shared", "no-square"])
def test_layernorm_look_alikes_are_not_fused(variant: str) -> None:
    kinds_, _ = _compiled(layernorm_model((4, 6, 9), variant=variant), "interpreter",
                          feeds(layernorm_model((4, 6, 9), variant=variant)))
    assert "FusedLayerNorm" not in kinds_, kinds_


def test_attention_with_a_shared_score_is_not_fused() -> None:
    model = attention_model(1, 2, 5, 5, 3, 4, "Div", (1, 1, 5, 5), variant="shared")
    kinds_, _ = _compiled(model, "interpreter", feeds(model))
    assert "FusedAttention" not in kinds_ and "Softmax" in kinds_, kinds_


def _one(kind: str, shapes: list[tuple[int, ...] | None], attrs: dict[str, object]) -> Function:
    fn = Function()
    ins = [fn.add_input(f"i{j}", TensorType(F32, s)) if s is not None else None for j, s in enumerate(shapes)]
    fn.set_output("y", fn.create(kind, ins, attrs).result)
    return fn


@pytest.mark.parametrize("kind,shapes,attrs", [
    ("FusedLayerNorm", [(3, 11), (11,), (1, 11)], {"epsilon": 1e-3}),
    ("FusedLayerNorm", [(2, 2, 5), (1,), None], {"epsilon": 0.0}),
    ("FusedAttention", [(2, 3, 4, 5), (2, 3, 5, 6), (2, 3, 6, 7), (2, 1, 1, 6)], {"scale": 0.5, "scale_op": "div"}),
    ("FusedAttention", [(4, 5), (5, 3), (3, 2), None], {"scale": 2.0, "scale_op": "mul"}),
])
def test_lowering_gives_the_pattern_back(kind: str, shapes: list[tuple[int, ...] | None],
                                         attrs: dict[str, object]) -> None:
    fn = _one(kind, shapes, attrs)
    rng = np.random.default_rng(0)
    x = {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.inputs}
    before = run(fn, x)["y"]
    assert lower_node(fn, fn.nodes[0])
    assert kind not in kinds(fn)
    np.testing.assert_allclose(run(fn, x)["y"], before, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind,shapes,attrs,words", [
    ("FusedLayerNorm", [(3, 11), (3, 11), None], {"epsilon": 1e-3}, "Scale"),
    ("FusedLayerNorm", [(3, 11), (11,), None], {"epsilon": -1.0}, "epsilon"),
    ("FusedAttention", [(2, 4, 5), (3, 5, 6), (2, 6, 7), None], {}, "leading axes"),
    ("FusedAttention", [(4, 5), (4, 3), (3, 2), None], {}, "KT"),
    ("FusedAttention", [(4, 5), (5, 3), (3, 2), (2, 3)], {}, "cannot be broadcast"),
    ("FusedAttention", [(4, 5), (5, 3), (3, 2), (2, 4, 3)], {}, "Mask"),
    ("FusedAttention", [(4, 5), (5, 3), (3, 2), None], {"scale_op": "pow"}, "scale_op"),
])
def test_bad_operands_rejected_with_a_clear_error(kind: str, shapes: list[tuple[int, ...] | None],
                                                  attrs: dict[str, object], words: str) -> None:
    from glow_core.errors import GlowError

    with pytest.raises(GlowError, match=words):
        _one(kind, shapes, attrs)


def test_fused_constants_stay_usable() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(F32, (2, 7)))
    g = fn.add_constant(f((7,)), "g")
    fn.set_output("y", fn.create("FusedLayerNorm", [x, g, None], {"epsilon": 1e-5}).result)
    y = run(fn, {"x": np.ones((2, 7), np.float32)})["y"]
    assert np.all(y == 0.0)  # a constant row normalizes to zero (var 0, eps > 0)


@pytest.mark.parametrize("model", [layernorm_model((2, 5, 13)), attention_model(1, 2, 4, 4, 3, 3, "Mul", None)])
def test_blocks_stay_unfused_for_the_int8_conversion(model: onnx.ModelProto) -> None:
    """The graph the int8 conversion and its profile see keeps the pieces (each is quantized on its own)."""
    from glow_core.pipeline import prepare_function
    from glow_core.importer import import_model
    from glow_core.plugin_host import get_backend

    be = get_backend("cpu")
    fused = prepare_function(import_model(model), be).count_by_kind()
    pieces = prepare_function(import_model(model), be, quantizable=True).count_by_kind()
    assert any(k in fused for k in ("FusedLayerNorm", "FusedAttention")), fused
    assert not any(k in pieces for k in ("FusedLayerNorm", "FusedAttention")), pieces
