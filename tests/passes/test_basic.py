"""dce, cse and fold-constants: the kind-agnostic cleanup passes."""

from __future__ import annotations

import numpy as np

from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passes.basic import CSE_COMPARE_REPS, FINGERPRINT_SAMPLES, _const_fingerprint
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import check, f, kinds

F32 = np.float32


def new(shape: tuple[int, ...] = (4, 6)) -> tuple[Function, Value]:
    fn = Function()
    return fn, fn.add_input("x", TensorType(ElemKind.FLOAT32, shape))


def test_dce_removes_unread_nodes_and_constants() -> None:
    fn, x = new()
    c = fn.add_constant(f((4, 6)), "c")
    fn.create("Mul", [x, c])  # read by nobody
    fn.set_output("y", fn.create("Neg", [x]).result)
    assert check(fn, "dce", exact=True)
    assert kinds(fn) == {"Neg": 1} and not fn.constants


def test_dce_keeps_outputs_and_what_they_read() -> None:
    fn, x = new()
    a = fn.create("Neg", [x]).result
    fn.set_output("a", a)
    fn.set_output("b", fn.create("Abs", [a]).result)
    assert not check(fn, "dce", exact=True)
    assert kinds(fn) == {"Neg": 1, "Abs": 1}


def test_cse_merges_equal_nodes() -> None:
    fn, x = new()
    fn.set_output("y", fn.create("Add", [fn.create("Neg", [x]).result, fn.create("Neg", [x]).result]).result)
    assert check(fn, FixedPoint("cse", "dce"), exact=True)
    assert kinds(fn) == {"Neg": 1, "Add": 1}


def test_cse_keeps_nodes_with_other_attributes_or_operands() -> None:
    fn, x = new()
    a = fn.create("Transpose", [x], {"perm": (1, 0)}).result
    b = fn.create("Transpose", [fn.create("Neg", [x]).result], {"perm": (1, 0)}).result
    fn.set_output("y", fn.create("Add", [a, b]).result)
    fn.set_output("z", fn.create("LeakyRelu", [x], {"alpha": 0.1}).result)
    fn.set_output("w", fn.create("LeakyRelu", [x], {"alpha": 0.2}).result)
    assert not check(fn, FixedPoint("cse", "dce"), exact=True)
    assert kinds(fn)["Transpose"] == 2 and kinds(fn)["LeakyRelu"] == 2


def test_cse_merges_equal_constants_only() -> None:
    fn, x = new((64, 64))
    w = f((64, 64), seed=3)
    near = w.copy()
    near[17, 5] += 1.0  # outside the strided sample: same fingerprint, different payload
    assert FINGERPRINT_SAMPLES < w.size
    c1, c2, c3 = fn.add_constant(w, "c1"), fn.add_constant(w.copy(), "c2"), fn.add_constant(near, "c3")
    assert _const_fingerprint(c1) == _const_fingerprint(c3)  # the cheap key cannot tell them apart...
    y = fn.create("Add", [fn.create("Mul", [x, c1]).result, fn.create("Mul", [x, c2]).result]).result
    fn.set_output("y", fn.create("Sub", [y, fn.create("Mul", [x, c3]).result]).result)
    assert check(fn, FixedPoint("cse", "dce"), exact=True)
    assert len(fn.constants) == 2  # ...the full comparison does: c1 and c2 merged, c3 kept
    assert kinds(fn) == {"Mul": 2, "Add": 1, "Sub": 1}


def test_cse_many_distinct_constants_of_one_fingerprint() -> None:
    # more distinct payloads than are compared byte by byte: the rest are told apart by their hash
    fn, x = new((64, 64))
    w = f((64, 64), seed=4)
    distinct = CSE_COMPARE_REPS + 3
    payloads = []
    for k in range(distinct):
        p = w.copy()
        p[17, 5] += float(k + 1)  # outside the strided sample: one fingerprint for all
        payloads.append(p)
    consts = [fn.add_constant(p.copy(), f"c{k}_{r}") for r in range(2) for k, p in enumerate(payloads)]
    assert len({_const_fingerprint(c) for c in consts}) == 1
    acc = x
    for c in consts:
        acc = fn.create("Add", [acc, c]).result
    fn.set_output("y", acc)
    assert check(fn, FixedPoint("cse", "dce"), exact=True)
    assert len(fn.constants) == distinct  # each payload once: both copies merged, no two distinct ones
    kept = sorted(float(c.payload[17, 5]) for c in fn.constants)
    assert kept == sorted(float(p[17, 5]) for p in payloads)


def test_cse_constants_of_other_types_are_not_merged() -> None:
    fn = Function()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (6,)))
    a = fn.add_constant(np.zeros(6, F32), "a")
    b = fn.add_constant(np.zeros((2, 3), F32), "b")
    fn.set_output("y", fn.create("Add", [x, a]).result)
    fn.set_output("z", fn.create("Reshape", [b], {"shape": (6,)}).result)
    assert not check(fn, "cse", exact=True)
    assert len(fn.constants) == 2


def test_fold_constants_evaluates_constant_subgraphs() -> None:
    fn, x = new()
    a, b = fn.add_constant(f((4, 6), seed=1), "a"), fn.add_constant(f((4, 6), seed=2), "b")
    fn.set_output("y", fn.create("Add", [x, fn.create("Mul", [a, b]).result]).result)
    assert check(fn, FixedPoint("fold-constants", "dce"), exact=True)
    assert kinds(fn) == {"Add": 1}
    folded = list(fn.constants)
    assert len(folded) == 1
    np.testing.assert_array_equal(folded[0].payload, f((4, 6), seed=1) * f((4, 6), seed=2))


def test_fold_constants_does_not_blow_up_the_weights() -> None:
    fn, x = new((2048, 1024))
    small = fn.add_constant(np.ones((1, 1024), F32), "small")
    big = fn.create("Broadcast", [small], {"shape": (2048, 1024)}).result  # 2M elements from 1K
    fn.set_output("y", fn.create("Add", [big, x]).result)
    assert not check(fn, FixedPoint("fold-constants", "dce"), exact=True)
    assert kinds(fn) == {"Broadcast": 1, "Add": 1}
