"""``glow bench`` and the code generator's structure (kernel dedup, barriers, unused weights, profiling)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_cli import main as cli_main
from glow_cli.cmd_bench import benchmark, count_flops


def _convnet() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32), "w2")
    w3 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32), "w3")
    fc = numpy_helper.from_array((rng.standard_normal((8 * 16 * 16, 10)) * 0.02).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["q3"]),
        helper.make_node("Add", ["q3", "r1"], ["r3"]),
        helper.make_node("Flatten", ["r3"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w1, w2, w3, fc])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_flops_count_conv_and_matmul() -> None:
    net = glow_core.compile(_convnet(), "cpu")
    want = 2 * (8 * 16 * 16 * 3 * 9 + 2 * 8 * 16 * 16 * 8 * 9 + 8 * 16 * 16 * 10)
    assert count_flops(net.function) == want


def test_benchmark_against_onnxruntime(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxruntime")
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(), str(path))
    r = benchmark(str(path), "cpu", threads=2, compare="onnxruntime", warmup=1, runs=3)
    assert len(r.glow.runs) == 3 and r.ref is not None and len(r.ref.runs) == 3
    assert r.threads == 2 and r.ratio is not None and r.ratio > 0
    assert r.max_abs_diff is not None and r.max_abs_diff < 1e-3
    assert math.isfinite(r.gflops()) and r.glow.min <= r.glow.median <= r.glow.max


def test_glow_bench_command_prints_latencies_and_ratio(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxruntime")
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(), str(path))
    code = cli_main.main(["bench", str(path), "--backend", "cpu", "--threads", "1", "--compare", "onnxruntime",
                          "--warmup", "0", "--runs", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    for word in ("median", "GFLOP/s", "onnxruntime", "ratio", "compile", "1 thread(s)"):
        assert word in out


def test_glow_bench_rejects_unknown_comparisons() -> None:
    assert cli_main.main(["bench", "zoo:squeezenet", "--backend", "cpu", "--compare", "tensorflow"]) == 2


def test_identical_kernels_are_emitted_once_and_barriers_only_between_dependent_steps() -> None:
    net = glow_core.compile(_convnet(), "cpu", options={"cache": False})
    lay = net.executable.layout
    assert lay.kernels_emitted < lay.kernels  # the two 8->8 convolutions share one kernel
    assert lay.barriers <= lay.kernels


def test_independent_branches_share_a_barrier_epoch() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 512])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [64, 512]) for n in ("a", "b", "c")]
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Abs", ["x"], ["c"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 17)])
    net = glow_core.compile(m, "cpu", options={"cache": False})
    assert net.executable.layout.kernels == 3 and net.executable.layout.barriers == 1  # only the final one
    xs = np.linspace(-2, 2, 64 * 512, dtype=np.float32).reshape(64, 512)
    out = net.run({"x": xs})
    np.testing.assert_allclose(out["a"], np.exp(xs), rtol=1e-6)
    np.testing.assert_array_equal(out["b"], -xs)
    np.testing.assert_array_equal(out["c"], np.abs(xs))


def test_profile_gives_seconds_per_kernel() -> None:
    net = glow_core.compile(_convnet(), "cpu", options={"profile": True, "cache": False})
    net.run({"x": np.ones((1, 3, 16, 16), np.float32)})
    prof = net.executable.profile()
    assert len(prof) == net.executable.layout.kernels
    assert all(s >= 0 for _, s in prof) and any("Conv" in k for k, _ in prof)
