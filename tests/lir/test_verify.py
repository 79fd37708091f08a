"""The LIR verifier accepts what IRGen makes and rejects each broken invariant with a clear message."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import GlowVerifyError
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir import Weight
from glow_core.lir.instructions import COPY, TENSORVIEW, Dir
from glow_core.lir.ir import Instr, LIRFunction, Operand, alloc, dealloc, tensorview
from glow_core.lircompiler import plan_memory
from tests.lir.lirutil import f32


def base() -> tuple[LIRFunction, dict[str, object]]:
    """x -> a = Exp(x) -> y = Neg(a), with a constant c and a valid layout."""
    lir = LIRFunction("f")
    v = {
        "x": lir.add_weight("x", f32(4), Weight.INPUT),
        "c": lir.add_weight("c", f32(4), Weight.CONSTANT, np.zeros(4, np.float32)),
        "y": lir.add_weight("y", f32(4), Weight.OUTPUT),
        "a": lir.new_activation("a", f32(4)),
    }
    lir.instrs = [
        alloc(v["a"]),  # type: ignore[arg-type]
        Instr("Exp", [Operand(v["a"], Dir.OUT), Operand(v["x"], Dir.IN)], name="exp"),  # type: ignore[arg-type]
        Instr("Neg", [Operand(v["y"], Dir.OUT), Operand(v["a"], Dir.IN)], name="neg"),  # type: ignore[arg-type]
        dealloc(v["a"]),  # type: ignore[arg-type]
    ]
    return lir, v


def rejects(lir: LIRFunction, pattern: str) -> None:
    with pytest.raises(GlowVerifyError, match=pattern):
        lir.verify()


def test_valid_function_passes() -> None:
    lir, _ = base()
    lir.verify()
    plan_memory(lir)
    lir.verify()


def test_use_after_dealloc() -> None:
    lir, _v = base()
    lir.instrs[2], lir.instrs[3] = lir.instrs[3], lir.instrs[2]
    rejects(lir, r"\[3\] Neg 'neg': operand 1 uses activation %a after its dealloc")


def test_use_before_alloc_and_double_alloc_and_missing_dealloc() -> None:
    lir, v = base()
    lir.instrs = lir.instrs[1:] + [alloc(v["a"])]  # type: ignore[arg-type]
    rejects(lir, "uses activation %a before its alloc")
    lir, v = base()
    lir.instrs.insert(1, alloc(v["a"]))  # type: ignore[arg-type]
    rejects(lir, "activation %a is allocated twice")
    lir, v = base()
    lir.instrs.pop()
    rejects(lir, "activation %a is never deallocated")
    lir, v = base()
    lir.instrs.append(dealloc(v["a"]))  # type: ignore[arg-type]
    rejects(lir, "activation %a is deallocated twice")


def test_write_to_a_constant() -> None:
    lir, v = base()
    lir.instrs.insert(3, Instr("Neg", [Operand(v["c"], Dir.OUT), Operand(v["a"], Dir.IN)], name="bad"))  # type: ignore[arg-type]
    rejects(lir, "Neg 'bad': writes constant weight %c")


def test_write_to_an_input_even_through_a_view() -> None:
    lir, v = base()
    xv = lir.new_view("xv", f32(2, 2), v["x"])  # type: ignore[arg-type]
    av = lir.new_view("av", f32(2, 2), v["a"])  # type: ignore[arg-type]
    lir.instrs[2:2] = [tensorview(xv), tensorview(av), Instr("Neg", [Operand(xv, Dir.OUT), Operand(av, Dir.IN)])]
    rejects(lir, "writes input weight %x through view %xv")


def test_read_before_write_and_unwritten_output() -> None:
    lir, _ = base()
    del lir.instrs[1]  # nobody writes a
    rejects(lir, "reads %a before anything writes activation %a")
    lir, _v = base()
    del lir.instrs[2]
    rejects(lir, "output weight %y is never written")


def test_view_bounds_and_definition() -> None:
    lir, v = base()
    big = lir.new_view("big", f32(2), v["a"], offset=12)  # type: ignore[arg-type]
    lir.instrs.insert(2, tensorview(big))
    rejects(lir, r"view %big \(8 bytes at offset 12\) exceeds its base %a \(16 bytes\)")
    lir, v = base()
    undefined = lir.new_view("u", f32(4), v["a"])  # type: ignore[arg-type]
    lir.instrs[2] = Instr("Neg", [Operand(v["y"], Dir.OUT), Operand(undefined, Dir.IN)], name="neg")  # type: ignore[arg-type]
    rejects(lir, "uses view %u before its tensorview")


def test_operand_types_directions_and_counts() -> None:
    lir, v = base()
    lir.instrs[2] = Instr("Neg", [Operand(v["y"], Dir.OUT), Operand(lir.add_weight("z", f32(3), Weight.INPUT), Dir.IN)])  # type: ignore[arg-type]
    rejects(lir, r"out operand types float32\[4\] differ from the type rule's float32\[3\]")
    lir, v = base()
    lir.instrs[2] = Instr("Neg", [Operand(v["y"], Dir.OUT), Operand(v["a"], Dir.OUT)])  # type: ignore[arg-type]
    rejects(lir, "operand 1 \\(Input\\) is @out, the table says @in")
    lir, v = base()
    lir.instrs[2] = Instr("Add", [Operand(v["y"], Dir.OUT), Operand(v["a"], Dir.IN)])  # type: ignore[arg-type]
    rejects(lir, "1 out and 1 in operands do not match the table")
    lir, v = base()
    ints = lir.add_weight("i", TensorType(ElemKind.INT32, (4,)), Weight.OUTPUT)
    lir.instrs.insert(3, Instr(COPY, [Operand(ints, Dir.OUT), Operand(v["a"], Dir.IN)]))  # type: ignore[arg-type]
    rejects(lir, r"copy from float32\[4\] to int32\[4\]: types differ")
    lir, v = base()
    lir.instrs.insert(1, Instr("NoSuchKind", []))
    rejects(lir, "unknown instruction kind 'NoSuchKind'")
    assert TENSORVIEW


def test_memory_plan_overlap_is_reported() -> None:
    lir, v = base()
    b = lir.new_activation("b", f32(4))
    lir.instrs[2:2] = [alloc(b), Instr("Abs", [Operand(b, Dir.OUT), Operand(v["a"], Dir.IN)]), dealloc(b)]  # type: ignore[arg-type]
    plan = plan_memory(lir)
    lir.verify()
    assert plan.offsets[id(b)] != plan.offsets[id(v["a"])]
    plan.offsets[id(b)] = plan.offsets[id(v["a"])]
    rejects(lir, "live activations %a .* and %b .* overlap")
    plan.offsets[id(b)] = 8
    rejects(lir, "not 64-byte aligned")
