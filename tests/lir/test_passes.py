"""The IR optimizations, one by one, and the LIR pass manager."""

from __future__ import annotations

import time

import numpy as np
import pytest

from glow_core.errors import GlowVerifyError, PassError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir.instructions import ALLOC, COPY, DEALLOC, Dir
from glow_core.lir.ir import Activation, Instr, LIRFunction, Operand, View, Weight, alloc, dealloc
from glow_core.lircompiler import LIRPassContext, LIRPassManager, build_lir, generate_lir, optimize_lir
from glow_core.lircompiler.lifetimes import peak_of_order, relayout
from glow_core.lircompiler.passes import _PASSES, all_lir_passes, get_lir_pass, lir_pass
from tests.lir.lirutil import by_name, check_same, compute, f32, kinds, node, run_lir


def run(lir: LIRFunction, *names: str) -> bool:
    return LIRPassManager(names).run(lir, LIRPassContext(debug=True))


def buffer_of(lir: LIRFunction, instr_name: str, out: int = 0) -> object:
    return by_name(lir, instr_name).outs[out].value.root  # type: ignore[union-attr]


# -- buffer sharing ---------------------------------------------------------------------------------------
def test_elementwise_chain_runs_in_one_buffer() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(8))
    a = node(fn, "Exp", x, name="a")
    b = node(fn, "Neg", a, name="b")
    c = node(fn, "Abs", b, name="c")
    fn.set_output("y", node(fn, "Sqrt", c, name="d"))
    lir = generate_lir(fn)
    assert len(lir.activations) == 3
    assert run(lir, "share-buffers")
    assert len(lir.activations) == 1
    (act,) = lir.activations
    assert buffer_of(lir, "a") is act and buffer_of(lir, "b") is act and buffer_of(lir, "c") is act
    assert [op.value for op in by_name(lir, "b").operands] == [act, act]
    check_same(fn, lir=lir)


def test_inplace_candidate_whose_input_has_a_later_reader_is_not_shared() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(6))
    a = node(fn, "Exp", x, name="a")
    b = node(fn, "Neg", a, name="b")  # may not overwrite a: Mul reads a afterwards
    fn.set_output("y", node(fn, "Mul", a, node(fn, "Abs", b, name="c"), name="m"))
    lir = generate_lir(fn)
    run(lir, "share-buffers")
    assert buffer_of(lir, "b") is not buffer_of(lir, "a")
    assert buffer_of(lir, "c") is buffer_of(lir, "b")  # b dies at c: shared
    check_same(fn, lir=lir)


def test_input_read_twice_by_the_same_instruction_is_shared() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(5))
    a = node(fn, "Exp", x, name="a")
    b = node(fn, "Add", a, a, name="b")
    fn.set_output("y", node(fn, "Neg", b, name="c"))
    lir = build_lir(fn, debug=True)
    assert buffer_of(lir, "b") is buffer_of(lir, "a")
    check_same(fn, lir=lir)


def test_broadcast_operand_is_not_a_candidate_and_non_elementwise_kinds_never_share() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(4, 3))
    s = node(fn, "Exp", fn.add_input("s", f32(3)), name="s_exp")
    a = node(fn, "Exp", x, name="a")
    add = node(fn, "Add", s, a, name="add")  # shares a (shape [4,3]), not s (shape [3])
    mm = node(fn, "MatMul", add, fn.add_constant(np.ones((3, 3), np.float32), "w"), name="mm")
    fn.set_output("y", node(fn, "Neg", mm, name="neg"))
    lir = build_lir(fn, debug=True)
    assert buffer_of(lir, "add") is buffer_of(lir, "a")
    assert buffer_of(lir, "mm") is not buffer_of(lir, "add")
    assert by_name(lir, "add").ins[0].value.root is not buffer_of(lir, "add")  # type: ignore[union-attr]
    check_same(fn, lir=lir)


def test_sharing_through_views_and_with_a_different_element_kind() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 6))
    a = node(fn, "Exp", x, name="a")
    r = node(fn, "Reshape", a, shape=(3, 4), name="r")
    n = node(fn, "Neg", r, name="n")  # in place on the view of a
    i = node(fn, "Cast", n, to=ElemKind.INT32, name="ints")  # in place too: same shape and element width
    fn.set_output("y", node(fn, "BitwiseNot", i, name="bn"))
    lir = build_lir(fn, debug=True)
    act = buffer_of(lir, "a")
    assert isinstance(act, Activation) and len(lir.activations) == 1
    assert isinstance(by_name(lir, "n").outs[0].value, View)
    assert buffer_of(lir, "n") is act and buffer_of(lir, "ints") is act
    assert by_name(lir, "ints").outs[0].value.type == TensorType(ElemKind.INT32, (3, 4))  # type: ignore[union-attr]
    check_same(fn, lir=lir)


def test_view_read_later_keeps_its_base_from_being_overwritten() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 6))
    a = node(fn, "Exp", x, name="a")
    r = node(fn, "Reshape", a, shape=(12,), name="r")  # a is still read through r below
    n = node(fn, "Neg", a, name="n")
    fn.set_output("y", node(fn, "Add", node(fn, "Reshape", n, shape=(12,)), r, name="sum"))
    lir = build_lir(fn, debug=True)
    assert buffer_of(lir, "n") is not buffer_of(lir, "a")
    check_same(fn, lir=lir)


def test_output_weights_are_never_shared_into_the_arena() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(3))
    a = node(fn, "Exp", x, name="a")
    fn.set_output("y", node(fn, "Neg", a, name="n"))
    lir = build_lir(fn, debug=True)
    out = by_name(lir, "n").outs[0].value
    assert isinstance(out, Weight) and out.role == Weight.OUTPUT
    assert by_name(lir, "a").ins[0].value.root.role == Weight.INPUT  # type: ignore[union-attr]


# -- copy elimination ---------------------------------------------------------------------------------------
def test_copy_into_an_output_is_removed_when_its_source_dies() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 3))
    a = node(fn, "Exp", x, name="a")
    fn.set_output("flat", node(fn, "Reshape", a, shape=(6,), name="flat"))
    lir = generate_lir(fn)
    assert kinds(lir) == ["Exp", COPY]
    assert run(lir, "eliminate-copies")
    assert kinds(lir) == ["Exp"] and lir.activations == []
    written = by_name(lir, "a").outs[0].value
    assert isinstance(written, View) and written.root is lir.outputs[0] and written.type == f32(2, 3)
    check_same(fn, lir=lir)


def test_copy_between_activations_is_removed_and_an_output_copy_with_later_readers_is_kept() -> None:
    lir = LIRFunction("f")
    x = lir.add_weight("x", f32(4), Weight.INPUT)
    y = lir.add_weight("y", f32(4), Weight.OUTPUT)
    z = lir.add_weight("z", f32(4), Weight.OUTPUT)
    a, b = lir.new_activation("a", f32(4)), lir.new_activation("b", f32(4))
    work = [
        Instr("Exp", [Operand(a, Dir.OUT), Operand(x, Dir.IN)], name="exp"),
        Instr(COPY, [Operand(b, Dir.OUT), Operand(a, Dir.IN)], name="copy_ab"),
        Instr(COPY, [Operand(y, Dir.OUT), Operand(b, Dir.IN)], name="copy_yb"),
        Instr("Neg", [Operand(z, Dir.OUT), Operand(b, Dir.IN)], name="neg"),
    ]
    relayout(lir, work)
    lir.verify()
    feeds = {"x": np.array([0, 1, 2, 3], np.float32)}
    assert run(lir, "eliminate-copies")
    assert [i.name for i in compute(lir)] == ["exp", "copy_yb", "neg"]  # b is read after the copy to y
    assert by_name(lir, "copy_yb").ins[0].value is a and lir.activations == [a]
    out = run_lir(_fn_of(lir), feeds, lir)
    np.testing.assert_allclose(out["y"], np.exp(feeds["x"]))
    np.testing.assert_allclose(out["z"], -np.exp(feeds["x"]))


def _fn_of(lir: LIRFunction) -> Function:
    """A graph function with the same inputs and outputs (the executor only reads their types)."""
    fn = Function(lir.name)
    ins = {w.io_name: fn.add_input(w.io_name, w.type) for w in lir.inputs}
    first = next(iter(ins.values()))
    for w in lir.outputs:
        fn.set_output(w.io_name, first)
    return fn


# -- dead stores, dead allocations, lifetimes ------------------------------------------------------------------
def _loose_lir() -> tuple[LIRFunction, Activation, Activation, Activation]:
    """x -> a = Exp, b = Neg(x) (never read), c = Abs(a) -> y; allocs first, deallocs last."""
    lir = LIRFunction("f")
    x = lir.add_weight("x", f32(4), Weight.INPUT)
    y = lir.add_weight("y", f32(4), Weight.OUTPUT)
    a, b, c = (lir.new_activation(n, f32(4)) for n in "abc")
    lir.instrs = [alloc(a), alloc(b), alloc(c),
                  Instr("Exp", [Operand(a, Dir.OUT), Operand(x, Dir.IN)], name="exp"),
                  Instr("Neg", [Operand(b, Dir.OUT), Operand(x, Dir.IN)], name="neg"),
                  Instr("Abs", [Operand(c, Dir.OUT), Operand(a, Dir.IN)], name="abs"),
                  Instr("Sqrt", [Operand(y, Dir.OUT), Operand(c, Dir.IN)], name="sqrt"),
                  dealloc(a), dealloc(b), dealloc(c)]
    lir.verify()
    return lir, a, b, c


def test_dead_store_and_dead_alloc_elimination() -> None:
    lir, a, b, c = _loose_lir()
    assert run(lir, "dead-store-elim")
    assert [i.name for i in compute(lir)] == ["exp", "abs", "sqrt"]
    assert b in lir.activations  # its alloc/dealloc are still there
    assert run(lir, "dead-alloc-elim")
    assert lir.activations == [a, c] and not run(lir, "dead-store-elim", "dead-alloc-elim")


def test_deallocs_hoisted_and_allocs_sunk() -> None:
    lir, _a, _b, _c = _loose_lir()
    run(lir, "dead-store-elim", "dead-alloc-elim")
    assert run(lir, "hoist-deallocs-sink-allocs")
    text = [f"{i.kind} {i.operands[0].value.name}" for i in lir.instrs]  # type: ignore[union-attr]
    assert text == ["alloc a", "Exp a", "alloc c", "Abs c", "dealloc a", "Sqrt y", "dealloc c"]
    assert not run(lir, "hoist-deallocs-sink-allocs")


# -- scheduling -------------------------------------------------------------------------------------------------
def _two_branches() -> Function:
    """Two big intermediate results, each reduced by a MatMul; built interleaved (both big ones live)."""
    fn = Function("main")
    x = fn.add_input("x", f32(1, 1000))
    w = fn.add_constant(np.ones((1000, 1), np.float32), "w")
    big1 = node(fn, "Exp", x, name="big1")
    big2 = node(fn, "Neg", x, name="big2")
    s1 = node(fn, "MatMul", big1, w, name="s1")
    s2 = node(fn, "MatMul", big2, w, name="s2")
    fn.set_output("y", node(fn, "Add", s1, s2, name="sum"))
    return fn


def test_scheduler_lowers_the_peak_and_keeps_dependencies() -> None:
    fn = _two_branches()
    lir = generate_lir(fn)
    before = peak_of_order(compute(lir))
    assert run(lir, "schedule")
    order = [i.name for i in compute(lir)]
    assert peak_of_order(compute(lir)) < before
    assert order.index("s1") < order.index("big2") or order.index("s2") < order.index("big1")
    check_same(fn, lir=build_lir(fn, debug=True))
    assert not run(lir, "schedule")  # nothing left to gain


def test_scheduler_is_fast_on_a_wide_graph() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(1, 64))
    w = fn.add_constant(np.ones((64, 1), np.float32), "w")
    bigs = [node(fn, "Exp", node(fn, "Add", x, fn.add_constant(np.full((1, 64), i, np.float32)))) for i in range(500)]
    smalls = [node(fn, "MatMul", b, w) for b in bigs]
    acc = smalls[0]
    for s in smalls[1:]:
        acc = node(fn, "Add", acc, s)
    fn.set_output("y", acc)
    lir = generate_lir(fn)
    assert len(compute(lir)) == 1999
    t0 = time.perf_counter()
    run(lir, "schedule")
    assert time.perf_counter() - t0 < 10.0
    assert peak_of_order(compute(lir)) <= 4 * 256


# -- pass manager ------------------------------------------------------------------------------------------------
def test_pass_registry_and_context_records() -> None:
    assert {"schedule", "share-buffers", "eliminate-copies", "dead-store-elim", "dead-alloc-elim",
            "hoist-deallocs-sink-allocs"} <= set(all_lir_passes())
    assert all(p.doc for p in all_lir_passes().values())
    with pytest.raises(PassError, match="unknown LIR pass"):
        get_lir_pass("no-such-pass")
    ctx = LIRPassContext(debug=True, dump_after=frozenset({"share-buffers"}))
    lir = generate_lir(_two_branches())
    optimize_lir(lir, ctx=ctx)
    assert ctx.runs["schedule"] == 1 and ctx.changes.get("schedule") == 1
    assert set(ctx.timings) == set(ctx.runs)
    assert ctx.dumps and ctx.dumps[0][0] == "after share-buffers" and "lir main" in ctx.dumps[0][1]


def test_debug_mode_names_a_pass_that_breaks_the_ir() -> None:
    @lir_pass("test-break-lifetimes")
    def _break(lir: LIRFunction, ctx: LIRPassContext) -> bool:
        """Drop every dealloc (a broken pass)."""
        lir.instrs = [i for i in lir.instrs if i.kind != DEALLOC]
        return True

    try:
        lir = generate_lir(_two_branches())
        with pytest.raises(PassError, match="(?s)test-break-lifetimes.*never deallocated"):
            LIRPassManager(["test-break-lifetimes"]).run(lir, LIRPassContext(debug=True))
        lir = generate_lir(_two_branches())
        LIRPassManager(["test-break-lifetimes"]).run(lir, LIRPassContext(debug=False))
        with pytest.raises(GlowVerifyError):
            lir.verify()
    finally:
        _PASSES.pop("test-break-lifetimes", None)
    assert ALLOC  # (imported for readers of the table)
