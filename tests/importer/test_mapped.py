"""importer/mapped.py: a large model's weights read as views of the mapped file, the rest parsed as usual."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.errors import GlowError
from glow_core.importer import mapped
from glow_core.importer.weights import split_weights


def _model(rng: np.random.Generator, hidden: int = 200) -> onnx.ModelProto:
    w1 = rng.standard_normal((64, hidden)).astype(np.float32)
    w2 = rng.standard_normal((hidden, 32)).astype(np.float32)
    table = rng.integers(-5, 5, size=(100, 64)).astype(np.int64)
    small = rng.standard_normal((32,)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("Cast", ["e"], ["ef"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["ef", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Add", ["o", "small"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(table, "table"), numpy_helper.from_array(small, "small")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_mapped_model_matches_the_parsed_split(tmp_path) -> None:
    proto = _model(np.random.default_rng(0))
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    got = mapped.map_model(path, min_bytes=1)
    assert got is not None
    stripped, weights, _ = got
    want_stripped, want_weights = split_weights(onnx.load(path))
    assert sorted(weights) == sorted(want_weights) == ["table", "w1", "w2"]
    for name, arr in want_weights.items():
        assert weights[name].dtype == arr.dtype and weights[name].shape == arr.shape
        np.testing.assert_array_equal(weights[name], arr)
        assert not weights[name].flags.writeable
    for part in ("node", "input", "output", "initializer", "value_info"):  # (as messages: field order may differ)
        assert list(getattr(stripped.graph, part)) == list(getattr(want_stripped.graph, part)), part
    assert stripped.opset_import == want_stripped.opset_import and stripped.ir_version == want_stripped.ir_version


def test_compile_from_a_mapped_file_gives_the_same_answers(tmp_path, monkeypatch) -> None:
    proto = _model(np.random.default_rng(1))
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    ids = np.array([3, 7, 99, 0], np.int64)
    want = glow_core.compile(proto, backend="interpreter").run({"ids": ids})["y"]
    calls: list[int] = []
    real = mapped.map_model
    monkeypatch.setattr("glow_core.driver.map_model",
                        lambda p: calls.append(1) or real(p, min_bytes=1))
    for backend in ("interpreter", "cpu"):
        net = glow_core.compile(str(path), backend=backend)
        np.testing.assert_allclose(net.run({"ids": ids})["y"], want, rtol=1e-5, atol=1e-5)
        # and again after the mapped pages were dropped: they are read from the file again
        np.testing.assert_allclose(net.run({"ids": ids[::-1].copy()})["y"], want[::-1], rtol=1e-5, atol=1e-5)
    assert calls, "the driver did not read the file through the mapping"


def test_packed_dims_are_read(tmp_path) -> None:
    """dims written as one packed field (legal protobuf) are read like repeated ones."""
    arr = np.arange(5000 * 2, dtype=np.float32).reshape(5000, 2)
    t = numpy_helper.from_array(arr, "w")
    raw = t.SerializeToString()
    body = t.__class__()
    body.CopyFrom(t)
    del body.dims[:]
    rest = body.SerializeToString()
    packed = mapped._encode_varint(1 << 3 | 2) + mapped._encode_varint(3) + mapped._encode_varint(5000) + \
        mapped._encode_varint(2)
    blob = packed + rest
    assert blob != raw and raw.startswith(b"\x08")  # (unpacked in the serializer, packed here)
    got = mapped._tensor(memoryview(blob), 0, len(blob))
    assert got is not None
    _, (dtype, shape, offset) = got
    assert shape == (5000, 2) and dtype == np.float32
    np.testing.assert_array_equal(np.frombuffer(blob, np.float32, 10000, offset).reshape(shape), arr)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "length"])
def test_malformed_files_fall_back_to_the_ordinary_parser(tmp_path, damage: str) -> None:
    data = bytearray(_model(np.random.default_rng(2)).SerializeToString())
    if damage == "truncate":
        data = data[: len(data) * 2 // 3]
    elif damage == "garbage":
        data[len(data) // 2: len(data) // 2 + 64] = bytes(range(64))
    else:  # a length prefix pointing past the end of the file
        data = bytearray(b"\x3a\xff\xff\xff\x7f") + data
    path = tmp_path / "bad.onnx"
    path.write_bytes(bytes(data))
    got = mapped.map_model(path, min_bytes=1)  # never raises, never crashes
    if got is not None:  # a mutation the wire walk cannot see: its arrays must still be in bounds
        for arr in got[1].values():
            assert arr.nbytes <= len(data)
    feeds = {"ids": np.array([1, 2], np.int64)}
    try:
        want = glow_core.compile(onnx.load(path), backend="interpreter").run(feeds)
    except Exception:  # noqa: BLE001  (the ordinary parser refuses it: so must the path route)
        with pytest.raises(GlowError):
            glow_core.compile(str(path), backend="interpreter").run(feeds)
        assert damage != "garbage" or got is None
        return
    assert damage == "garbage"  # (bytes changed inside a weight: still a model)
    got_y = glow_core.compile(str(path), backend="interpreter").run(feeds)["y"]
    np.testing.assert_array_equal(got_y, want["y"])


def test_small_files_and_external_data_take_the_ordinary_path(tmp_path) -> None:
    proto = _model(np.random.default_rng(3))
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    assert mapped.map_model(path) is None  # far below MIN_MAPPED_BYTES
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save(proto, ext / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    assert mapped.map_model(ext / "m.onnx", min_bytes=1) is None


def test_a_session_reads_a_large_file_through_the_mapping(tmp_path, monkeypatch) -> None:
    proto = _model(np.random.default_rng(4))
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    ids = np.array([9, 1, 4], np.int64)
    want = glow_core.compile(proto, backend="interpreter").run({"ids": ids})["y"]
    calls: list[int] = []
    real = mapped.map_model
    monkeypatch.setattr("glow_core.session.session.map_model",
                        lambda p: calls.append(1) or real(p, min_bytes=1))
    sess = glow_core.InferenceSession(str(path), providers=["cpu"])
    assert calls and sess._mapping is not None
    np.testing.assert_allclose(sess.run(None, {"ids": ids})[0], want, rtol=1e-5, atol=1e-5)
