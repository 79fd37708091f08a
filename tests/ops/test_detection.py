"""NonMaxSuppression and Unique (data-dependent result sizes) on interpreter, interpreter-primitives (lowered) and
cpu (native emitters), against onnx.reference /
numpy.unique; the trimmed model outputs; refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_core.api import compile as glow_compile
from glow_core.errors import UnsupportedError

BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]  # (interpreter-primitives: the lowerings)
RNG = np.random.default_rng(3)


def _nms_model(b: int, c: int, n: int, center: int = 0, thresholds: bool = True) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [b, n, 4]),
           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [b, c, n]),
           helper.make_tensor_value_info("k", TensorProto.INT64, [1])]
    names = ["boxes", "scores", "k"]
    if thresholds:
        ins += [helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
                helper.make_tensor_value_info("score", TensorProto.FLOAT, [1])]
        names += ["iou", "score"]
    node = helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    out = helper.make_tensor_value_info("sel", TensorProto.INT64, ["m", 3])
    return helper.make_model(helper.make_graph([node], "g", ins, [out]), opset_imports=[helper.make_opsetid("", 11)])


def _boxes(b: int, n: int, center: int) -> np.ndarray:
    start = RNG.uniform(0, 5, (b, n, 2))
    size = RNG.uniform(0.5, 3, (b, n, 2))
    if center:
        return np.concatenate([start + size / 2, size], axis=2).astype(np.float32)
    corners = np.concatenate([start, start + size], axis=2)
    flip = RNG.random((b, n)) < 0.3  # some boxes give their corners the other way round
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    return corners.astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("b,c,n,k,center,iou,score", [
    (1, 1, 30, 10, 0, 0.3, 0.0), (2, 3, 25, 4, 0, 0.5, 0.4), (2, 2, 20, 50, 1, 0.2, 0.1), (1, 2, 8, 0, 0, 0.5, 0.0),
    (1, 1, 12, 12, 0, 0.0, 0.0),
])
def test_nms_matches_onnx_reference(backend: str, b, c, n, k, center, iou, score) -> None:
    m = _nms_model(b, c, n, center)
    scores = RNG.random((b, c, n)).astype(np.float32)
    scores[..., :3] = scores[..., 3:4]  # ties: the lower box index goes first
    feeds = [_boxes(b, n, center), scores, np.array([k], np.int64), np.array([iou], np.float32),
             np.array([score], np.float32)]
    want = ReferenceEvaluator(m).run(None, dict(zip(["boxes", "scores", "k", "iou", "score"], feeds)))[0]
    got = onnx_backend.prepare(m, backend=backend).run(feeds)[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape[0] <= b * c * min(k, n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nms_without_thresholds_keeps_every_class_greedily(backend: str) -> None:
    m = _nms_model(1, 1, 3, thresholds=False)
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3]]], np.float32)
    scores = np.array([[[0.1, 0.9, 0.5]]], np.float32)
    got = onnx_backend.prepare(m, backend=backend).run([boxes, scores, np.array([3], np.int64)])[0]
    # the default IoU threshold 0 suppresses any overlap: box 0 (same as box 1) goes
    np.testing.assert_array_equal(got, [[0, 0, 1], [0, 0, 2]])


def test_nms_padded_output_and_count_through_compile() -> None:
    m = _nms_model(1, 1, 4)
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.05], [5, 5, 6, 6], [9, 9, 10, 10]]], np.float32)
    net = glow_compile(m, "interpreter", bind={"k": np.array([3], np.int64)})
    outs = net.run({"boxes": boxes, "scores": np.array([[[0.9, 0.8, 0.7, 0.1]]], np.float32),
                    "iou": np.array([0.5], np.float32), "score": np.array([0.2], np.float32)})
    assert net.function.structure == {"sel": ("ragged", 0)}
    assert int(outs["sel[count]"]) == 2
    np.testing.assert_array_equal(outs["sel"], [[0, 0, 0], [0, 0, 2], [-1, -1, -1]])


def test_a_node_reading_a_data_dependent_result_is_refused() -> None:
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])]
    nodes = [helper.make_node("Unique", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    out = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["m"])
    m = helper.make_model(helper.make_graph(nodes, "g", ins, [out]), opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(UnsupportedError, match="data-dependent size .*only as a model output"):
        glow_compile(m, "interpreter")


def _unique_model(shape: list[int], elem: int, **attrs) -> onnx.ModelProto:
    node = helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], **attrs)
    outs = [helper.make_tensor_value_info("y", elem, ["u"] * (len(shape) if "axis" in attrs else 1))]
    outs += [helper.make_tensor_value_info(n, TensorProto.INT64, ["u"]) for n in ("idx", "inv", "cnt")]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])


def _expected_unique(x: np.ndarray, axis: int | None, sorted_: int) -> list[np.ndarray]:
    """numpy.unique, then (unsorted) groups reordered by first occurrence, as the ONNX spec defines."""
    y, first, inv, cnt = np.unique(x if axis is not None else x.reshape(-1), True, True, True, axis=axis)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, cnt, inv = first[order], cnt[order], rank[inv]
        y = np.take(x if axis is not None else x.reshape(-1), first, axis=axis or 0)
    return [y, first.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,axis,sorted_,dtype", [
    ((20,), None, 1, np.int64), ((20,), None, 0, np.int64), ((4, 6), None, 0, np.float32), ((7, 3), 0, 1, np.int32),
    ((7, 3), 0, 0, np.int32), ((2, 6, 2), 1, 0, np.float32), ((3, 5), 1, 1, np.uint8), ((1,), None, 1, np.float64),
])
def test_unique(backend: str, shape, axis, sorted_, dtype) -> None:
    x = RNG.integers(0, 3, shape).astype(dtype)
    attrs = {"sorted": sorted_} | ({"axis": axis} if axis is not None else {})
    m = _unique_model(list(shape), helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), **attrs)
    got = onnx_backend.prepare(m, backend=backend).run([x])
    for g, w in zip(got, _expected_unique(x, axis, sorted_)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_nan_sorts_last_and_merges(backend: str) -> None:
    x = np.array([2.0, np.nan, -1.0, np.nan, 2.0, -0.5], np.float32)
    m = _unique_model([6], TensorProto.FLOAT)
    y, idx, inv, cnt = onnx_backend.prepare(m, backend=backend).run([x])
    np.testing.assert_array_equal(y, [-1.0, -0.5, 2.0, np.nan])
    np.testing.assert_array_equal(idx, [2, 5, 0, 1])
    np.testing.assert_array_equal(cnt, [1, 1, 2, 2])
    np.testing.assert_array_equal(inv, [2, 3, 0, 3, 2, 1])


def test_huge_unique_is_refused_not_run_for_minutes() -> None:
    """Quadratic kernels have a bound: past it the cpu backend neither runs its kernel nor lowers it."""
    pytest.importorskip("glow_backend_cpu")
    m = _unique_model([200_000], TensorProto.FLOAT)
    with pytest.raises(UnsupportedError, match="cannot run"):
        glow_compile(m, "cpu")
