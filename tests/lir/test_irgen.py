"""IRGen: weights, activations, views, and the hard cases of function outputs."""

from __future__ import annotations

import numpy as np

from glow_core.ir.graph import Function
from glow_core.lir import Weight
from glow_core.lir.instructions import ALLOC, COPY, DEALLOC, Dir
from glow_core.lir.ir import Activation, View
from glow_core.lircompiler import generate_lir
from tests.lir.lirutil import by_name, check_same, f32, kinds, node


def small() -> Function:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 3))
    c = fn.add_constant(np.ones((2, 3), np.float32), "c")
    a = node(fn, "Add", x, c, name="add")
    fn.set_output("y", node(fn, "Relu", a, name="relu"))
    return fn


def test_weights_roles_and_activation_lifetimes() -> None:
    lir = generate_lir(small())
    roles = {w.name: w.role for w in lir.weights}
    assert roles == {"x": Weight.INPUT, "c": Weight.CONSTANT, "y": Weight.OUTPUT}
    assert [a.name for a in lir.activations] == ["add"]
    assert [i.kind for i in lir.instrs] == [ALLOC, "Add", "Relu", DEALLOC]
    add = by_name(lir, "add")
    assert [op.dir for op in add.operands] == [Dir.OUT, Dir.IN, Dir.IN]
    assert [op.value.name for op in add.operands] == ["add", "x", "c"]  # type: ignore[union-attr]
    lir.verify()
    check_same(small())


def test_output_is_written_straight_into_its_weight() -> None:
    lir = generate_lir(small())
    relu = by_name(lir, "relu")
    out = relu.outs[0].value
    assert isinstance(out, Weight) and out.role == Weight.OUTPUT and out.io_name == "y"
    assert COPY not in kinds(lir)


def test_output_also_read_by_a_later_instruction_is_read_from_the_output_weight() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(4))
    r = node(fn, "Relu", x, name="relu")
    fn.set_output("first", r)
    fn.set_output("second", node(fn, "Neg", r, name="neg"))
    lir = generate_lir(fn)
    first = next(w for w in lir.outputs if w.io_name == "first")
    assert by_name(lir, "relu").outs[0].value is first
    assert by_name(lir, "neg").ins[0].value is first
    assert lir.activations == []
    out = check_same(fn, {"x": np.array([-1, 2, -3, 4], np.float32)})
    np.testing.assert_array_equal(out["second"], [0, -2, 0, -4])


def test_output_that_is_an_input_or_a_constant_gets_a_copy() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(3))
    c = fn.add_constant(np.array([1, 2, 3], np.float32), "c")
    fn.set_output("x_again", x)
    fn.set_output("c_out", c)
    fn.set_output("sum", node(fn, "Add", x, c))
    lir = generate_lir(fn)
    copies = [i for i in lir.instrs if i.kind == COPY]
    assert sorted((i.outs[0].value.name, i.ins[0].value.name) for i in copies) == [  # type: ignore[union-attr]
        ("c_out", "c"), ("x_again", "x")]
    feeds = {"x": np.array([5, 6, 7], np.float32)}
    out = check_same(fn, feeds)
    assert not np.shares_memory(out["x_again"], feeds["x"])
    np.testing.assert_array_equal(out["c_out"], [1, 2, 3])


def test_output_named_like_an_input_keeps_its_io_name() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2))
    fn.set_output("x", x)
    lir = generate_lir(fn)
    (out,) = lir.outputs
    assert out.io_name == "x" and out.name != "x"
    check_same(fn)


def test_two_outputs_of_the_same_value() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 2))
    r = node(fn, "Relu", x, name="relu")
    fn.set_output("a", r)
    fn.set_output("b", r)
    lir = generate_lir(fn)
    a, b = lir.outputs
    assert by_name(lir, "relu").outs[0].value is a
    (copy,) = [i for i in lir.instrs if i.kind == COPY]
    assert copy.outs[0].value is b and copy.ins[0].value is a
    out = check_same(fn)
    assert not np.shares_memory(out["a"], out["b"])


def test_reshape_is_a_view_not_a_copy() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 6))
    r = node(fn, "Relu", x, name="relu")
    flat = node(fn, "Reshape", r, shape=(3, 4), name="flat")
    fn.set_output("y", node(fn, "Neg", flat, name="neg"))
    lir = generate_lir(fn)
    assert "Reshape" not in kinds(lir)
    (view,) = lir.views
    assert view.base is by_name(lir, "relu").outs[0].value and view.offset == 0 and view.type == f32(3, 4)
    assert by_name(lir, "neg").ins[0].value is view
    # the relu activation lives until the reader of its view
    names = [i.kind + ":" + (i.operands[0].value.name if i.operands else "") for i in lir.instrs]  # type: ignore[union-attr]
    assert names.index("dealloc:relu") > names.index("Neg:y")
    check_same(fn)


def test_contiguous_slice_is_a_view_at_an_offset_and_strided_slice_is_computed() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(4, 3, 2))
    r = node(fn, "Relu", x, name="relu")
    rows = node(fn, "Slice", r, starts=(1, 0, 0), sizes=(2, 3, 2), steps=(1, 1, 1), name="rows")
    one = node(fn, "Slice", r, starts=(3, 1, 0), sizes=(1, 2, 2), steps=(1, 1, 1), name="one")
    cols = node(fn, "Slice", r, starts=(0, 0, 1), sizes=(4, 3, 1), steps=(1, 1, 1), name="cols")
    fn.set_output("y_rows", node(fn, "Neg", rows))
    fn.set_output("y_one", node(fn, "Neg", one))
    fn.set_output("y_cols", node(fn, "Neg", cols))
    lir = generate_lir(fn)
    views = {v.name: v for v in lir.views}
    assert views["rows"].offset == 1 * 3 * 2 * 4
    assert views["one"].offset == (3 * 6 + 1 * 2) * 4
    assert "cols" not in views and kinds(lir).count("Slice") == 1
    check_same(fn)


def test_output_that_is_a_view_of_an_input() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 3))
    fn.set_output("flat", node(fn, "Reshape", x, shape=(6,)))
    lir = generate_lir(fn)
    (copy,) = [i for i in lir.instrs if i.kind == COPY]
    src = copy.ins[0].value
    assert isinstance(src, View) and src.root is lir.inputs[0]
    check_same(fn)


def test_multi_output_node_with_an_unused_result_and_an_omitted_operand() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 5))
    topk = fn.create("TopK", [x], {"k": 2, "axis": 1}, name="topk")
    fn.set_output("idx", topk.outputs[1])
    w = fn.add_constant(np.ones((3, 5, 1, 1), np.float32), "w")
    img = fn.add_input("img", f32(1, 5, 2, 2))
    conv = fn.create("Conv", [img, w, None], {"strides": (1, 1), "pads": (0, 0, 0, 0),
                                              "dilations": (1, 1), "group": 1}, name="conv")
    fn.set_output("conv", conv.result)
    lir = generate_lir(fn)
    t = by_name(lir, "topk")
    assert t.n_out == 2 and isinstance(t.outs[0].value, Activation) and isinstance(t.outs[1].value, Weight)
    assert by_name(lir, "conv").ins[2].value is None
    check_same(fn)


def test_graph_function_is_not_modified() -> None:
    fn = small()
    before = fn.dump()
    generate_lir(fn)
    assert fn.dump() == before
