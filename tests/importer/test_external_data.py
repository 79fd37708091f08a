"""External tensor data is read only from inside the model's own directory."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import glow_core
from glow_core.errors import ModelError
from glow_core.importer import import_model, load_model
from tests.importer.modelutil import add_weight_model

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)


def _external_model(model_dir: Path, location: str, offset: int | None = None) -> Path:
    """``y = x + w`` saved in ``model_dir`` with ``w`` pointing at ``location`` (the file is not written)."""
    m = add_weight_model(WEIGHT)
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)] + ([("offset", str(offset))] if offset is not None else [])
    entries.append(("length", str(WEIGHT.nbytes)))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def _run(path: Path | onnx.ModelProto) -> np.ndarray:
    net = glow_core.compile(path)
    return net.run({"x": np.ones((2, 3), np.float32)})["y"]


def test_data_inside_the_model_directory_loads(tmp_path: Path) -> None:
    path = _external_model(tmp_path / "m", "w.bin")
    WEIGHT.tofile(tmp_path / "m" / "w.bin")
    np.testing.assert_array_equal(_run(path), WEIGHT + 1)


def test_data_in_a_subdirectory_and_at_an_offset_loads(tmp_path: Path) -> None:
    path = _external_model(tmp_path / "m", "data/blob.bin", offset=16)
    (tmp_path / "m" / "data").mkdir()
    (tmp_path / "m" / "data" / "blob.bin").write_bytes(b"\xff" * 16 + WEIGHT.tobytes() + b"\xff" * 8)
    np.testing.assert_array_equal(_run(path), WEIGHT + 1)


def test_onnx_saved_external_data_loads(tmp_path: Path) -> None:
    m = add_weight_model(WEIGHT)
    onnx.save_model(m, str(tmp_path / "saved.onnx"), save_as_external_data=True, location="saved.data",
                    size_threshold=0)
    assert (tmp_path / "saved.data").is_file()
    np.testing.assert_array_equal(_run(tmp_path / "saved.onnx"), WEIGHT + 1)


@pytest.mark.parametrize("location", ["../x.bin", "sub/../../x.bin", "ABSOLUTE"])
def test_data_outside_the_model_directory_is_refused(tmp_path: Path, location: str) -> None:
    outside = tmp_path / "x.bin"
    WEIGHT.tofile(outside)  # it exists: the refusal is about where it is, not whether
    if location == "ABSOLUTE":
        location = str(outside)
    path = _external_model(tmp_path / "m", location)
    with pytest.raises(ModelError, match="outside the model's directory; refused") as info:
        glow_core.compile(path)
    assert "tensor 'w'" in str(info.value)


def test_a_symlink_escaping_the_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "secret.bin"
    WEIGHT.tofile(outside)
    path = _external_model(tmp_path / "m", "link.bin")
    try:
        os.symlink(outside, tmp_path / "m" / "link.bin")
    except OSError:  # pragma: no cover
        pytest.skip("symlinks are not available")
    with pytest.raises(ModelError, match="outside the model's directory"):
        load_model(path)


def test_missing_external_file_is_a_model_error(tmp_path: Path) -> None:
    path = _external_model(tmp_path / "m", "absent.bin")
    with pytest.raises(ModelError, match="'absent.bin' is missing"):
        import_model(path)


def test_an_in_memory_model_with_external_references_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _external_model(tmp_path / "m", "w.bin")
    WEIGHT.tofile(tmp_path / "m" / "w.bin")
    proto = onnx.load(str(path), load_external_data=False)
    monkeypatch.chdir(tmp_path / "m")  # where onnx would otherwise look for w.bin
    with pytest.raises(ModelError, match="given in memory") as info:
        glow_core.compile(proto)
    assert "onnx.load" in info.value.hint
    np.testing.assert_array_equal(_run(onnx.load(str(path))), WEIGHT + 1)  # loaded with its data: fine
