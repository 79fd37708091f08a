"""The checker and shape inference see a lean copy of the model: large weights declared, not carried."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from glow_core.errors import ModelError
from glow_core.importer import import_model
from glow_core.importer.onnx_importer import LEAN_MIN_ELEMENTS, lean_copy
from tests.importer.modelutil import F, I64, model, vi


def _matmul_reshape_model(ir_version: int = 8) -> onnx.ModelProto:
    """``y = Reshape(x @ w, shape)``: a large weight and a small shape-deciding initializer."""
    w = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)  # 16384 elements
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([4, 2, 32], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Reshape", ["h", "shape"], ["y"], name="rs")]
    inputs = [vi("x", F, (4, 256))]
    if ir_version < 4:  # old models list every initializer as a graph input too
        inputs += [vi("w", F, (256, 64)), vi("shape", I64, (3,))]
    return model(nodes, inputs, [vi("y", F, (4, 2, 32))], inits, opset=13, ir_version=ir_version)


@pytest.mark.parametrize("ir_version", [3, 8])
def test_large_initializers_become_declared_inputs(ir_version: int) -> None:
    m = _matmul_reshape_model(ir_version)
    lean = lean_copy(m)
    assert [t.name for t in lean.graph.initializer] == ["shape"]  # small ones stay for data propagation
    assert [i.name for i in lean.graph.input].count("w") == 1
    assert lean.ByteSize() < m.ByteSize() / 10
    assert len(m.graph.initializer) == 2 and m.graph.initializer[0].name == "w"  # the original is untouched
    onnx.checker.check_model(lean)
    inferred = onnx.shape_inference.infer_shapes(lean, data_prop=True)
    y = next(o for o in inferred.graph.output if o.name == "y")
    assert [d.dim_value for d in y.type.tensor_type.shape.dim] == [4, 2, 32]


def test_import_through_the_lean_copy_matches_numpy() -> None:
    import glow_core

    m = _matmul_reshape_model()
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    w = numpy_helper.to_array(m.graph.initializer[0])
    got = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(got, (x @ w).reshape(4, 2, 32), rtol=1e-5, atol=1e-5)


def test_threshold_is_what_it_says() -> None:
    exact = numpy_helper.from_array(np.zeros(LEAN_MIN_ELEMENTS, np.float32), "small")
    over = numpy_helper.from_array(np.zeros(LEAN_MIN_ELEMENTS + 1, np.float32), "big")
    m = model([helper.make_node("Add", ["small", "x"], ["y"]), helper.make_node("Add", ["big", "x2"], ["z"])],
              [vi("x", F, (LEAN_MIN_ELEMENTS,)), vi("x2", F, (LEAN_MIN_ELEMENTS + 1,))],
              [vi("y", F, None), vi("z", F, None)], [exact, over])
    lean = lean_copy(m)
    assert [t.name for t in lean.graph.initializer] == ["small"]
    assert "big" in [i.name for i in lean.graph.input]


def test_a_malformed_large_initializer_is_still_a_model_error() -> None:
    m = _matmul_reshape_model()
    m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:-4]  # one float short
    with pytest.raises(ModelError, match="initializer 'w'"):
        import_model(m)


def test_a_graph_error_is_still_caught_by_the_checker() -> None:
    m = _matmul_reshape_model()
    m.graph.node[1].input[0] = "nowhere"
    with pytest.raises(ModelError, match="the ONNX checker rejected the model.*'nowhere'"):
        import_model(m)
