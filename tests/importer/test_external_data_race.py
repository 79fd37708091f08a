"""External data cannot escape the model's folder, even while a sub-folder is swapped for a symbolic link to an
outside folder during the loads (issue 32: 7 of 3,000 loads returned the outside file's values, 5 raised a bare
FileNotFoundError). ``GLOW_RACE_LOADS`` sets the number of loads (300 by default; 10,000 for the issue's run)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from glow_core.errors import GlowError, ModelError
from glow_core.importer import load_model
from tests.importer.modelutil import add_weight_model

INSIDE = np.full((2, 3), 1.0, np.float32)
OUTSIDE = np.full((2, 3), 666.0, np.float32)


def _model(folder: Path, location: str = "data/blob.bin") -> Path:
    """``y = x + w``, ``w`` in ``location`` beneath ``folder``."""
    m = add_weight_model(INSIDE)
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("length", str(INSIDE.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(m.SerializeToString())
    return folder / "model.onnx"


def _swapper(folder: Path, outside: Path, stop: threading.Event) -> None:
    """``data`` is in turn the real folder, absent, a symbolic link to ``outside``, absent, ..."""
    real, name = folder / "data.real", folder / "data"
    while not stop.is_set():
        os.rename(real, name)
        os.rename(name, real)
        os.symlink(outside, name)
        os.unlink(name)


def test_a_swapped_sub_folder_never_leads_outside(tmp_path: Path) -> None:
    path = _model(tmp_path / "m")
    (tmp_path / "m" / "data.real").mkdir()
    INSIDE.tofile(tmp_path / "m" / "data.real" / "blob.bin")
    (tmp_path / "outside").mkdir()
    OUTSIDE.tofile(tmp_path / "outside" / "blob.bin")
    loads = int(os.environ.get("GLOW_RACE_LOADS", "300"))
    stop = threading.Event()
    swapper = threading.Thread(target=_swapper, args=(tmp_path / "m", tmp_path / "outside", stop), daemon=True)
    counts = {"inside": 0, "outside": 0, "refused": 0}
    foreign: list[str] = []
    t0 = time.perf_counter()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads interleave often: many loads meet a swap half-way
    swapper.start()
    try:
        for _ in range(loads):
            try:
                proto, _ = load_model(path)
            except GlowError:
                counts["refused"] += 1
                continue
            except Exception as e:  # noqa: BLE001  (what the test is about: no bare OSError)
                foreign.append(f"{type(e).__name__}: {e}")
                continue
            w = numpy_helper.to_array(proto.graph.initializer[0])
            counts["outside" if np.array_equal(w, OUTSIDE) else "inside"] += 1
    finally:
        stop.set()
        swapper.join(timeout=10)
        sys.setswitchinterval(interval)
    assert counts["outside"] == 0, counts
    assert not foreign, foreign[:5]
    assert counts["inside"] + counts["refused"] == loads
    assert time.perf_counter() - t0 < 120


def test_a_swap_between_the_folder_and_the_file_is_not_followed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The race made deterministic: ``data`` becomes a link to the outside folder just before the file is
    opened. The path-based loader opened ``.../data/blob.bin`` through the new link (the outside values);
    opened relative to the handle of the folder it checked, the file is the inside one."""
    path = _model(tmp_path / "m")
    (tmp_path / "m" / "data").mkdir()
    INSIDE.tofile(tmp_path / "m" / "data" / "blob.bin")
    (tmp_path / "outside").mkdir()
    OUTSIDE.tofile(tmp_path / "outside" / "blob.bin")
    real_open = os.open
    swapped: list[bool] = []

    def swapping_open(file: object, flags: int, *args: object, **kwargs: object) -> int:
        if os.fspath(file).endswith("blob.bin") and not swapped:  # type: ignore[call-overload]
            os.rename(tmp_path / "m" / "data", tmp_path / "m" / "data.real")
            os.symlink(tmp_path / "outside", tmp_path / "m" / "data")
            swapped.append(True)
        return real_open(file, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", swapping_open)
    monkeypatch.setattr(os, "supports_dir_fd", os.supports_dir_fd | {swapping_open})
    proto, _ = load_model(path)
    assert swapped
    np.testing.assert_array_equal(numpy_helper.to_array(proto.graph.initializer[0]), INSIDE)


def test_a_symbolic_link_inside_the_folder_is_refused_too(tmp_path: Path) -> None:
    """Every component is opened without following links: a link that stays inside is refused as well (the
    path is never resolved, so a link swapped meanwhile cannot change where it leads)."""
    path = _model(tmp_path / "m")
    (tmp_path / "m" / "real").mkdir()
    INSIDE.tofile(tmp_path / "m" / "real" / "blob.bin")
    os.symlink(tmp_path / "m" / "real", tmp_path / "m" / "data")
    with pytest.raises(ModelError, match="passes through a symbolic link"):
        load_model(path)


def test_dot_dot_inside_the_location_stays_inside(tmp_path: Path) -> None:
    """``..`` is resolved in the text of the location (never through a link), and may not leave the folder."""
    (tmp_path / "m" / "data").mkdir(parents=True)
    INSIDE.tofile(tmp_path / "m" / "data" / "blob.bin")
    path = _model(tmp_path / "m2", "other/../data/blob.bin")
    with pytest.raises(ModelError, match="missing"):  # (m2 holds no data folder)
        load_model(path)
    os.rename(path, tmp_path / "m" / "model.onnx")
    proto, _ = load_model(tmp_path / "m" / "model.onnx")
    np.testing.assert_array_equal(numpy_helper.to_array(proto.graph.initializer[0]), INSIDE)
    with pytest.raises(ModelError, match="outside the model's directory"):
        load_model(_model(tmp_path / "m3", "data/../../m/data/blob.bin"))
