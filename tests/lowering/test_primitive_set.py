"""The primitive set is complete: every other kind lowers, and the primitives-only backend loses nothing."""

from __future__ import annotations

from pathlib import Path

from glow_core.ir.kinds import Category, all_kinds
from glow_core.lowering import lowerings, primitive_kinds
from glow_core.lowering.doc import render

ROOT = Path(__file__).resolve().parents[2]


def _failing_cases(backend: str) -> set[str]:
    lines = (ROOT / "tests" / "expectations" / f"{backend}.txt").read_text().splitlines()
    return {ln.split(":", 1)[0].strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def test_every_non_primitive_kind_has_a_lowering() -> None:
    # the typed quantized kinds change the types of the values around them when they lower (int8q -> int8
    # plus scale / zero-point constants), so a whole-function rewrite lowers them, not the per-node table
    # SymbolicValue exists only in compiles for symbolic dims, for backends that declare it (a size computed at
    # run time has nothing to lower onto): a backend without it is not given a symbolic function
    from glow_core.ir.defs.quant import TYPED_QUANT_KINDS
    from glow_core.ir.defs.symbolic import SYMBOLIC_ONLY_KINDS
    from glow_core.quantization.qlower import QLOWERINGS

    assert set(QLOWERINGS) == set(TYPED_QUANT_KINDS)
    missing = sorted(k for k, s in all_kinds().items() if Category.PRIMITIVE not in s.categories
                     and k not in lowerings() and k not in QLOWERINGS and k not in SYMBOLIC_ONLY_KINDS)
    assert missing == [], f"kinds with neither the PRIMITIVE category nor a lowering: {missing}"


def test_no_primitive_has_a_lowering() -> None:
    assert not (primitive_kinds() & set(lowerings()))


def test_primitive_set_is_small() -> None:
    # linear algebra and data movement on the order of 20-30 kinds, plus the element-wise math family
    prims = primitive_kinds()
    non_elementwise = {k for k in prims if Category.ELEMENTWISE not in all_kinds()[k].categories}
    assert 15 <= len(non_elementwise) <= 30, sorted(non_elementwise)
    assert {"MatMul", "Conv", "MaxPool", "AvgPool", "ReduceSum", "Transpose", "Reshape", "Slice", "Concat",
            "Gather", "Cast", "Where", "Add", "Mul", "Less"} <= prims


def test_primitives_only_backend_passes_every_node_test_the_interpreter_passes() -> None:
    assert _failing_cases("interpreter-primitives") == _failing_cases("interpreter")


def test_primitives_doc_is_up_to_date() -> None:
    text = (ROOT / "docs" / "primitives.md").read_text()
    assert text == render(), "docs/primitives.md is stale: python -m glow_core.lowering.doc > docs/primitives.md"
