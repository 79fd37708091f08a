"""Compiles for symbolic dims (glow_core/pipeline/symbolic.py): one network for every size up to a bound,
the probe/bound derivation of each dim, the plans, the refusals that fall back to a specialization per shape."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import InputError
from glow_core.importer.symbols import DimBound, ModelSymbols
from glow_core.ir.symbolic import SymExpr, derive
from glow_core.pipeline.symbolic import SymbolicPlan, make_plan

RNG = np.random.default_rng(0)
W = RNG.standard_normal((16, 8)).astype(np.float32)
POS = RNG.standard_normal((64, 16)).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], out_dims: list, inits: list[onnx.TensorProto], *,
           x_dims: list | None = None, x_type: int = TensorProto.FLOAT, out_type: int = TensorProto.FLOAT
           ) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_dims or ["batch", "seq", 16])],
                          [helper.make_tensor_value_info("y", out_type, out_dims)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def positions_model() -> onnx.ModelProto:
    """y = relu((x + positions[:seq]) @ W): a table of 64 positions sliced to the sequence."""
    nodes = [helper.make_node("Shape", ["x"], ["xs"], start=1, end=2),
             helper.make_node("Slice", ["pos", "zero", "xs"], ["p"]),
             helper.make_node("Add", ["x", "p"], ["xp"]),
             helper.make_node("MatMul", ["xp", "W"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    return _model(nodes, ["batch", "seq", 8], [numpy_helper.from_array(W, "W"), numpy_helper.from_array(POS, "pos"),
                                               numpy_helper.from_array(np.array([0], np.int64), "zero")])


def _want(x: np.ndarray) -> np.ndarray:
    return np.maximum((x + POS[: x.shape[1]]) @ W, 0)


def test_expressions_print_evaluate_and_derive() -> None:
    e = SymExpr.of({("past",): 1, (): 1})
    assert str(e) == "past + 1" and e.evaluate({"past": 9}) == 10 and e.monotone()
    assert str(SymExpr.of({("b", "s"): 12, (): -2})) == "12*b*s - 2"
    probes = [{"s": 251, "p": 241}, {"s": 511, "p": 511}]
    assert derive([251, 511], probes) == SymExpr.symbol("s")
    assert str(derive([251 + 241, 1022], probes)) == "p + s"
    assert str(derive([12 * 251, 12 * 511], probes)) == "12*s"
    assert derive([64, 64], probes) == 64
    assert derive([1000, 7], probes) is None  # no polynomial the search knows


def test_plans_fix_batches_and_sizes_of_one_and_relate_symbols() -> None:
    gpt = _model([helper.make_node("Identity", ["x"], ["y"])], ["batch", "total", 4], [],
                 x_dims=["batch", "total", 4])
    gpt.graph.input.append(helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", 2, "past", 4]))
    gpt.graph.input.append(helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]))
    symbols = ModelSymbols(gpt)
    decode = make_plan(symbols, {"batch": 1, "total": 33, "past": 32, "seq": 1}, relate=True)
    assert decode.describe() == "past<=511, batch=1, seq=1, total=past + 1"
    assert decode.accepts({"batch": 1, "total": 100, "past": 99, "seq": 1})
    assert not decode.accepts({"batch": 1, "total": 100, "past": 98, "seq": 1})  # the relation
    assert not decode.accepts({"batch": 2, "total": 33, "past": 32, "seq": 1})  # the fixed batch
    prefill = make_plan(symbols, {"batch": 1, "total": 32, "past": 0, "seq": 32}, relate=True)
    assert prefill.describe() == "total<=511, batch=1, past=0, seq=total"
    bounded = make_plan(ModelSymbols(gpt, {"past": DimBound(1, 100)}), {"batch": 1, "total": 33, "past": 32, "seq": 1})
    assert dict(bounded.free)["past"] == 100
    assert SymbolicPlan((("s", 7),)).env({"s": 3}) == {"s": 3}


def test_one_compile_runs_every_size_up_to_the_bound_and_a_larger_one_specializes() -> None:
    net = glow_core.compile(positions_model(), "cpu")
    assert net.specializations_compiled == 1 and [p.describe() for p in net.symbolic.plans] == ["seq<=63, batch=1"]
    sym = net.specializations[0]
    assert str(sym.input_types["x"]) == "float32[1,seq<=63,16]"
    for s in (63, 5, 1, 17, 33, 2):  # the largest first: the padding of the smaller runs holds stale values
        x = RNG.standard_normal((1, s, 16)).astype(np.float32)
        got = net.run({"x": x})["y"]
        assert got.shape == (1, s, 8)
        np.testing.assert_allclose(got, _want(x), rtol=1e-5, atol=1e-5)
    assert net.specializations_compiled == 1
    x = RNG.standard_normal((1, 64, 16)).astype(np.float32)  # beyond the bound of 63: a specialization
    np.testing.assert_allclose(net.run({"x": x})["y"], _want(x), rtol=1e-5, atol=1e-5)
    assert net.specializations_compiled == 2
    # the bound 511 (the default) did not import (64 positions), nor 255 or 127: each refusal says why
    assert all("does not import" in why for why in net.symbolic.refused.values())


def test_a_symbolic_network_checks_the_feeds() -> None:
    net = glow_core.compile(positions_model(), "cpu")
    sym = net.specializations[0]
    with pytest.raises(InputError, match="expected"):
        sym.run({"x": np.zeros((1, 5, 15), np.float32)})  # a fixed axis
    with pytest.raises(InputError, match="expected"):
        sym.run({"x": np.zeros((1, 70, 16), np.float32)})  # beyond the bound
    with pytest.raises(InputError, match="dtype"):
        sym.run({"x": np.zeros((1, 5, 16), np.float64)})


def test_sizes_used_as_values_are_computed_at_run_time() -> None:
    """y = x * seq (the sequence length as a value, folded to a constant at one size): the symbolic compile
    replaces the constant by a SymbolicValue node evaluated at each run, on cpu and on the interpreter."""
    nodes = [helper.make_node("Shape", ["x"], ["xs"], start=1, end=2),
             helper.make_node("Cast", ["xs"], ["n"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "n"], ["y"])]
    for backend in ("cpu", "interpreter"):
        net = glow_core.compile(_model(nodes, ["batch", "seq", 16], []), backend)
        for s in (30, 3, 7, 1):
            x = RNG.standard_normal((1, s, 16)).astype(np.float32)
            np.testing.assert_allclose(net.run({"x": x})["y"], x * s, rtol=1e-6)
        assert net.specializations_compiled == 1
        assert net.specializations[0].function.count_by_kind().get("SymbolicValue") == 1


def test_values_no_polynomial_gives_refuse_and_specialize() -> None:
    """y = x / seq: the reciprocal of a size is no polynomial of the symbols, so no symbolic compile; each
    shape specializes and is right."""
    nodes = [helper.make_node("Shape", ["x"], ["xs"], start=1, end=2),
             helper.make_node("Cast", ["xs"], ["n"], to=TensorProto.FLOAT),
             helper.make_node("Reciprocal", ["n"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["y"])]
    net = glow_core.compile(_model(nodes, ["batch", "seq", 16], []), "cpu")
    assert not net.symbolic.plans
    assert any("depend on the symbols" in why for why in net.symbolic.refused.values())
    for s in (3, 7):
        x = RNG.standard_normal((1, s, 16)).astype(np.float32)
        np.testing.assert_allclose(net.run({"x": x})["y"], x * np.float32(1 / s), rtol=1e-6)
    assert net.specializations_compiled == 2


def test_an_integer_division_over_a_symbolic_axis_refuses() -> None:
    """Padding may hold zeros: an integer Div over a symbolic axis is not compiled for symbolic dims."""
    nodes = [helper.make_node("Div", ["x", "x"], ["y"])]
    model = _model(nodes, ["batch", "seq", 16], [], x_type=TensorProto.INT32, out_type=TensorProto.INT32)
    net = glow_core.compile(model, "cpu")
    assert not net.symbolic.plans and any("integer Div" in why for why in net.symbolic.refused.values())
    x = RNG.integers(1, 9, (1, 4, 16)).astype(np.int32)
    np.testing.assert_array_equal(net.run({"x": x})["y"], np.ones_like(x))


def test_symbolic_dims_can_be_turned_off() -> None:
    net = glow_core.compile(positions_model(), "cpu", options={"symbolic_dims": False})
    assert net.symbolic is None and net.specializations_compiled == 0
    with pytest.raises(InputError, match="True or False"):
        glow_core.compile(positions_model(), "cpu", options={"symbolic_dims": "yes"})


def test_a_generation_loop_compiles_prefill_and_decode_once_and_matches_the_reference() -> None:
    """GPT-2 (toy sizes) with a KV cache: the prefill (past 0, the prompt free) and the decode step (one token,
    the past free, total = past + 1) are the two compiles of a whole greedy loop, every step equal to
    onnx.reference (the mask's padding, the cache's Concat at a run-time offset, softmax over the keys)."""
    from onnx.reference import ReferenceEvaluator

    from tests.bench import load_script

    tg = load_script("transformer_graphs")
    c = tg.Config.tiny()
    model = tg.gpt2(c)
    net, ref = glow_core.compile(model, "cpu"), ReferenceEvaluator(model)
    dh = c.hidden // c.heads
    ids = np.random.default_rng(3).integers(0, c.vocab, (1, 7))
    past = [np.zeros((1, c.heads, 0, dh), np.float32)] * (2 * c.layers)
    for _ in range(12):
        n, s = past[0].shape[2], ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, n + s), np.int64),
                 "position_ids": np.arange(n, n + s)[None]}
        feeds.update({f"past_key_values.{i}.{kv}": past[2 * i + j] for i in range(c.layers)
                      for j, kv in enumerate(("key", "value"))})
        got = net.run(feeds)
        for vi, want in zip(model.graph.output, ref.run(None, feeds)):
            np.testing.assert_allclose(got[vi.name], want, rtol=1e-4, atol=1e-5, err_msg=f"{vi.name} at past {n}")
        past = [got[f"present.{i}.{kv}"] for i in range(c.layers) for kv in ("key", "value")]
        ids = np.array([[int(np.argmax(got["logits"][0, -1]))]])
    assert net.specializations_compiled == 2
    assert sorted(p.describe() for p in net.symbolic.plans) == [
        "past_sequence<=511, batch=1, sequence=1, total_sequence=past_sequence + 1",
        "sequence<=511, batch=1, past_sequence=0, total_sequence=sequence"]


def test_a_run_time_prefix_that_is_no_multiple_of_the_vector_width() -> None:
    """An element-wise chain whose valid prefix (past + 1 of a bound of 512) ends inside a vector: its tail
    is computed (it once was left as padding, reading as zeros)."""
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=1),
             helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["mb", "ax"], ["mu"]),
             helper.make_node("ReduceMax", ["present"], ["r"], axes=[2], keepdims=1),
             helper.make_node("Where", ["mu", "r", "neg"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", 4]),
                                       helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, 1, 4]),
                                       helper.make_tensor_value_info("mask", TensorProto.INT64, [1, "total"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "total", 1])],
                          [numpy_helper.from_array(np.float32(-5), "neg"), numpy_helper.from_array(np.array([2]), "ax")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    net = glow_core.compile(model, "cpu")
    for n in (5, 9, 3, 40):
        mask = np.ones((1, n + 1), np.int64)
        mask[0, 1] = 0
        past = RNG.standard_normal((1, n, 4)).astype(np.float32)
        new = RNG.standard_normal((1, 1, 4)).astype(np.float32)
        want = np.where(mask[..., None] != 0, np.concatenate([past, new], 1).max(2, keepdims=True), -5)
        np.testing.assert_array_equal(net.run({"past": past, "new": new, "mask": mask})["y"], want)
    assert [p.describe() for p in net.symbolic.plans] == ["past<=511, total=past + 1"]


def test_sizes_past_the_default_bounds_compile_once_per_doubling() -> None:
    """A KV cache that outgrows 511 positions: the first size past it plans the least 2**k - 1 that holds it
    (1023 for 600), and every later step up to that runs on the same network (each step past 511 once compiled
    a specialization of its own)."""
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=1),
             helper.make_node("ReduceMax", ["present"], ["y"], axes=[1], keepdims=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", 4]),
                                       helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, 1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4]),
                           helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, "total", 4])])
    net = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "cpu")
    compiled = []
    for n in (5, 600, 601, 1000, 1023, 1024):
        past, new = RNG.standard_normal((1, n, 4)).astype(np.float32), RNG.standard_normal((1, 1, 4)).astype(np.float32)
        got = net.run({"past": past, "new": new})
        want = np.concatenate([past, new], axis=1)
        np.testing.assert_array_equal(got["present"], want)
        np.testing.assert_array_equal(got["y"], want.max(axis=1, keepdims=True))
        compiled.append(net.specializations_compiled)
    assert compiled == [1, 2, 2, 2, 2, 3]
    assert sorted(p.describe() for p in net.symbolic.plans) == ["past<=1023", "past<=2047", "past<=511"]
