"""Budgets with no way around (issue 32): Loop and Scan accumulations, iteration limits across nesting,
RoiAlign's sample grid on the interpreter, constant folding. Small budgets: no test allocates much, also on
the code before the fix (its iteration limit is lowered where that code would have run on)."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import budget
from glow_core.errors import BudgetError, ExecutionError
from tests.robustness.util import F, I64, model

pytestmark = pytest.mark.robustness
B = TensorProto.BOOL
MiB = 1 << 20


def _i64(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _body(step: int, static: bool, cond_from: str = "cond", before: tuple[onnx.NodeProto, ...] = ()) -> onnx.GraphProto:
    """A Loop body whose scan output is ``step`` float32 ones (``static``: its shape declared)."""
    nodes = [*before, helper.make_node("Constant", [], ["shape"], value=_i64("shape", [step])),
             helper.make_node("ConstantOfShape", ["shape"], ["scan"],
                              value=helper.make_tensor("v", F, [1], [1.0])),
             helper.make_node("Identity", [cond_from], ["cond_out"])]
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info("i", I64, []),
                                             helper.make_tensor_value_info("cond", B, [])],
                             [helper.make_tensor_value_info("cond_out", B, []),
                              helper.make_tensor_value_info("scan", F, [step] if static else [None])])


def _loop_model(trip: int | None, step: int, static: bool) -> onnx.ModelProto:
    """``Loop(M)`` with no condition operand: it runs M times (M a constant, or the input ``m``)."""
    loop = helper.make_node("Loop", ["m", ""], ["acc"], body=_body(step, static))
    inputs = [] if trip is not None else [("m", I64, [])]
    inits = [_i64("m", trip)] if trip is not None else []
    m = model([loop, helper.make_node("Add", ["x", "x"], ["y"])], inputs + [("x", F, [1])],
              [("acc", F, [trip if trip is not None else None, step]), ("y", F, [1])], inits, opset=17)
    return m


def test_a_constant_trip_count_times_a_static_step_is_refused_at_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's bomb: a trip count of 1e12 and 4 MiB per step, refused before anything runs."""
    monkeypatch.setenv(budget.ENV_TOTAL, "256M")
    m = _loop_model(10**12, MiB, static=True)
    assert len(m.SerializeToString()) < 600
    t0 = time.perf_counter()
    with pytest.raises(BudgetError, match=r"Loop.*scan output 'scan'.*10{12} iterations.*over the"):
        glow_core.compile(m)
    assert time.perf_counter() - t0 < 10


def test_a_known_trip_count_is_checked_after_the_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's size is known only when it has run once (dynamic declaration): then M times it is checked,
    at once (the code before the fix ran on until the iteration limit, lowered here to 40)."""
    monkeypatch.setenv(budget.ENV_TOTAL, "16M")
    monkeypatch.setenv("GLOW_MAX_LOOP_ITERATIONS", "40")
    net = glow_core.compile(_loop_model(None, MiB // 4, static=False))
    one = np.ones(1, np.float32)
    assert net.run({"m": np.array(3, np.int64), "x": one})["acc"].shape == (3, MiB // 4)
    t0 = time.perf_counter()
    with pytest.raises(BudgetError, match=r"Loop.*scan output.*1000 iterations of 1.0 MiB.*over the 16.0 MiB"):
        net.run({"m": np.array(1000, np.int64), "x": one})
    assert time.perf_counter() - t0 < 10


def _while_model(step: int) -> onnx.ModelProto:
    """A loop whose condition the body computes (i + 1 < n): its length is not known until it ends."""
    body = _body(step, static=False, cond_from="more", before=(
        helper.make_node("Constant", [], ["one"], value=_i64("one", 1)),
        helper.make_node("Add", ["i", "one"], ["next"]), helper.make_node("Less", ["next", "n"], ["more"])))
    loop = helper.make_node("Loop", ["", "go"], ["acc"], body=body)
    return model([loop], [("n", I64, []), ("go", B, [])], [("acc", F, [None, step])], opset=17)


def test_accumulated_scan_outputs_are_charged_as_they_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(budget.ENV_TOTAL, "8M")
    net = glow_core.compile(_while_model(MiB // 16))  # 256 KiB a step
    feeds = {"go": np.array(True)}
    assert net.run({**feeds, "n": np.array(5, np.int64)})["acc"].shape == (5, MiB // 16)
    with pytest.raises(BudgetError, match=r"Loop.*scan outputs accumulated .* over the 8.0 MiB limit"):
        net.run({**feeds, "n": np.array(60, np.int64)})


def _scan_model(steps: int, step: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["shape"], value=_i64("shape", [step])),
         helper.make_node("ConstantOfShape", ["shape"], ["big"], value=helper.make_tensor("v", F, [1], [1.0])),
         helper.make_node("Add", ["s", "x"], ["s_out"])],
        "body", [helper.make_tensor_value_info("s", F, [1]), helper.make_tensor_value_info("x", F, [1])],
        [helper.make_tensor_value_info("s_out", F, [1]), helper.make_tensor_value_info("big", F, [step])])
    scan = helper.make_node("Scan", ["s0", "xs"], ["s", "bigs"], body=body, num_scan_inputs=1)
    return model([scan], [("s0", F, [1]), ("xs", F, [steps, 1])], [("s", F, [1]), ("bigs", F, [steps, step])],
                 opset=17)


def test_scan_accumulation_known_at_compile_time_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(budget.ENV_TOTAL, "16M")
    with pytest.raises(BudgetError, match=r"Scan.*scan outputs over 100 iterations.*over the 16.0 MiB"):
        glow_core.compile(_scan_model(100, MiB // 8))


def test_scan_honours_the_iteration_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scan ran 100,000 steps with the limit at 1,000; now it is refused before the first step."""
    monkeypatch.setenv("GLOW_MAX_LOOP_ITERATIONS", "1000")
    net = glow_core.compile(_scan_model(3000, 1))
    t0 = time.perf_counter()
    with pytest.raises(ExecutionError, match=r"Scan.*3000 iterations.*GLOW_MAX_LOOP_ITERATIONS \(1000\)"):
        net.run({"s0": np.zeros(1, np.float32), "xs": np.ones((3000, 1), np.float32)})
    assert time.perf_counter() - t0 < 5
    small = glow_core.compile(_scan_model(5, 1))
    got = small.run({"s0": np.zeros(1, np.float32), "xs": np.ones((5, 1), np.float32)})
    assert got["s"].tolist() == [5.0]


def _nested_model(outer: int, inner: int) -> onnx.ModelProto:
    """Loop(outer) of Loop(inner) of a counter: outer * inner bodies, each loop under the per-loop limit."""
    inner_body = helper.make_graph(
        [helper.make_node("Constant", [], ["one"], value=_i64("one", 1)),
         helper.make_node("Add", ["k", "one"], ["k_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
        "inner", [helper.make_tensor_value_info("j", I64, []), helper.make_tensor_value_info("c", B, []),
                  helper.make_tensor_value_info("k", I64, [])],
        [helper.make_tensor_value_info("c_out", B, []), helper.make_tensor_value_info("k_out", I64, [])])
    outer_body = helper.make_graph(
        [helper.make_node("Constant", [], ["n_in"], value=_i64("n_in", inner)),
         helper.make_node("Loop", ["n_in", "", "t"], ["t_out"], body=inner_body),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "outer", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, []),
                  helper.make_tensor_value_info("t", I64, [])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("t_out", I64, [])])
    loop = helper.make_node("Loop", ["n_out", "", "t0"], ["total"], body=outer_body)
    return model([loop], [("t0", I64, [])], [("total", I64, [])], [_i64("n_out", outer)], opset=17)


def test_a_total_iteration_budget_covers_nested_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested loops each under the per-loop limit ran their product of bodies (10^12 in the issue)."""
    monkeypatch.setenv("GLOW_MAX_TOTAL_ITERATIONS", "3000")
    net = glow_core.compile(_nested_model(5, 100))
    assert int(net.run({"t0": np.array(0, np.int64)})["total"]) == 500
    t0 = time.perf_counter()
    with pytest.raises(ExecutionError, match=r"Loop.*3000 loop bodies in all.*GLOW_MAX_TOTAL_ITERATIONS"):
        glow_core.compile(_nested_model(100, 100)).run({"t0": np.array(0, np.int64)})
    assert time.perf_counter() - t0 < 60


def _roi_align(ratio: int) -> onnx.ModelProto:
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=2, output_width=2,
                            sampling_ratio=ratio)
    return model([node], [("x", F, [1, 1, 8, 8]), ("rois", F, [1, 4]), ("idx", I64, [1])], [("y", F, [1, 1, 2, 2])],
                 opset=16)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_roi_align_sample_grid_is_bounded_by_the_budget(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """sampling_ratio 2000 took 40 s and 5.4 GB on the interpreter with a 1 GiB budget (cpu refused it);
    1000 here, against 8 MiB: the interpreter's kernel needs 4 x 16 MiB of taps."""
    monkeypatch.setenv(budget.ENV_TOTAL, "8M")
    feeds = {"x": np.ones((1, 1, 8, 8), np.float32), "rois": np.array([[0, 0, 7, 7]], np.float32),
             "idx": np.zeros(1, np.int64)}
    t0 = time.perf_counter()
    with pytest.raises(BudgetError, match=r"RoiAlign" if backend == "interpreter" else ""):  # (cpu: its arena)
        glow_core.compile(_roi_align(1000), backend=backend).run(feeds)
    assert time.perf_counter() - t0 < 20
    got = glow_core.compile(_roi_align(2), backend=backend).run(feeds)["y"]
    np.testing.assert_allclose(got, np.ones((1, 1, 2, 2)))


def _fold_chain(elems: int, count: int) -> onnx.ModelProto:
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c0"], value=helper.make_tensor("v", F, [1], [1.0]))]
    for k in range(count):
        nodes.append(helper.make_node("Add", [f"c{k}", f"c{k}"], [f"c{k + 1}"], name=f"add{k}"))
    nodes.append(helper.make_node("Add", ["x", f"c{count}"], ["y"]))
    return model(nodes, [("x", F, [elems])], [("y", F, [elems])], [_i64("shape", [elems])])


def test_dead_folded_constants_are_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight folds of 4 MiB each: only two are alive at a time (each fold's operand dies with it), so a 12 MiB
    budget holds the chain that counting the dead ones (36 MiB) refused."""
    monkeypatch.setenv(budget.ENV_TOTAL, "12M")
    elems = MiB
    net = glow_core.compile(_fold_chain(elems, 8))
    y = net.run({"x": np.zeros(elems, np.float32)})["y"]
    assert y[0] == 256.0 and y[-1] == 256.0


def test_out_of_memory_while_folding_is_a_budget_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemoryError in a kernel while folding was reported as ExecutionError (kernel failed: MemoryError)."""
    from glow_core.reference.kernels import KERNELS

    def exhausted(*args: object) -> np.ndarray:
        raise MemoryError

    monkeypatch.setitem(KERNELS, "Add", exhausted)
    with pytest.raises(BudgetError, match=r"out of memory"):
        glow_core.compile(_fold_chain(16, 2))


def test_the_fold_constants_pass_charges_its_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lowering-made constants folded by the pass are charged against the total, dead ones freed."""
    from glow_core.ir.graph import Function
    from glow_core.ir.types import ElemKind, TensorType
    from glow_core.passes import PassContext, PassManager

    def chain(count: int) -> Function:
        fn = Function()
        x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (MiB,)))
        c = fn.add_constant(np.ones(MiB, np.float32), "c")
        for _ in range(count):
            c = fn.create("Add", [c, c]).result
        fn.set_output("y", fn.create("Add", [x, c]).result)
        return fn

    with budget.using(budget.Budget(total_bytes=12 * MiB)):
        fn = chain(6)
        PassManager(["fold-constants"]).run(fn, PassContext())
        assert fn.count_by_kind() == {"Add": 1} and len(fn.constants) == 1
        assert float(fn.constants[0].payload[0]) == 64.0
    with budget.using(budget.Budget(total_bytes=6 * MiB)), pytest.raises(BudgetError, match="constant folding"):
        PassManager(["fold-constants"]).run(chain(6), PassContext())
