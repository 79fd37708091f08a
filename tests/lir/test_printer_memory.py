"""The text printer (golden) and the memory plan's figures and heuristics."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.ir.graph import Function
from glow_core.lir import format_lir
from glow_core.lir.ir import ALIGNMENT
from glow_core.lir.memory import check_plan
from glow_core.lircompiler import build_lir, generate_lir, memory_report, plan_memory
from glow_core.lircompiler.plan_memory import HEURISTICS
from tests.lir.lirutil import check_same, f32, node


def small() -> Function:
    fn = Function("main")
    x = fn.add_input("x", f32(2, 3))
    w = fn.add_constant(np.ones((2, 4), np.float32), "w")
    a = node(fn, "Exp", x, name="exp")
    r = node(fn, "Reshape", a, shape=(3, 2), name="flat")
    n = node(fn, "Neg", r, name="neg")
    m = node(fn, "MatMul", n, w, name="mm")
    fn.set_output("y", node(fn, "Relu", m, name="relu"))
    fn.set_output("x_copy", x)
    return fn


GOLDEN = """\
lir main {
  weights:
    %x       input     float32[2,3]          24 bytes
    %w       constant  float32[2,4]          32 bytes
    %y       output    float32[3,4]          48 bytes
    %x_copy  output    float32[2,3]          24 bytes
  activations: 2, arena 128 bytes, lower bound 128, naive 128
    %exp     arena     float32[2,3]          24 bytes  @ 0           live [1, 7]
    %mm      arena     float32[3,4]          48 bytes  @ 64          live [5, 9]
  views:
    %flat    view of   float32[3,2]  %exp + 0 bytes
  code:
    0  copy @out %x_copy, @in %x
    1  alloc @out %exp
    2  Exp @out %exp, @in %x
    3  tensorview @out %flat : float32[3,2], @in %exp {offset=0}
    4  Neg @out %flat, @in %flat
    5  alloc @out %mm
    6  MatMul @out %mm, @in %flat, @in %w
    7  dealloc @in %exp
    8  Relu @out %y, @in %mm
    9  dealloc @in %mm
}"""


def test_printer_golden() -> None:
    lir = build_lir(small(), debug=True)
    assert format_lir(lir) == GOLDEN
    assert lir.dump() == GOLDEN
    check_same(small(), lir=lir)


def test_printer_without_plan_and_with_omitted_operands() -> None:
    fn = Function("f")
    img = fn.add_input("img", f32(1, 2, 3, 3))
    w = fn.add_constant(np.ones((1, 2, 1, 1), np.float32), "w")
    fn.set_output("y", fn.create("Conv", [img, w, None], {"strides": (1, 1), "pads": (0, 0, 0, 0),
                                                          "dilations": (1, 1), "group": 1}, name="conv").result)
    text = format_lir(generate_lir(fn))
    assert "activations: 0 (no memory plan yet)" in text
    assert "Conv @out %y, @in %img, @in %w, @in - {" in text


def chain() -> Function:
    """Four MatMuls; activations of 512, 128 and 1024 bytes, each live across two instructions."""
    fn = Function("main")
    x = fn.add_input("x", f32(1, 64))
    h = x
    for i, (k, n) in enumerate([(64, 128), (128, 32), (32, 256), (256, 4)]):
        h = node(fn, "MatMul", h, fn.add_constant(np.full((k, n), 0.01, np.float32), f"w{i}"), name=f"mm{i}")
    fn.set_output("y", h)
    return fn


def test_memory_figures_of_a_chain() -> None:
    lir = build_lir(chain(), debug=True)
    r = memory_report(lir)
    assert (r.naive_bytes, r.lower_bound_bytes, r.arena_bytes) == (512 + 128 + 1024, 128 + 1024, 1024 + 128)
    assert r.activations == 3 and r.ratio == 1.0 and r.heuristic in HEURISTICS
    assert set(r.candidates) == set(HEURISTICS)
    offsets = {a.name: lir.plan.offsets[id(a)] for a in lir.activations}  # type: ignore[union-attr]
    assert offsets["mm0"] == offsets["mm2"]  # disjoint lifetimes share bytes
    assert offsets["mm1"] not in (offsets["mm0"], offsets["mm2"])
    text = r.format()
    assert "arena:" in text and "lower bound:" in text and "naive:" in text
    check_same(chain(), lir=lir)


@pytest.mark.parametrize("heuristic", sorted(HEURISTICS))
def test_every_heuristic_gives_a_valid_plan(heuristic: str) -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(1, 37))  # odd sizes: offsets must still be aligned
    rng = np.random.default_rng(1)
    vals = [x]
    for i in range(40):
        a = vals[rng.integers(len(vals))]
        k = int(rng.integers(1, 50))
        vals.append(node(fn, "MatMul", a, fn.add_constant(np.full((a.type.shape[1], k), 0.1, np.float32))))
    fn.set_output("y", vals[-1])
    fn.set_output("z", vals[20])
    lir = build_lir(fn, debug=True)
    plan = plan_memory(lir, [heuristic])
    assert check_plan(lir, plan) == []
    assert all(off % ALIGNMENT == 0 for off in plan.offsets.values())
    assert plan.report.arena_bytes >= plan.report.lower_bound_bytes
    assert plan.report.naive_bytes >= plan.report.arena_bytes
    check_same(fn, lir=lir)


def test_empty_and_zero_size_activations() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(0, 3))
    fn.set_output("y", node(fn, "Neg", node(fn, "Exp", x)))
    lir = build_lir(fn, debug=True)
    assert memory_report(lir).arena_bytes == 0
    check_same(fn, lir=lir)
    fn = Function("main")
    fn.set_output("y", fn.add_input("x", f32(2)))
    r = memory_report(build_lir(fn, debug=True))
    assert (r.arena_bytes, r.naive_bytes, r.lower_bound_bytes, r.ratio) == (0, 0, 0, 1.0)
