"""``Function.verify()`` catches every broken invariant, and reports them all at once."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import GlowVerifyError
from glow_core.ir import ElemKind, Function, Module, TensorType
from tests.ir.irutil import f32, small_function


def test_a_well_formed_function_verifies() -> None:
    fn, _ = small_function()
    fn.verify()
    m = Module()
    m.functions["main"] = fn
    m.verify()


def test_wrong_result_type() -> None:
    fn, v = small_function()
    v["add"].result.type = TensorType(ElemKind.INT32, (2, 3))
    with pytest.raises(GlowVerifyError, match=r"Add 'add'.*result types \['int32\[2,3\]'\] differ from its type rule"):
        fn.verify()


def test_operand_types_the_rule_refuses() -> None:
    fn, v = small_function()
    v["x"].type = f32(4)  # no longer broadcasts with the constant
    with pytest.raises(GlowVerifyError, match="cannot be broadcast"):
        fn.verify()


def test_use_before_definition() -> None:
    fn, _v = small_function()
    fn.nodes.reverse()  # relu now comes before the add it reads
    with pytest.raises(GlowVerifyError, match=r"Relu 'relu': operand 0 %add is not defined before it"):
        fn.verify()


def test_a_node_reading_itself() -> None:
    fn, v = small_function()
    relu = v["relu"]
    relu.set_input(0, None)
    relu._inputs[0] = relu.result
    relu.result.users.append((relu, 0))
    with pytest.raises(GlowVerifyError, match="not defined before it"):
        fn.verify()


def test_foreign_value() -> None:
    fn, v = small_function()
    _other, w = small_function("other")
    v["relu"].set_input(0, w["add"].result)  # set_input trusts its caller; verify does not
    with pytest.raises(GlowVerifyError, match=r"operand 0 %add is not defined before it \(order or ownership\)"):
        fn.verify()


def test_foreign_constant_and_undefined_output() -> None:
    fn, v = small_function()
    stray = fn.add_constant(np.ones((2, 3), np.float32), "stray")
    fn.constants.remove(stray)  # no longer owned by the function
    v["add"].set_input(1, stray)
    fn.outputs.append(("z", stray))
    with pytest.raises(GlowVerifyError) as info:
        fn.verify()
    text = str(info.value)
    assert "operand 1 %stray is not defined" in text
    assert "output 'z' reads %stray, which is not defined" in text


def test_duplicate_names() -> None:
    fn, v = small_function()
    v["relu"].name = "add"
    with pytest.raises(GlowVerifyError, match="name 'add' is used by both"):
        fn.verify()
    fn, v = small_function()
    v["c"].name = "x"
    with pytest.raises(GlowVerifyError, match="name 'x' is used by both an input and a constant"):
        fn.verify()


def test_stale_users() -> None:
    fn, v = small_function()
    gone = fn.create("Relu", [v["x"]], name="gone")
    fn.erase_node(gone)
    v["x"].users.append((gone, 0))
    with pytest.raises(GlowVerifyError, match=r"%x lists a stale user Relu 'gone'"):
        fn.verify()


def test_stale_user_with_an_impossible_operand_index() -> None:
    fn, v = small_function()
    v["add"].result.users.append((v["relu"], 5))
    v["x"].users.append((v["add"], 7))
    with pytest.raises(GlowVerifyError) as info:
        fn.verify()
    assert "%add lists a stale user Relu 'relu'" in str(info.value)
    assert "%x lists a stale user Add 'add'" in str(info.value)


def test_missing_user_entry() -> None:
    fn, v = small_function()
    v["x"].users.clear()
    with pytest.raises(GlowVerifyError, match=r"operand 0 %x does not list it as a user"):
        fn.verify()


def test_node_listed_twice_or_owned_elsewhere() -> None:
    fn, v = small_function()
    fn.nodes.append(v["relu"])
    with pytest.raises(GlowVerifyError, match="is listed twice"):
        fn.verify()
    fn, v = small_function()
    v["add"].function = Function("elsewhere")
    with pytest.raises(GlowVerifyError, match="owned by another function"):
        fn.verify()


def test_constant_payload_must_match_its_type() -> None:
    fn, v = small_function()
    v["c"].type = f32(3, 2)
    with pytest.raises(GlowVerifyError, match="payload does not match"):
        fn.verify()


def test_all_problems_are_reported_at_once() -> None:
    fn, v = small_function()
    v["relu"].name = "add"
    v["x"].users.clear()
    with pytest.raises(GlowVerifyError) as info:
        fn.verify()
    lines = str(info.value).splitlines()
    assert lines[0] == "function main is invalid:"
    assert len(lines) == 3
