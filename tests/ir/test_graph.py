"""The graph API: users, replace_all_uses_with, erase_node, insertion points, names."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import GlowError, GlowTypeError, GraphError
from glow_core.ir import Constant, ElemKind, Function, Module, NodeOutput, Placeholder, TensorType
from tests.ir.irutil import f32, names, small_function


def test_create_records_users_per_operand() -> None:
    fn = Function()
    x = fn.add_input("x", f32(4))
    add = fn.create("Add", [x, x])
    assert x.users == [(add, 0), (add, 1)]
    assert x.user_nodes() == [add]  # one entry per reading node
    assert add.inputs == (x, x)
    assert isinstance(add.result, NodeOutput) and add.result.producer is add
    assert add.result.type == f32(4)


def test_set_input_moves_the_user_entry() -> None:
    fn, v = small_function()
    x, c, add = v["x"], v["c"], v["add"]
    add.set_input(1, x)
    assert c.users == []
    assert x.users == [(add, 0), (add, 1)]
    add.set_input(0, c)
    assert x.users == [(add, 1)] and c.users == [(add, 0)]
    fn.verify()


def test_erase_node_drops_its_user_entries() -> None:
    fn, v = small_function()
    relu = v["relu"]
    extra = fn.create("Relu", [v["add"].result], name="extra")
    assert v["add"].result.user_nodes() == [relu, extra]
    fn.erase_node(extra)
    assert v["add"].result.users == [(relu, 0)]
    assert extra.function is None and extra not in fn.nodes
    fn.verify()


def test_erase_node_refuses_a_live_node_and_names_the_reader() -> None:
    fn, v = small_function()
    with pytest.raises(GraphError, match="cannot erase Add 'add'.*still used by Relu 'relu'"):
        fn.erase_node(v["add"])
    assert v["add"] in fn.nodes
    fn.verify()


def test_erase_node_refuses_a_function_output() -> None:
    fn, v = small_function()
    assert v["relu"].result.users == []
    with pytest.raises(GraphError, match="function output"):
        fn.erase_node(v["relu"])
    assert v["relu"] in fn.nodes


def test_erase_node_refuses_a_foreign_or_erased_node() -> None:
    fn, v = small_function()
    _other, w = small_function("other")
    with pytest.raises(GraphError, match="not a node of function main"):
        fn.erase_node(w["add"])
    extra = fn.create("Relu", [v["x"]])
    fn.erase_node(extra)
    with pytest.raises(GraphError, match="erased or foreign"):
        fn.erase_node(extra)


def test_replace_all_uses_with_rewires_users_and_outputs() -> None:
    fn, v = small_function()
    x, add, relu = v["x"], v["add"], v["relu"]
    neg = fn.create("Relu", [x], name="other")
    fn.set_output("again", relu.result)
    count = fn.replace_all_uses_with(relu.result, neg.result)
    assert count == 2  # two output slots
    assert fn.outputs == [("y", neg.result), ("again", neg.result)]
    count = fn.replace_all_uses_with(add.result, x)
    assert count == 1
    assert relu.inputs == (x,) and add.result.users == []
    fn.erase_node(relu)
    fn.erase_node(add)
    fn.verify()
    assert names(fn.nodes) == ["other"]


def test_replace_all_uses_with_refuses_a_type_mismatch() -> None:
    fn, v = small_function()
    z = fn.add_input("z", f32(3, 2))
    with pytest.raises(GraphError, match="differ in type"):
        fn.replace_all_uses_with(v["add"].result, z)
    assert v["add"].result.users == [(v["relu"], 0)]  # nothing changed


def test_replace_all_uses_with_refuses_a_foreign_value_and_ignores_itself() -> None:
    fn, v = small_function()
    _other, w = small_function("other")
    with pytest.raises(GraphError, match="another function"):
        fn.replace_all_uses_with(v["add"].result, w["add"].result)
    assert fn.replace_all_uses_with(v["x"], v["x"]) == 0


def test_inserting_before_and_after_place_new_nodes() -> None:
    fn, v = small_function()
    x, add, _relu = v["x"], v["add"], v["relu"]
    with fn.inserting_before(add):
        fn.create("Relu", [x], name="b1")
        fn.create("Relu", [x], name="b2")  # keeps order: b1, b2, add
    with fn.inserting_after(add):
        fn.create("Relu", [add.result], name="a1")
    assert names(fn.nodes) == ["b1", "b2", "add", "a1", "relu"]
    fn.create("Relu", [x], name="end")  # the insertion point is restored: append
    assert names(fn.nodes)[-1] == "end"
    fn.verify()


def test_inserting_point_survives_erasing_an_earlier_node() -> None:
    fn, v = small_function()
    x = v["x"]
    dead = fn.create("Relu", [x], name="dead")
    first = fn.create("Relu", [x], name="first")
    with fn.inserting_before(first):
        fn.create("Relu", [x], name="p")
        fn.erase_node(dead)
        fn.create("Relu", [x], name="q")
    assert names(fn.nodes) == ["add", "relu", "p", "q", "first"]
    fn.verify()


def test_inserting_before_a_foreign_node_is_refused() -> None:
    fn, _ = small_function()
    _other, w = small_function("other")
    with pytest.raises(GraphError), fn.inserting_before(w["add"]):
        pass  # pragma: no cover


def test_create_checks_operands() -> None:
    fn, v = small_function()
    _other, w = small_function("other")
    with pytest.raises(GraphError, match="another function"):
        fn.create("Relu", [w["add"].result])
    with pytest.raises(GlowError, match="unknown node kind 'NoSuchKind'"):
        fn.create("NoSuchKind", [v["x"]])
    with pytest.raises(GlowTypeError, match="takes operands"):
        fn.create("Add", [v["x"]])
    with pytest.raises(GlowTypeError, match="required operand is missing"):
        fn.create("Add", [v["x"], None])
    i = fn.add_input("i", TensorType(ElemKind.INT32, (2, 3)))
    with pytest.raises(GlowTypeError, match=r"Add 'bad' \(from ONNX node 'n7'\).*same element kind"):
        fn.create("Add", [v["x"], i], name="bad", origin="n7")
    with pytest.raises(GlowTypeError, match="cannot be broadcast"):
        fn.create("Add", [v["x"], fn.add_input("w", f32(4))])
    assert names(fn.nodes) == ["add", "relu"]  # nothing was added by the failures
    fn.verify()


def test_an_erased_nodes_result_cannot_be_used() -> None:
    fn, v = small_function()
    extra = fn.create("Relu", [v["x"]])
    fn.erase_node(extra)
    with pytest.raises(GraphError, match="erased"):
        fn.create("Relu", [extra.result])
    with pytest.raises(GraphError):
        fn.set_output("z", extra.result)


def test_names_are_unique() -> None:
    fn, v = small_function()
    a = fn.create("Relu", [v["x"]], name="relu")
    b = fn.create("Relu", [v["x"]], name="relu")
    assert {a.name, b.name, "relu"} == {"relu", "relu_1", "relu_2"}
    c = fn.add_constant(np.zeros(2, np.float32), "x")  # the input's name is taken
    assert c.name != "x"
    with pytest.raises(GraphError, match="already used"):
        fn.add_input("x", f32(1))
    fn.verify()


def test_node_keeps_its_origin_for_messages() -> None:
    _fn, v = small_function()
    assert v["add"].origin == "onnx_add"
    assert v["add"].where() == "Add 'add' (from ONNX node 'onnx_add')"
    assert v["relu"].where() == "Relu 'relu'"


def test_result_of_a_multi_result_node_is_refused(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    scratch_kinds("TestTwo", inputs=("X",), outputs=("A", "B"), infer=lambda t, a: [t[0], t[0]])
    fn = Function()
    x = fn.add_input("x", f32(2))
    node = fn.create("TestTwo", [x], name="two")
    assert [o.name for o in node.outputs] == ["two.A", "two.B"]
    assert [o.index for o in node.outputs] == [0, 1]
    with pytest.raises(GraphError, match="2 results"):
        _ = node.result


def test_results_of_a_variadic_kind_are_numbered(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    scratch_kinds("TestSplitK", inputs=("X",), outputs=("Parts",), variadic_outputs=True,
                  infer=lambda t, a: [t[0]] * 3)
    fn = Function()
    node = fn.create("TestSplitK", [fn.add_input("x", f32(2))], name="sp")
    assert [o.name for o in node.outputs] == ["sp.0", "sp.1", "sp.2"]
    fn.create("Add", [node.outputs[0], node.outputs[2]], name="sum")
    from glow_core.ir.printer import to_dot

    dot = to_dot(fn)
    assert 'n0 -> n1 [label="#0 float32[2]"];' in dot and 'n0 -> n1 [label="#2 float32[2]"];' in dot


def test_constants_are_read_only_and_leave_the_callers_array_alone() -> None:
    fn = Function()
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = fn.add_constant(arr, "w")
    assert isinstance(c, Constant) and c.type == f32(2, 3)
    with pytest.raises(ValueError):
        c.payload[0, 0] = 1
    assert arr.flags.writeable
    scalar = fn.add_constant(np.array(3, np.int64), "s")
    assert scalar.type == TensorType(ElemKind.INT64, ())
    with pytest.raises(GlowTypeError, match="does not match"):
        fn.add_constant(arr, "bad", type=f32(3, 2))


def test_queries_and_unused_constants() -> None:
    fn, v = small_function()
    fn.add_constant(np.zeros(1, np.float32), "unused")
    assert fn.count_by_kind() == {"Add": 1, "Relu": 1}
    assert fn.nodes_of("Relu") == [v["relu"]]
    assert fn.erase_unused_constants() == 1
    assert [c.name for c in fn.constants] == ["c"]
    assert isinstance(fn.inputs[0], Placeholder)
    assert fn.is_output(v["relu"].result) and not fn.is_output(v["add"].result)


def test_module_holds_uniquely_named_functions() -> None:
    m = Module()
    f = m.create_function("main")
    f.add_input("x", f32(1))
    with pytest.raises(GraphError, match="already has a function"):
        m.create_function("main")
    m.create_function("other")
    assert list(m.functions) == ["main", "other"]
    m.verify()
