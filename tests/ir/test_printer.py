"""The text dump (golden) and the DOT export."""

from __future__ import annotations

import re

import numpy as np

from glow_core.ir import AttrType, ElemKind, Function, attr
from glow_core.ir.defs.common import like_input
from glow_core.ir.printer import format_attrs, format_function, to_dot
from tests.ir.irutil import f32, small_function

GOLDEN = """\
function main(%x: float32[2,3]) -> (y: float32[2,3]) {
  const %c: float32[2,3]
  %add = Add(%x, %c) : float32[2,3]  # onnx_add
  %relu = Relu(%add) : float32[2,3]
  return y = %relu
}"""


def test_dump_golden() -> None:
    fn, _ = small_function()
    assert fn.dump() == GOLDEN
    assert format_function(fn) == GOLDEN


def test_dump_attributes_omitted_operands_and_multiple_results(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    scratch_kinds(
        "TestScale", inputs=("X", "Bias?"), outputs=("Y", "Mask"),
        attrs=(attr("alpha", AttrType.FLOAT, 1.0), attr("axes", AttrType.INTS), attr("mode", AttrType.STRING, "fast"),
               attr("to", AttrType.ELEM, ElemKind.FLOAT32), attr("flag", AttrType.BOOL, False)),
        infer=lambda t, a: [t[0], t[0]],
    )
    fn = Function("f")
    x = fn.add_input("x", f32(4))
    node = fn.create("TestScale", [x, None], {"alpha": 0.5, "axes": [0]}, name="s", origin="scale_0")
    fn.set_output("y", node.outputs[0])
    fn.set_output("m", node.outputs[1])
    assert fn.dump() == (
        "function f(%x: float32[4]) -> (y: float32[4], m: float32[4]) {\n"
        "  %s.Y, %s.Mask = TestScale(%x, -) {alpha=0.5, axes=[0], mode=fast, to=float32, flag=False}"
        " : float32[4], float32[4]  # scale_0\n"
        "  return y = %s.Y\n"
        "  return m = %s.Mask\n"
        "}"
    )


def test_attribute_formatting() -> None:
    assert format_attrs({}) == ""
    assert format_attrs({"k": (1, 2), "eps": 1e-5}) == " {k=[1,2], eps=1e-05}"
    assert format_attrs({"v": np.array([1.5, 2.0], np.float32)}) == " {v=[1.5,2. ]}"
    assert format_attrs({"big": np.zeros((3, 4), np.float32)}) == " {big=tensor<float32[3, 4]>}"


def test_quantized_types_print_scale_and_offset() -> None:
    from glow_core.ir import TensorType

    t = TensorType(ElemKind.INT8Q, (2,), scale=0.5, offset=-3)
    assert str(t) == "int8q<s=0.5,o=-3>[2]"


def test_dot_has_every_node_and_edge() -> None:
    fn, _ = small_function()
    dot = to_dot(fn)
    assert dot.startswith('digraph "main" {') and dot.rstrip().endswith("}")
    assert re.search(r'in0 \[.*label="x\\nfloat32\[2,3\]"', dot)
    assert re.search(r'c0 \[.*label="c\\nfloat32\[2,3\]"', dot)
    assert 'n0 [shape=box, style=rounded, label="Add\\nadd"];' in dot
    assert 'n1 [shape=box, style=rounded, label="Relu\\nrelu"];' in dot
    for edge in ("in0 -> n0", "c0 -> n0", "n0 -> n1", "n1 -> out0"):
        assert edge in dot, edge
    assert 'label="float32[2,3]"' in dot  # edges carry types
    for line in dot.splitlines():  # every statement is on one line: labels use \n escapes
        assert line.endswith(("{", "}", ";")), line


def test_dot_of_a_function_returning_a_constant_and_odd_names() -> None:
    fn = Function('we"ird')
    c = fn.add_constant(np.ones(2, np.float32), 'c"1')
    fn.set_output("out", c)
    x = fn.add_input("x", f32(2))
    node = fn.create("Relu", [x], name='r"q')
    fn.set_output("r", node.result)
    dot = to_dot(fn)
    assert 'digraph "we\\"ird" {' in dot
    assert "c0 -> out0;" in dot
    assert 'label="Relu\\nr\\"q"' in dot


def test_like_input_rule_is_usable_by_scratch_kinds(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    scratch_kinds("TestSame", inputs=("X",), infer=like_input(0))
    fn = Function()
    x = fn.add_input("x", f32(3))
    assert fn.create("TestSame", [x]).result.type == f32(3)
