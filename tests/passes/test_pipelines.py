"""The pipelines as a whole: explicit lists, outputs kept, dumps, stats; the pass manager's contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from glow_backend_interpreter.backend import InterpreterBackend, PrimitivesInterpreterBackend

from glow_core import passinfra, zoo
from glow_core.errors import DynamicValueError, PassError
from glow_core.importer import import_model
from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passes import PassContext, PassManager, all_passes, graph_pass
from glow_core.passes.pipelines import default_pipeline, lowering_pipeline, optimize_pipeline, post_lowering_pipeline
from glow_core.passes.stats import format_stats, optimize_with_stats
from glow_core.passinfra import FixedPoint
from tests.passes.passutil import FusingPrimitivesBackend, check, f, kinds, random_feeds, run

F32 = ElemKind.FLOAT32
DOCS = Path(__file__).resolve().parents[2] / "docs" / "passes.md"


def names(steps: list[Any]) -> list[str]:
    out: list[str] = []
    for s in steps:
        out.extend(names(list(s.steps)) if isinstance(s, FixedPoint) else [s])
    return out


def test_pipelines_are_explicit_lists_of_registered_passes() -> None:
    assert default_pipeline() == optimize_pipeline() + lowering_pipeline() + post_lowering_pipeline()
    registered = all_passes()
    used = names(default_pipeline())
    assert set(used) <= set(registered)
    assert set(registered) <= set(used)  # every pass runs somewhere
    assert used.index("fold-batchnorm") < used.index("lower") < used.index("fuse-activations")
    assert used[-4:] == ["fuse-activations", "batch-shared-matmuls", "backend-transforms", "dce"]


def test_every_pass_is_documented() -> None:
    text = DOCS.read_text()
    for name, p in all_passes().items():
        assert p.doc, f"pass {name} has no docstring"
        assert f"`{name}`" in text, f"docs/passes.md does not describe {name}"


def kitchen_sink(every_value_is_an_output: bool) -> Function:
    """One function with something for every pass: no-ops, Conv+BN+Relu, transposes, reshapes,
    arithmetic chains, slices of concats."""
    fn = Function()
    x = fn.add_input("x", TensorType(F32, (1, 3, 6, 6)))
    z = fn.add_input("z", TensorType(F32, (1, 2, 36)))
    vals: list[Value] = []

    def node(kind: str, inputs: list[Any], attrs: dict[str, Any] | None = None) -> Value:
        v = fn.create(kind, inputs, attrs or {}).result
        vals.append(v)
        return v

    c = fn.add_constant
    v = node("Identity", [x])
    v = node("Conv", [v, c(f((4, 3, 3, 3)), "w"), c(f((4,), seed=2), "b")],
             {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)})
    v = node("BatchNormalization", [v, c(np.full(4, 1.5, np.float32), "s"), c(f((4,), seed=3), "bb"),
                                    c(f((4,), seed=4), "m"), c(np.full(4, 0.7, np.float32), "var")])
    v = node("Relu", [v])
    v = node("Transpose", [v], {"perm": (0, 2, 3, 1)})
    v = node("Mul", [v, c(np.ones((4,), np.float32), "one")])
    v = node("Neg", [v])
    v = node("Transpose", [v], {"perm": (0, 3, 1, 2)})
    v = node("Reshape", [v], {"shape": (1, 4, 36)})
    v = node("Reshape", [v], {"shape": (1, 4, 6, 6)})
    v = node("Reshape", [v], {"shape": (1, 4, 36)})
    v = node("Add", [v, c(np.float32(0.5), "h")])
    v = node("Add", [v, c(np.float32(0.25), "q")])
    cat = node("Concat", [z, v], {"axis": 1})
    v = node("Slice", [cat], {"starts": (0, 2, 0), "sizes": (1, 4, 36), "steps": (1, 1, 1)})
    parts = [node("Slice", [v], {"starts": (0, i, 0), "sizes": (1, 2, 36), "steps": (1, 1, 1)}) for i in (0, 2)]
    v = node("Concat", parts, {"axis": 1})
    v = node("Dropout", [v])
    if every_value_is_an_output:
        for i, val in enumerate(vals):
            fn.set_output(f"v{i}", val)
    fn.set_output("y", v)
    fn.set_output("y_again", v)
    return fn


BACKENDS = [InterpreterBackend(), PrimitivesInterpreterBackend(), FusingPrimitivesBackend()]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_default_pipeline_optimizes_and_keeps_results(backend: Any) -> None:
    fn = kitchen_sink(False)
    assert check(fn, *default_pipeline(), backend=backend, rtol=1e-5, atol=1e-5)
    counts = kinds(fn)
    assert not {"BatchNormalization", "Identity", "Dropout", "Transpose"} & set(counts), counts
    assert counts.get("Reshape", 0) <= 1 and counts.get("Slice", 0) <= 1 and counts.get("Concat", 0) <= 1, counts
    assert [n for n, _ in fn.outputs] == ["y", "y_again"] and fn.outputs[0][1] is fn.outputs[1][1]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_default_pipeline_keeps_every_output(backend: Any) -> None:
    """Every intermediate value is an output too: each keeps its name and value, in order."""
    fn = kitchen_sink(True)
    out_names = [n for n, _ in fn.outputs]
    check(fn, *default_pipeline(), backend=backend, rtol=1e-5, atol=1e-5)
    assert [n for n, _ in fn.outputs] == out_names
    assert fn.outputs[-1][1] is fn.outputs[-2][1]


def test_dump_before_and_after_a_named_pass() -> None:
    fn = import_model(zoo.resolve_model("zoo:resnet50"))
    ctx = PassContext(backend=InterpreterBackend(), dump_before=frozenset({"fold-batchnorm"}),
                      dump_after=frozenset({"fold-batchnorm"}))
    PassManager(default_pipeline()).run(fn, ctx)
    labels = [label for label, _ in ctx.dumps]
    assert labels[:2] == ["before fold-batchnorm", "after fold-batchnorm"]
    before, after = ctx.dumps[0][1], ctx.dumps[1][1]
    assert before.count("= BatchNormalization(") == 53 and "BatchNormalization(" not in after


def test_stats_of_resnet50() -> None:
    fn = import_model(zoo.resolve_model("zoo:resnet50"))
    stats = optimize_with_stats(fn, InterpreterBackend(), debug=True)
    assert stats.removed("BatchNormalization") == 53 and stats.after.get("BatchNormalization", 0) == 0
    assert stats.pass_runs["fold-batchnorm"] >= 1 and stats.pass_changes["fold-batchnorm"] >= 1
    assert next(iter(stats.pass_seconds)) == "dce"
    text = format_stats(stats)
    assert "BatchNormalization" in text and "fold-batchnorm" in text and "total" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("BatchNormalization"))
    assert line.split()[1:] == ["53", "0", "-53"]


# -- the pass manager's contract -----------------------------------------------------------------------------

@pytest.fixture
def scratch_passes() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        passinfra._PASSES.pop(name, None)


def test_manager_names_the_pass_that_breaks_the_graph(scratch_passes: list[str]) -> None:
    @graph_pass("test-breaks-graph")
    def breaks(fn: Function, ctx: PassContext) -> bool:
        fn.nodes.reverse()  # out of topological order
        return True

    scratch_passes.append("test-breaks-graph")
    fn = kitchen_sink(False)
    PassManager(["test-breaks-graph"]).run(fn, PassContext(debug=False))  # not verified: not noticed
    fn = kitchen_sink(False)
    with pytest.raises(PassError, match="pass 'test-breaks-graph' left function main invalid"):
        PassManager(["test-breaks-graph"]).run(fn, PassContext(debug=True))


def test_manager_names_the_pass_that_raises(scratch_passes: list[str]) -> None:
    @graph_pass("test-raises")
    def raises(fn: Function, ctx: PassContext) -> bool:
        raise ZeroDivisionError("boom")

    scratch_passes.append("test-raises")
    with pytest.raises(PassError, match="pass 'test-raises' failed.*ZeroDivisionError: boom"):
        PassManager(["test-raises"]).run(kitchen_sink(False), PassContext())


def test_manager_keeps_the_type_and_fields_of_a_glow_error(scratch_passes: list[str]) -> None:
    """A pass's GlowError is re-raised as the same object: type, placeholders and hint kept, the pass named."""
    raised = DynamicValueError("the shape depends on a model input", ("x", "n"), hint="bind x and n")

    @graph_pass("test-dynamic")
    def dynamic(fn: Function, ctx: PassContext) -> bool:
        raise raised

    scratch_passes.append("test-dynamic")
    with pytest.raises(DynamicValueError) as info:
        PassManager(["test-dynamic"]).run(kitchen_sink(False), PassContext())
    e = info.value
    assert e is raised and e.placeholders == ("x", "n") and e.hint == "bind x and n"
    assert e.pass_name == "test-dynamic"
    assert str(e) == "in pass 'test-dynamic': the shape depends on a model input"


def test_fixed_point_repeats_until_nothing_changes() -> None:
    fn = kitchen_sink(False)
    ctx = PassContext(debug=True)
    PassManager([FixedPoint("merge-reshapes", "dce")]).run(fn, ctx)
    assert ctx.runs["merge-reshapes"] == ctx.changes["merge-reshapes"] + 1  # the last round changed nothing
    feeds = random_feeds(fn)
    run(fn, feeds)
