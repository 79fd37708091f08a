"""Sequence and optional operators (resolved at import time), on interpreter and cpu, against onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_core.api import compile as glow_compile
from glow_core.errors import BudgetError, GlowTypeError, ImportShapeError, InputError, ModelError
from glow_core.importer import OptShape, SeqShape

BACKENDS = ["interpreter", "cpu"]
F = TensorProto.FLOAT
SEQ_F = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto] = (), opset: int = 18) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _tin(name: str, shape: list[int] | None = None, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _seq(name: str) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, SEQ_F)


def _i64(name: str, v: int | list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [] if isinstance(v, int) else [len(v)],
                              [v] if isinstance(v, int) else v)


def _same(want, got) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype
    else:
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype


def _check(model: onnx.ModelProto, feeds: list, backend: str) -> list:
    want = ReferenceEvaluator(model).run(None, dict(zip([i.name for i in model.graph.input], feeds)))
    got = onnx_backend.prepare(model, backend=backend).run(feeds)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        _same(w, g)
    return list(got)


RNG = np.random.default_rng(0)
A, B, C = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 3), (4, 3), (1, 3)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_construct_at_insert_erase_length(backend: str) -> None:
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
        helper.make_node("SequenceInsert", ["s", "c", "pos0"], ["s2"]),      # c, a, b
        helper.make_node("SequenceErase", ["s2", "neg1"], ["s3"]),           # c, a
        helper.make_node("SequenceAt", ["s3", "neg1"], ["last"]),            # a
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("Relu", ["last"], ["y"]),
    ]
    m = _model(nodes, [_tin("a", [2, 3]), _tin("b", [4, 3]), _tin("c", [1, 3])],
               [_seq("s3"), _tin("y", [2, 3]), _tin("n", [], TensorProto.INT64)], [_i64("pos0", 0), _i64("neg1", -1)])
    s3, y, n = _check(m, [A, B, C], backend)
    assert len(s3) == 2 and int(n) == 3
    np.testing.assert_array_equal(y, np.maximum(A, 0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_input_and_output_roundtrip(backend: str) -> None:
    nodes = [helper.make_node("SequenceInsert", ["s", "x"], ["out"])]
    m = _model(nodes, [_seq("s"), _tin("x", [2, 3])], [_seq("out")])
    for seq in ([], [A], [A, A * 2]):
        out, = _check(m, [seq, A + 1], backend)
        assert len(out) == len(seq) + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (0, 1), (-1, 1), (2, 1)])
def test_concat_from_sequence(backend: str, axis: int, new_axis: int) -> None:
    x = RNG.standard_normal((3, 3)).astype(np.float32)
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)]
    shape = [6, 3] if (axis, new_axis) == (0, 0) else [3, 6] if not new_axis else [3, 3, 3]
    shape[axis if axis >= 0 else len(shape) + axis] = 2 if new_axis else shape[axis]
    m = _model(nodes, [_tin("a", [3, 3]), _tin("b", [3, 3])], [_tin("y", shape)])
    _check(m, [x, x * 3], backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("split,keepdims", [(None, 0), (None, 1), (2, 1), ([1, 3, 1], 1), ([5], 1)])
def test_split_to_sequence(backend: str, split, keepdims: int) -> None:
    x = RNG.standard_normal((5, 2)).astype(np.float32)
    inits = [] if split is None else [_i64("sp", split)]
    node = helper.make_node("SplitToSequence", ["x"] + (["sp"] if split is not None else []), ["s"], keepdims=keepdims)
    m = _model([node], [_tin("x", [5, 2])], [_seq("s")], inits)
    _check(m, [x], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_optional_tensor_and_sequence(backend: str) -> None:
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2, 3]))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("Optional", ["x"], ["o2"]),
             helper.make_node("OptionalGetElement", ["o2"], ["y"])]
    m = _model(nodes, [helper.make_value_info("o", opt_t), _tin("x", [2, 3])],
               [_tin("has", [], TensorProto.BOOL), _tin("y", [2, 3])])
    # (onnx.reference's Optional wraps a tensor in a list: the values are checked directly here)
    rep = onnx_backend.prepare(m, backend=backend)
    has, y = rep.run([A, B[:2]])
    assert has.dtype == np.bool_ and bool(has) is True
    np.testing.assert_array_equal(y, B[:2])
    has, y = rep.run([None, B[1:3]])
    assert bool(has) is False
    np.testing.assert_array_equal(y, B[1:3])


def test_position_out_of_range_is_a_model_error() -> None:
    nodes = [helper.make_node("SequenceConstruct", ["a"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    m = _model(nodes, [_tin("a", [2, 3])], [_tin("y", [2, 3])], [_i64("p", 1)])
    with pytest.raises(ModelError, match="position 1 is out of range for a sequence of 1 tensors"):
        glow_compile(m, "interpreter")


def test_run_time_position_is_bound_from_the_value_passed() -> None:
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    m = _model(nodes, [_tin("a", [2, 3]), _tin("b", [4, 3]), _tin("p", [], TensorProto.INT64)], [_tin("y", ["n", 3])])
    rep = onnx_backend.prepare(m, backend="interpreter")
    np.testing.assert_array_equal(rep.run([A, B, np.array(1, np.int64)])[0], B)
    np.testing.assert_array_equal(rep.run([A, B, np.array(-2, np.int64)])[0], A)


def test_empty_optional_get_element_is_a_model_error() -> None:
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [helper.make_node("OptionalGetElement", ["o"], ["y"])]
    m = _model(nodes, [helper.make_value_info("o", opt_t)], [_tin("y", [2])])
    with pytest.raises(ModelError, match="the optional is empty"):
        onnx_backend.prepare(m, backend="interpreter").run([None])


def test_sequence_where_a_tensor_is_expected_is_a_type_error() -> None:
    nodes = [helper.make_node("SequenceConstruct", ["a"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = _model(nodes, [_tin("a", [2, 3])], [_tin("y", [2, 3])])
    m.ir_version = 8
    with pytest.raises((GlowTypeError, ModelError), match="sequence|type"):
        glow_compile(m, "interpreter")


def test_sequence_input_needs_its_signature() -> None:
    m = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [_seq("s")], [_tin("n", [], TensorProto.INT64)])
    with pytest.raises(ImportShapeError, match="is a sequence: its length and element shapes must be given"):
        glow_compile(m, "interpreter")
    net = glow_compile(m, "interpreter", {"s": SeqShape([(2,), (3,)])})
    assert sorted(net.input_types) == ["s[0]", "s[1]"]
    assert int(net.run({"s[0]": np.zeros(2, np.float32), "s[1]": np.zeros(3, np.float32)})["n"]) == 2
    with pytest.raises(InputError, match="is a sequence: pass a list"):
        onnx_backend.prepare(m).run([A])
    with pytest.raises(ImportShapeError, match="optional"):
        opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
        m2 = _model([helper.make_node("OptionalHasElement", ["o"], ["h"])], [helper.make_value_info("o", opt)],
                    [_tin("h", [], TensorProto.BOOL)])
        glow_compile(m2, "interpreter")
    assert int(glow_compile(m2, "interpreter", {"o": OptShape(None)}).run({})["h"]) == 0


def test_too_long_a_sequence_is_refused() -> None:
    node = helper.make_node("SplitToSequence", ["x"], ["s"])
    m = _model([node], [_tin("x", [5000])], [_seq("s")])
    with pytest.raises(BudgetError, match="a sequence of 5000 tensors"):
        glow_compile(m, "interpreter")


def _body(nodes: list[onnx.NodeProto], ins: list[onnx.ValueInfoProto], outs: list[onnx.ValueInfoProto]) -> onnx.GraphProto:
    return helper.make_graph(nodes, "body", ins, outs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_map_inlines_the_body_per_element(backend: str) -> None:
    # body(x) -> (x + t, shape(x)), 't' read from the enclosing graph; the body's names come and go per element
    body = _body([helper.make_node("Add", ["x", "t"], ["y"]), helper.make_node("Shape", ["x"], ["shp"])],
                 [_tin("x", None)], [_tin("y", None), _tin("shp", [2], TensorProto.INT64)])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("SequenceMap", ["s"], ["sums", "shapes"], body=body)]
    m = _model(nodes, [_tin("a", [2, 3]), _tin("b", [4, 3]), _tin("c", [1, 3]), _tin("t", [1, 3])],
               [_seq("sums"), helper.make_value_info("shapes", helper.make_sequence_type_proto(
                   helper.make_tensor_type_proto(TensorProto.INT64, [2]))), _tin("r", [2, 3])])
    t = np.full((1, 3), 10, np.float32)
    # (onnx.reference's SequenceMap cannot read outer-scope names: checked against numpy)
    sums, shapes, r = onnx_backend.prepare(m, backend=backend).run([A, B, C, t])
    for got, x in zip(sums, (A, B, C)):
        np.testing.assert_array_equal(got, x + t)
    np.testing.assert_array_equal(shapes[1], [4, 3])
    np.testing.assert_array_equal(r, np.maximum(A, 0))


def test_sequence_map_body_with_an_unsupported_op_is_refused_clearly() -> None:
    from glow_core.errors import UnsupportedOpsError

    body = _body([helper.make_node("Bernoulli", ["x"], ["y"])], [_tin("x", None)], [_tin("y", None)])
    nodes = [helper.make_node("SequenceConstruct", ["a"], ["s"]),
             helper.make_node("SequenceMap", ["s"], ["out"], body=body)]
    m = _model(nodes, [_tin("a", [2, 3])], [_seq("out")])
    with pytest.raises(UnsupportedOpsError, match="Bernoulli"):
        glow_compile(m, "interpreter")
