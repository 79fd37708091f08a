"""The cpu backend's per-kernel profiler (``profiling.py``) and ``glow bench --profile``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.lir.instructions import Effect

NODES = ["conv_a", "relu_a", "conv_b", "relu_b", "add_skip", "flatten", "head"]


def _model() -> onnx.ModelProto:
    """Two convolutions, a skip connection and a matrix product; every ONNX node named."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32), "w2")
    fc = numpy_helper.from_array((rng.standard_normal((8 * 16 * 16, 10)) * 0.02).astype(np.float32), "fc")
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "w1"], ["c1"], name="conv_a", pads=[1, 1, 1, 1]),
             mk("Relu", ["c1"], ["r1"], name="relu_a"),
             mk("Conv", ["r1", "w2"], ["c2"], name="conv_b", pads=[1, 1, 1, 1]),
             mk("Relu", ["c2"], ["r2"], name="relu_b"),
             mk("Add", ["r2", "r1"], ["s"], name="add_skip"),
             mk("Flatten", ["s"], ["f"], name="flatten"),
             mk("MatMul", ["f", "fc"], ["y"], name="head")]
    g = helper.make_graph(nodes, "profiled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w1, w2, fc])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compile(threads: int, profile: bool = True) -> glow_core.CompiledNetwork:  # type: ignore[name-defined]
    return glow_core.compile(_model(), "cpu", threads=threads,
                             options={"profile": profile, "cache": False, "parallel_threshold": 0})


X = {"x": np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)}


def test_unprofiled_module_has_no_timing_code() -> None:
    from glow_backend_cpu.codegen import generate
    from glow_backend_cpu.target import host_codegen
    from glow_core.lircompiler import build_lir

    net = glow_core.compile(_model(), "cpu", options={"cache": False})
    plain, layout = generate(host_codegen(), build_lir(net.function))
    text = str(plain)
    # (the glue's share functions read the clock to time the threads for the split: balance.py)
    assert "readcyclecounter" not in str(plain.get_global("glow_main")) and "glow_profile" not in text
    assert not layout.profile
    profiled, players = generate(host_codegen(), build_lir(net.function), profile=True)
    text = str(profiled)
    # two stamps per kernel plus the run's start and end, all in glow_main
    main = str(profiled.get_global("glow_main"))
    assert main.count("call i64 @\"llvm.readcyclecounter\"()") == 2 * players.kernels + 2
    assert "@\"glow_profile\"" in text and len(players.profile) == players.kernels


def test_every_lir_instruction_is_timed_and_times_fit_in_the_run() -> None:
    net = _compile(threads=1)
    net.run(X)
    run = net.executable.profile_run()
    lir = net.executable.lir
    want = {i.name for i in lir.instrs if i.effect in (Effect.COMPUTE, Effect.COPY)}
    got = [i["name"] for k in run.kernels for i in k.instrs]
    assert sorted(got) == sorted(want) and len(want) >= 4
    assert all(s >= 0 and e >= s for k in run.kernels for s, e in k.spans)
    total = sum(k.seconds for k in run.kernels)
    assert 0 < total <= run.wall * 1.05 + 50e-6
    assert run.span <= run.wall * 1.05 + 50e-6
    # the FLOPs of the kernels are those of the graph's convolutions and matrix product
    from glow_cli.cmd_bench import count_flops

    assert sum(k.flops for k in run.kernels) == count_flops(net.function) > 0


def test_two_threads_trace_has_every_worker() -> None:
    net = _compile(threads=2)
    assert net.executable.parallel
    net.run(X)
    run = net.executable.profile_run()
    assert run.threads == 2
    trace = json.loads(json.dumps(run.chrome_trace("profiled")))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in events} == {0, 1}
    assert len(events) == 2 * len(run.kernels)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and e["pid"] == 1 for e in events)
    for k in run.kernels:  # each thread's busy time is inside the run
        assert sum(e - s for s, e in k.spans) / 2 == pytest.approx(k.seconds)
    assert sum(k.seconds for k in run.kernels) <= run.wall * 1.05 + 50e-6
    # the time some thread was in a kernel: the union of the kernels' spans, within the stamped span
    merged: list[list[float]] = []
    for s, e in sorted(span for k in run.kernels for span in k.spans):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    assert run.in_kernels == pytest.approx(sum(e - s for s, e in merged))
    busy = sum(e - s for k in run.kernels for s, e in k.spans)
    assert max(k.slowest for k in run.kernels) <= run.in_kernels <= min(run.span + 1e-9, busy)
    # outputs are still right with the stamps in
    plain = glow_core.compile(_model(), "cpu", threads=2, options={"cache": False, "parallel_threshold": 0})
    np.testing.assert_allclose(net.run(X)["y"], plain.run(X)["y"], rtol=1e-5, atol=1e-6)


def test_per_node_aggregation_names_onnx_nodes() -> None:
    net = _compile(threads=1)
    net.run(X)
    rows = net.executable.profile_run().by_origin()
    names = [r[0] for r in rows]
    assert set(names) <= set(NODES)
    assert {"conv_a", "conv_b", "head"} <= set(names)
    secs = [r[2] for r in rows]
    assert secs == sorted(secs, reverse=True) and all(s >= 0 for s in secs)
    flops = {r[0]: r[3] for r in rows}
    assert flops["conv_a"] == 2 * 8 * 16 * 16 * 3 * 9 and flops["head"] == 2 * 10 * 8 * 16 * 16


def test_profile_needs_the_option() -> None:
    net = _compile(threads=1, profile=False)
    net.run(X)
    with pytest.raises(glow_core.errors.InputError, match="profile"):
        net.executable.profile_run()


def _glow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glow_cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_bench_profile_cli(tmp_path: Path) -> None:
    onnx.save(_model(), tmp_path / "m.onnx")
    p = _glow("bench", "m.onnx", "-b", "cpu", "--threads", "2", "--profile", "--runs", "2", "--warmup", "1",
              "--trace", "t.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "kernels (LIR instructions" in out and "ONNX nodes" in out
    head = re.search(r"median of 2 run\(s\): ([\d.]+) (us|ms) per run, ([\d.]+) (us|ms) in (\d+) kernels, "
                     r"([\d.]+) (us|ms) \(([\d.]+)%\) outside them", out)
    assert head is not None, out
    scale = {"us": 1e-6, "ms": 1e-3}
    per_run, covered, outside = (float(head[i]) * scale[head[i + 1]] for i in (1, 3, 6))
    assert per_run == pytest.approx(covered + outside, rel=0.01, abs=2e-7) and 0 < covered <= per_run
    # (the times are printed to 0.1 us: a tiny network's share moves by a few tenths of a percent with them)
    assert float(head[8]) == pytest.approx(100 * outside / per_run, abs=1.0)
    assert "conv_a" in out and "head" in out and "GFLOP/s" in out
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])


def test_bench_profile_other_backend_says_so(tmp_path: Path) -> None:
    onnx.save(_model(), tmp_path / "m.onnx")
    p = _glow("bench", "m.onnx", "-b", "interpreter", "--profile", "--runs", "1", cwd=tmp_path)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == ["glow: error: backend 'interpreter' has no per-kernel profiler; "
                     "--profile works with the cpu backend"]


def test_worked_example_of_the_doc(tmp_path: Path) -> None:
    """docs/cpu-backend.md's worked example: the command runs and prints what the page shows."""
    from tests.docs.mdblocks import DOCS, matches, samples

    shown = [s for s in samples(DOCS / "cpu-backend.md") if "--profile" in s.command]
    assert len(shown) == 1
    sample = shown[0]
    args = sample.command.split()[1:]  # after "glow"
    p = _glow(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert matches(sample.expected, p.stdout), "the page shows:\n" + "\n".join(sample.expected) + \
        f"\n--- the command printed:\n{p.stdout}"
    trace = json.loads((tmp_path / "sq.json").read_text())
    assert {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}


def test_idle_summary_adds_up() -> None:
    net = _compile(threads=2)
    net.run(X)
    run = net.executable.profile_run()
    idle = run.idle()
    assert len(idle) == 2
    for t, (busy, waiting, long_waits) in enumerate(idle):
        assert busy == pytest.approx(sum(e - s for s, e in (k.spans[t] for k in run.kernels)))
        assert waiting >= 0 and 0 <= long_waits <= len(run.kernels) - 1
        assert busy + waiting <= run.span + 1e-9


def test_profiled_variant_from_the_object_cache() -> None:
    """The profiled variant is its own cache entry, and a cache hit profiles like a fresh compile."""
    opts = {"profile": True, "cache": True, "parallel_threshold": 0}
    first = glow_core.compile(_model(), "cpu", threads=2, options=opts)
    plain = glow_core.compile(_model(), "cpu", threads=2, options={"cache": True, "parallel_threshold": 0})
    again = glow_core.compile(_model(), "cpu", threads=2, options=opts)
    assert again.executable.compile_timings["cached"] and not plain.executable.layout.profile
    again.run(X)
    run = again.executable.profile_run()
    assert [k.label for k in run.kernels] == ["+".join(i["name"] for i in d["instrs"])
                                              for d in first.executable.layout.profile]
    assert {i["origin"] for k in run.kernels for i in k.instrs} <= set(NODES)


def test_bench_profile_refuses_compare(tmp_path: Path) -> None:
    onnx.save(_model(), tmp_path / "m.onnx")
    p = _glow("bench", "m.onnx", "-b", "cpu", "--profile", "--compare", "onnxruntime", cwd=tmp_path)
    assert p.returncode != 0 and "--profile times glow's kernels only" in p.stderr


def test_bench_profile_of_a_staged_network_says_why(tmp_path: Path) -> None:
    """An If decided by an input runs in stages on the host: the cpu backend profiles only a network compiled
    into one function, and says so (the message used to claim cpu had no profiler)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])

    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x", "x"], ["r"])], op, [],
                                 [helper.make_tensor_value_info("r", TensorProto.FLOAT, [4])])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Add"), else_branch=branch("Mul"))
    onnx.save(helper.make_model(helper.make_graph([node], "staged", [x, c], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "if.onnx")
    p = _glow("bench", "if.onnx", "-b", "cpu", "--profile", "--runs", "1", cwd=tmp_path)
    assert p.returncode != 0
    assert "runs as a StagedExecutable" in p.stderr and "compiled into one function" in p.stderr, p.stderr
