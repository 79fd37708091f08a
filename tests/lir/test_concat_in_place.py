"""``concat-in-place``: a Concat's operands written straight into its result (glow_core/lircompiler/passes.py),
and the cases it must leave alone. Each case runs the optimized LIR on a poisoned arena against the graph."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.ir.graph import Function, Value
from glow_core.lir.ir import LIRFunction, View
from glow_core.lircompiler import build_lir, generate_lir, passes
from tests.lir.lirutil import by_name, check_same, f32, kinds, node, random_feeds
from tests.lir.test_passes import run


def _fire(batch: int = 1) -> tuple[Function, Value]:
    """A fire module: two branches of one input concatenated on the channels, then read by one node."""
    fn = Function("main")
    x = fn.add_input("x", f32(batch, 4, 3, 3))
    a = node(fn, "Exp", x, name="a")
    b = node(fn, "Neg", x, name="b")
    c = node(fn, "Concat", a, b, name="cat", axis=1)
    fn.set_output("y", node(fn, "Abs", c, name="r"))
    return fn, c


def _views_of_result(lir: LIRFunction, *names: str) -> list[View]:
    outs = [by_name(lir, n).outs[0].value for n in names]
    assert all(isinstance(v, View) for v in outs), outs
    return outs  # type: ignore[return-value]


def test_branches_of_a_batch_1_concat_are_written_into_its_result() -> None:
    fn, _ = _fire()
    lir = generate_lir(fn)
    assert run(lir, "concat-in-place")
    assert "Concat" not in kinds(lir)
    a, b = _views_of_result(lir, "a", "b")
    assert a.root is b.root and (a.root_offset, b.root_offset) == (0, a.nbytes)
    assert by_name(lir, "r").ins[0].value is a.root
    check_same(fn, lir=lir)


def test_the_default_pipeline_removes_it_and_the_answer_is_the_graphs() -> None:
    fn, _ = _fire()
    lir = build_lir(fn, debug=True)
    assert "Concat" not in kinds(lir)
    check_same(fn)


def test_batch_2_operands_are_not_contiguous_and_stay_a_concat() -> None:
    fn, _ = _fire(batch=2)
    lir = generate_lir(fn)
    assert not run(lir, "concat-in-place")
    assert "Concat" in kinds(lir)
    check_same(fn, lir=lir)


def test_an_operand_read_after_the_concat_stays_a_concat() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(1, 4, 3))
    a = node(fn, "Exp", x, name="a")
    c = node(fn, "Concat", a, node(fn, "Neg", x, name="b"), name="cat", axis=1)
    fn.set_output("y", node(fn, "Abs", c, name="r"))
    fn.set_output("z", node(fn, "Sqrt", a, name="s"))  # a lives on past the Concat
    lir = generate_lir(fn)
    assert not run(lir, "concat-in-place")
    check_same(fn, lir=lir)


def test_the_same_operand_twice_stays_a_concat() -> None:
    fn = Function("main")
    x = fn.add_input("x", f32(1, 2, 5))
    a = node(fn, "Exp", x, name="a")
    fn.set_output("y", node(fn, "Abs", node(fn, "Concat", a, a, name="cat", axis=1), name="r"))
    lir = generate_lir(fn)
    assert not run(lir, "concat-in-place")
    check_same(fn, lir=lir)


def _dense_block(layers: int = 3) -> Function:
    """DenseNet's block after the graph passes: Concat k takes every feature so far (a prefix of the last
    Concat's operands), and each Concat's reader may compute in its place."""
    fn = Function("main")
    feats = [node(fn, "Exp", fn.add_input("x", f32(1, 2, 4)), name="x0")]
    for i in range(1, layers + 1):
        cat = node(fn, "Concat", *feats, name=f"cat{i}", axis=1)
        feats.append(node(fn, "Neg", node(fn, "Relu", cat, name=f"relu{i}"), name=f"x{i}") if i < layers else cat)
    fn.set_output("y", node(fn, "Abs", feats[-1], name="r"))
    return fn


def test_a_dense_block_writes_every_feature_into_its_last_concat() -> None:
    fn = _dense_block()
    lir = build_lir(fn, debug=True)
    assert "Concat" not in kinds(lir)
    roots = {by_name(lir, f"x{i}").outs[0].value.root for i in range(3)}  # type: ignore[union-attr]
    assert len(roots) == 1
    check_same(fn)
    check_same(fn, random_feeds(fn, seed=3))


def _prefix_read_in_place() -> Function:
    """c1 = Concat(x0, x1) is a prefix of c2 = Concat(x0, x1, x2); c1's only reader (Relu) may compute in
    c1's place."""
    fn = Function("main")
    x = fn.add_input("x", f32(1, 2, 4))
    x0, x1 = node(fn, "Exp", x, name="x0"), node(fn, "Neg", x, name="x1")
    r1 = node(fn, "Relu", node(fn, "Concat", x0, x1, name="c1", axis=1), name="r1")
    x2 = node(fn, "Sqrt", node(fn, "Abs", x, name="a"), name="x2")
    fn.set_output("y1", node(fn, "Abs", r1, name="o1"))
    fn.set_output("y2", node(fn, "Abs", node(fn, "Concat", x0, x1, x2, name="c2", axis=1), name="o2"))
    return fn


def test_a_prefix_concat_whose_reader_writes_in_its_place_stays_a_concat() -> None:
    """After share-buffers (Relu computing in c1's place), c1 must not become a view of c2's first bytes:
    the Relu would overwrite x0 and x1 there before c2 is read. A planted fault (the check skipped) fails."""
    fn = _prefix_read_in_place()
    lir = generate_lir(fn)
    run(lir, "share-buffers")
    run(lir, "concat-in-place")
    assert kinds(lir).count("Concat") == 1  # c2 went (its operands die there); c1 stayed
    check_same(fn, lir=lir)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(passes, "_written_after", lambda instrs, k, a: False)
        bad = generate_lir(fn)
        run(bad, "share-buffers")
        run(bad, "concat-in-place")
        assert "Concat" not in kinds(bad)
        with pytest.raises(AssertionError):
            check_same(fn, lir=bad)
    finally:
        mp.undo()


def test_a_dense_block_whose_readers_compute_in_place_runs_right_in_either_order() -> None:
    fn = _dense_block()
    lir = generate_lir(fn)
    run(lir, "share-buffers")
    run(lir, "concat-in-place")
    check_same(fn, lir=lir)
    assert np.isfinite(check_same(fn, lir=lir)["y"]).all()
