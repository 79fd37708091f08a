"""Importer refusals: unsupported ops (all at once), shapes, opsets, unreadable files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.errors import ImportShapeError, ModelError, UnsupportedError, UnsupportedOpsError
from glow_core.importer import import_model, parse_shape_spec
from tests.importer.modelutil import F, add_weight_model, model, relu_model, vi


def _unsupported_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu_ok"),
        helper.make_node("FooOp", ["r"], ["f1"], name="foo_1"),
        helper.make_node("BarOp", ["f1"], ["b1"], name="bar_1"),
        helper.make_node("FooOp", ["b1"], ["f2"], name="foo_2"),
        helper.make_node("Baz", ["f2"], ["y"], name="baz_1", domain="com.vendor"),
    ]
    return model(nodes, [vi("x", F, (2,))], [vi("y", F, None)], extra_opsets=[("com.vendor", 1)])


def test_every_unsupported_op_is_reported_in_one_error() -> None:
    with pytest.raises(UnsupportedOpsError) as info:
        import_model(_unsupported_model())
    msg = str(info.value)
    assert msg.startswith("3 unsupported ONNX operators in 4 nodes: ")
    assert "BarOp (1 node: bar_1)" in msg
    assert "FooOp (2 nodes: foo_1, foo_2)" in msg
    assert "com.vendor::Baz (1 node: baz_1)" in msg
    assert "Relu" not in msg
    assert isinstance(info.value, UnsupportedError)  # a clear refusal, never a wrong answer


def test_many_nodes_of_one_unsupported_op_are_counted_and_abbreviated() -> None:
    nodes = [helper.make_node("FooOp", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"], name=f"foo_{i}") for i in range(5)]
    m = model(nodes, [vi("x", F, (2,))], [vi("t4", F, None)])
    with pytest.raises(UnsupportedOpsError, match=r"1 unsupported ONNX operator in 5 nodes: FooOp \(5 nodes: "
                                                  r"foo_0, foo_1, foo_2, \.\.\.\)"):
        glow_core.compile(m)


def test_unsupported_ops_are_reported_before_the_checker_and_through_compile() -> None:
    with pytest.raises(UnsupportedOpsError, match="FooOp"):
        glow_core.compile(_unsupported_model(), "interpreter")


def test_symbolic_dims_need_input_shapes() -> None:
    m = relu_model(("N", 3))
    with pytest.raises(ImportShapeError) as info:
        import_model(m)
    assert "x float32[N,3]" in str(info.value)
    assert "--input-shape" in info.value.hint and "input_shapes" in info.value.hint
    fn = import_model(m, input_shapes={"x": (4, 3)})
    assert fn.inputs[0].type.shape == (4, 3)
    net = glow_core.compile(m, input_shapes={"x": [5, 3]})
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))


def test_an_input_without_a_shape_is_refused() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", F, None)], [vi("y", F, ("N",))])
    with pytest.raises(ModelError, match="shape"):  # the onnx checker requires one
        import_model(m, input_shapes={"x": (2,)})


def test_every_symbolic_input_is_named_at_once() -> None:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    m = model(nodes, [vi("a", F, ("N",)), vi("b", F, ("M",))], [vi("y", F, ("K",))])
    with pytest.raises(ImportShapeError, match=r"a float32\[N\]; b float32\[M\]"):
        import_model(m)


def test_input_shapes_naming_a_non_input_is_refused() -> None:
    with pytest.raises(ImportShapeError, match="names 'nope', which is not an input of the model; its inputs are: x"):
        import_model(relu_model(("N", 3)), input_shapes={"nope": (1, 3)})


def test_input_shapes_naming_an_initializer_is_refused() -> None:
    m = add_weight_model(np.ones((2, 2), np.float32))
    m.graph.input.append(vi("w", F, (2, 2)))  # IR v3 style: the initializer listed as an input too
    with pytest.raises(ImportShapeError, match="'w', which is not an input"):
        import_model(m, input_shapes={"w": (2, 2)})
    assert [p.name for p in import_model(m).inputs] == ["x"]


def test_input_shapes_must_fit_the_declared_rank_and_fixed_dims() -> None:
    with pytest.raises(ImportShapeError, match="rank 2"):
        import_model(relu_model(("N", 3)), input_shapes={"x": (4,)})
    with pytest.raises(ImportShapeError, match="fixed dimension 3"):
        import_model(relu_model(("N", 3)), input_shapes={"x": (4, 5)})


@pytest.mark.parametrize("spec,want", [("x=1,3,224,224", ("x", (1, 3, 224, 224))), ("a=b=2x3", ("a=b", (2, 3))),
                                       ("s=", ("s", ()))])
def test_parse_shape_spec(spec: str, want: tuple[str, tuple[int, ...]]) -> None:
    assert parse_shape_spec(spec) == want


@pytest.mark.parametrize("spec", ["x", "=1,2", "x=1,a", "x=-1,3"])
def test_parse_shape_spec_refusals(spec: str) -> None:
    with pytest.raises(ImportShapeError):
        parse_shape_spec(spec)


def test_opset_below_7_is_refused_when_an_op_changed_since() -> None:
    m = add_weight_model(np.ones(3, np.float32))
    m.opset_import[0].version = 6  # Add-6 (legacy broadcast attribute) differs from Add-7
    with pytest.raises(UnsupportedError, match="opset 6; opsets 7 and later are supported, and Add changed") as info:
        import_model(m)
    assert "version_converter" in info.value.hint


def test_opset_below_7_is_accepted_when_every_schema_is_unchanged() -> None:
    assert import_model(relu_model(opset=6)).count_by_kind() == {"Relu": 1}  # Relu-6 is still Relu at opset 7


def test_opset_newer_than_the_onnx_package_is_refused() -> None:
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(UnsupportedError, match=f"opset {newest + 1}, newer than"):
        import_model(relu_model(opset=newest + 1))
    assert import_model(relu_model(opset=7)).count_by_kind() == {"Relu": 1}


def _saved(tmp_path: Path, m: onnx.ModelProto, name: str = "model.onnx") -> Path:
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
def test_truncated_file_is_a_model_error(tmp_path: Path, fraction: float) -> None:
    data = _saved(tmp_path, add_weight_model(np.arange(64, dtype=np.float32).reshape(8, 8))).read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ModelError):
        glow_core.compile(cut)


def test_every_cut_of_a_small_model_is_a_model_error(tmp_path: Path) -> None:
    data = _saved(tmp_path, add_weight_model(np.arange(6, dtype=np.float32).reshape(2, 3))).read_bytes()
    cut = tmp_path / "cut.onnx"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        with pytest.raises(ModelError):
            import_model(cut)


def test_garbage_and_missing_files_are_model_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ModelError):
        glow_core.compile(junk)
    with pytest.raises(ModelError, match="does not exist"):
        glow_core.compile(tmp_path / "absent.onnx")


def test_an_invalid_graph_is_a_model_error() -> None:
    m = model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [vi("x", F, (2,))], [vi("y", F, None)])
    with pytest.raises(ModelError):
        import_model(m)


def test_nodes_keep_their_onnx_origin() -> None:
    fn = import_model(relu_model())
    assert [n.origin for n in fn.nodes] == ["relu_0"]
    m = add_weight_model(np.ones(3, np.float32))
    fn = import_model(m)
    assert [n.origin for n in fn.nodes] == ["add_0"]
    assert [c.name for c in fn.constants] == ["w"]
    np.testing.assert_array_equal(fn.constants[0].payload, numpy_helper.to_array(m.graph.initializer[0]))
