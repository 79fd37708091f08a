"""Constant folding of shape subgraphs, and operands that must be known at compile time."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import DynamicValueError
from glow_core.importer import context, import_model
from glow_core.importer.context import ImportRule, NodeContext
from glow_core.ir.graph import Value
from tests.importer.modelutil import I64, F, has_rules, model, vi


def _shape_reshape_model() -> onnx.ModelProto:
    """``y = Reshape(x, Concat(Gather(Shape(x), [0]), [-1]))``: x [2,3,4] -> y [2,12]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "idx"], ["g"], name="gather", axis=0),
        helper.make_node("Concat", ["g", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "idx"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    return model(nodes, [vi("x", F, (2, 3, 4))], [vi("y", F, (2, 12))], inits, opset=13)


@pytest.mark.skipif(not has_rules("Shape", "Gather", "Concat", "Reshape"),
                    reason="needs import rules for Shape, Gather, Concat and Reshape")
def test_shape_subgraph_is_folded_away() -> None:
    fn = import_model(_shape_reshape_model())
    kinds = fn.count_by_kind()
    assert "Shape" not in kinds and "Gather" not in kinds and "Concat" not in kinds, fn.dump()
    assert {n.origin for n in fn.nodes} <= {"reshape"}, fn.dump()
    assert fn.outputs[0][1].type.shape == (2, 12)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = glow_core.compile(_shape_reshape_model()).run({"x": x})["y"]
    np.testing.assert_array_equal(out, x.reshape(2, 12))


_NO_PLUGINS_SCRIPT = """
import sys
import numpy as np
from glow_core.importer import import_model
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passes import PassContext, PassManager
from glow_core.plugin_host import registry
from tests.importer.test_folding import _shape_reshape_model

fn = import_model(_shape_reshape_model())
g = Function("g")
a = g.add_constant(np.arange(6, dtype=np.float32).reshape(2, 3), "a", TensorType(ElemKind.FLOAT32, (2, 3)))
g.set_output("y", g.create("Relu", [a], {}, name="relu").outputs[0])
PassManager(["fold-constants"]).run(g, PassContext())
print(sorted(fn.count_by_kind()), sorted(g.count_by_kind()), registry().names(),
      "glow_backend_interpreter" in sys.modules)
"""


@pytest.mark.skipif(not has_rules("Shape", "Gather", "Concat", "Reshape"),
                    reason="needs import rules for Shape, Gather, Concat and Reshape")
def test_constant_folding_needs_no_backend_plugin() -> None:
    """Folding calls the reference kernels (glow_core.reference), not a backend: an empty registry is enough."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, GLOW_DISABLE_PLUGIN_AUTOLOAD="1", GLOW_REFERENCE_BACKEND="no-such-backend")
    r = subprocess.run([sys.executable, "-c", _NO_PLUGINS_SCRIPT], cwd=root, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "['Reshape'] [] [] False", r.stdout


@pytest.mark.skipif(not has_rules("Reshape"), reason="needs the Reshape import rule")
def test_a_shape_operand_from_an_input_names_the_placeholder() -> None:
    nodes = [helper.make_node("Reshape", ["x", "new_shape"], ["y"], name="reshape_dyn")]
    m = model(nodes, [vi("x", F, (2, 3)), vi("new_shape", I64, (2,))], [vi("y", F, (3, 2))], opset=13)
    with pytest.raises(DynamicValueError) as info:
        import_model(m)
    assert info.value.placeholders == ("new_shape",)
    assert "new_shape" in str(info.value) and "reshape_dyn" in str(info.value)
    # binding the input as a constant is the way out (what glow_core.onnx_backend does)
    fn = import_model(m, bind={"new_shape": np.array([3, 2], np.int64)})
    assert [p.name for p in fn.inputs] == ["x"] and fn.outputs[0][1].type.shape == (3, 2)


def _needs_const_rule(ctx: NodeContext) -> Sequence[Value | None]:
    ctx.const(1, "the test operand")
    return ctx.emit("Relu", [ctx.req(0)])


def test_dynamic_value_error_lists_every_placeholder_behind_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism itself, with a scratch import rule that needs operand 1 at compile time."""
    monkeypatch.setitem(context._RULES, ("test.glow", "NeedsConst"), ImportRule("NeedsConst", _needs_const_rule,
                                                                             "test.glow"))
    nodes = [
        helper.make_node("Add", ["a", "b"], ["ab"], name="add_ab"),
        helper.make_node("Relu", ["ab"], ["k"], name="relu_k"),
        helper.make_node("NeedsConst", ["x", "k"], ["y"], name="needs", domain="test.glow"),
    ]
    m = model(nodes, [vi("x", F, (2,)), vi("a", F, (1,)), vi("b", F, (1,))], [vi("y", F, (2,))],
              extra_opsets=[("test.glow", 1)])
    with pytest.raises(DynamicValueError) as info:
        import_model(m)
    assert info.value.placeholders == ("a", "b")
    msg = str(info.value)
    assert "ONNX node 'needs'" in msg and "the test operand" in msg and "a, b" in msg
    fn = import_model(m, bind={"a": np.ones(1, np.float32), "b": np.ones(1, np.float32)})
    assert [p.name for p in fn.inputs] == ["x"]
    assert fn.count_by_kind() == {"Relu": 1}  # Add and Relu over bound inputs were folded
