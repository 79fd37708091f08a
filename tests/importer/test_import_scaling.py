"""Import is linear in the graph's size (issue 32): fresh names cost amortized O(1), whatever the count of
nodes sharing a base name (one Sum over K inputs imports as K - 1 Adds all named after the node)."""

from __future__ import annotations

import time

import pytest
from onnx import ModelProto, TensorProto, helper

from glow_core.importer.onnx_importer import OnnxImporter
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lir.ir import LIRFunction


class CountingSet(set):  # type: ignore[type-arg]
    """A set that counts its membership tests (the probes of a name search)."""

    probes = 0

    def __contains__(self, item: object) -> bool:
        CountingSet.probes += 1
        return super().__contains__(item)


@pytest.mark.parametrize("count", [1000, 8000])
def test_unique_name_probes_a_bounded_number_of_candidates_per_name(count: int) -> None:
    fn = Function()
    fn._names = CountingSet()
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (2,)))
    CountingSet.probes = 0
    for _ in range(count):
        x = fn.create("Add", [x, x], name="sum").result
    names = {n.name for n in fn.nodes}
    assert len(names) == count and "sum" in names and f"sum_{count - 1}" in names
    assert CountingSet.probes <= 3 * count, CountingSet.probes  # quadratic: count**2 / 2


def test_unique_name_still_skips_names_taken_explicitly() -> None:
    fn = Function()
    fn.add_input("a_2", TensorType(ElemKind.FLOAT32, (2,)))
    assert [fn.unique_name("a") for _ in range(4)] == ["a", "a_1", "a_3", "a_4"]
    assert fn.unique_name("") == "v" and fn.unique_name("") == "v_1"


@pytest.mark.parametrize("count", [1000, 8000])
def test_lir_unique_name_probes_a_bounded_number_of_candidates_per_name(count: int) -> None:
    lir = LIRFunction("f")
    lir._names = CountingSet()
    CountingSet.probes = 0
    names = [lir.unique_name("t") for _ in range(count)]
    assert len(set(names)) == count and names[:3] == ["t", "t_1", "t_2"]
    assert CountingSet.probes <= 3 * count, CountingSet.probes


def _sum_model(k: int) -> ModelProto:
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [2]) for i in range(k)]
    node = helper.make_node("Sum", [f"x{i}" for i in range(k)], ["y"])
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _import_seconds(k: int, repeat: int) -> float:
    model = _sum_model(k)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn = OnnxImporter(model).run()
        best = min(best, time.perf_counter() - t0)
    assert fn.count_by_kind() == {"Add": k - 1}
    return best


def test_sum_over_8000_inputs_imports_in_linear_time() -> None:
    """8x the inputs must cost well under 64x the time (quadratic was 0.7 s for 1k, 17 s for 8k here): the
    ratio, with a wide margin for a busy machine."""
    small = _import_seconds(1000, repeat=3)
    large = _import_seconds(8000, repeat=3)  # (best of 3 each: a busy machine's pauses fall out)
    assert large < 30 * small, (small, large)
