"""Compile-time work of the cpu backend: the stage timings it reports, kernels printed once, the bench script."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core

ROOT = Path(__file__).resolve().parents[2]


def _model() -> onnx.ModelProto:
    """Three equal convolutions (kernels the code generator shares), a BatchNormalization, a matrix product."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(w, f"w{k}") for k in range(3)]
    inits += [numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), n) for n in ("sc", "var")]
    inits += [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), n) for n in ("bi", "mean")]
    inits.append(numpy_helper.from_array((rng.standard_normal((8 * 8 * 8, 4)) * 0.05).astype(np.float32), "fc"))
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             mk("BatchNormalization", ["c0", "sc", "bi", "mean", "var"], ["b0"]),
             mk("Relu", ["b0"], ["r0"]),
             mk("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]), mk("Relu", ["c1"], ["r1"]),
             mk("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), mk("Relu", ["c2"], ["r2"]),
             mk("Flatten", ["r2"], ["f"]), mk("MatMul", ["f", "fc"], ["y"])]
    g = helper.make_graph(nodes, "ctime", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_module_text_is_the_module_printed() -> None:
    from glow_backend_cpu.codegen import generate, module_text
    from glow_backend_cpu.target import host_codegen
    from glow_core.lircompiler import build_lir

    net = glow_core.compile(_model(), "cpu", options={"cache": False})
    module, layout = generate(host_codegen(), build_lir(net.function))
    assert layout.kernels_emitted < layout.kernels  # equal convolutions share a kernel
    assert module_text(module) == str(module)


def test_compile_stats_name_every_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path))
    x = np.random.default_rng(6).standard_normal((1, 8, 8, 8)).astype(np.float32)
    cold = glow_core.compile(_model(), "cpu")
    assert {"lower", "fold-batchnorm", "cse"} <= set(cold.stats.pass_s)
    assert cold.stats.backend_s["cached"] is False
    assert {"key", "lir", "irgen", "parse", "optimize", "codegen", "load"} <= set(cold.stats.backend_s)
    # the packed constants just stored are mapped from the cache file, not copied
    assert cold.executable.layout.packed_bytes and cold.executable._packed_map is not None
    cached = glow_core.compile(_model(), "cpu")
    assert cached.stats.backend_s["cached"] is True and "irgen" not in cached.stats.backend_s
    ref = glow_core.compile(_model(), "interpreter").run({"x": x})["y"]
    for net in (cold, cached):
        np.testing.assert_allclose(net.run({"x": x})["y"], ref, rtol=1e-4, atol=1e-5)


def test_bench_compile_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    spec = importlib.util.spec_from_file_location("bench_compile", ROOT / "scripts" / "bench_compile.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_compile"] = mod
    spec.loader.exec_module(mod)
    assert mod.main(["--model", str(path), "--runs", "1"]) == 0
    out = capsys.readouterr().out
    for phase in mod.PHASES:
        assert f"| {phase} |" in out
    assert "cache hits on the second compile: 1/1" in out and "load average" in out
    assert "program-cache hits in the fresh process: 1/1" in out  # a model file: served before import
