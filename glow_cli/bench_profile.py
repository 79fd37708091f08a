"""``glow bench MODEL --profile``: where the time of one inference goes, kernel by kernel.

The backend compiles an instrumented variant (``options={"profile": True}``;
the normal variant holds no timing code) whose executable offers
``profile_run()``: per kernel (one or more fused LIR instructions, each with its
ONNX origin and FLOPs) and per share of the work (what worker thread ``p`` runs,
unless another thread took it), the start and end of the kernel in the last run.
Every timed run is profiled; the tables show the mean over the runs of each
kernel's busy time (itself the mean over the shares), sorted by time, with
GFLOP/s where the kernel does convolutions or matrix products, then the same
aggregated per ONNX node. The last run is written as a Chrome trace (trace-event
JSON: chrome://tracing or https://ui.perfetto.dev), one row per share, so load
imbalance and barrier waits show as gaps.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from glow_core import zoo
from glow_cli.common import load_model_ref, require_sizes
from glow_core.errors import GlowError


def fmt_time(seconds: float) -> str:
    """Microseconds below a millisecond, milliseconds above (kernels span both)."""
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def _row(rank: int, seconds: float, per_run: float, flops: int, name: str, kinds: str) -> str:
    pct = 100.0 * seconds / per_run if per_run > 0 else 0.0
    gf = f"{flops / seconds / 1e9:8.1f}" if flops and seconds > 0 else " " * 8
    return f"{rank:>4}  {fmt_time(seconds):>10}  {pct:5.1f}%  {gf}  {kinds:<22} {name}"


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def profile_model(model: str, backend: str, *, threads: int | None, warmup: int, runs: int, seed: int,
                  input_shapes: Mapping[str, tuple[int, ...]] | None, options: Mapping[str, Any],
                  trace: str | os.PathLike[str], top: int, random_weights: bool = False) -> list[str]:
    """Compile ``model`` instrumented, run it, and return the report's lines (writes ``trace``)."""
    from glow_core.api import compile as glow_compile

    proto, label = load_model_ref(model)
    if random_weights:
        if not zoo.is_zoo_ref(model):
            raise GlowError("--random-weights applies to zoo:NAME models only")
        proto = zoo.load_with_random_weights(model, seed=seed)
    require_sizes(proto, input_shapes, "glow bench times one shape with random inputs; give its sizes")
    net = glow_compile(proto, backend, input_shapes or None, threads=threads,
                       options={**dict(options), "profile": True})
    if not net.executable.profiles:
        if backend != "cpu":
            raise GlowError(f"backend '{backend}' has no per-kernel profiler; --profile works with the cpu backend")
        raise GlowError(f"this network runs as a {type(net.executable).__name__} (in stages around control flow "
                        "decided on the host, or in parts), which --profile cannot time kernel by kernel; it "
                        "profiles a network compiled into one function")
    feeds = zoo.random_feeds(net.input_types, seed, zoo.index_ranges(proto))  # (embedding indices in range)
    for _ in range(warmup):
        net.run(feeds)
    profiled, calls = [], []
    for _ in range(runs):  # back to back, as an unprofiled loop runs: the stamps are parsed afterwards
        t0 = time.perf_counter()
        net.run(feeds)
        calls.append(time.perf_counter() - t0)
        profiled.append(net.executable.profile_run())
    Path(trace).write_text(json.dumps(profiled[-1].chrome_trace(label)), encoding="utf-8")
    return _report(profiled, calls, label, backend, trace, top)


def _report(profiled: list[Any], calls: list[float], label: str, backend: str, trace: str | os.PathLike[str],
            top: int) -> list[str]:
    """The report's lines from every run's profile and the caller's time of each ``run``."""
    runs, last = len(profiled), profiled[-1]
    kernel_s: dict[int, float] = {}
    origin_s: dict[str, list[Any]] = {}
    for pr in profiled:
        for k in pr.kernels:
            kernel_s[k.index] = kernel_s.get(k.index, 0.0) + k.seconds
        for name, kinds, sec, flops in pr.by_origin():
            row = origin_s.setdefault(name, [kinds, 0.0, flops])
            row[1] += sec
    # the header's figures are medians over the runs (one run the OS preempted moves a mean a long way)
    per_run = float(np.median(calls))
    covered = float(np.median([pr.in_kernels for pr in profiled]))
    outside = max(per_run - covered, 0.0)
    kernels = sorted(last.kernels, key=lambda k: -kernel_s[k.index])
    head = f"{'rank':>4}  {'time':>10}  {'wall':>6}  {'GFLOP/s':>8}  {'kind':<22} "
    lines = [f"model        {label}",
             f"profile      {backend}, {last.threads} thread(s), median of {runs} run(s): {fmt_time(per_run)} per run, "
             f"{fmt_time(covered)} in {len(last.kernels)} kernels, {fmt_time(outside)} "
             f"({100.0 * outside / per_run if per_run > 0 else 0.0:.1f}%) outside them "
             "(call overhead, barrier waits, thread wake-up)",
             "", "kernels (LIR instructions; a fused chain is one kernel), slowest first:", head + "instructions"]
    for r, k in enumerate(kernels[:top], 1):
        lines.append(_row(r, kernel_s[k.index] / runs, per_run, k.flops, _short(k.label), _short(k.kind, 22)))
    origins = sorted(origin_s.items(), key=lambda kv: -kv[1][1])
    lines += ["", "ONNX nodes (a fused kernel's time shared equally by its instructions), slowest first:",
              head + "ONNX node"]
    for r, (name, (kinds, sec, flops)) in enumerate(origins[:top], 1):
        lines.append(_row(r, sec / runs, per_run, flops, _short(name), _short(kinds, 22)))
    lines += ["", "threads in the last run (gaps between a thread's kernels are barrier waits):"]
    for t, (busy_t, gap_t, long_n) in enumerate(last.idle()):
        lines.append(f"  worker {t}: busy {fmt_time(busy_t)}, waiting {fmt_time(gap_t)} "
                     f"({long_n} wait(s) over 1 ms)")
    lines += ["", f"trace        {trace} (chrome://tracing or ui.perfetto.dev; one row per worker thread)"]
    return lines


__all__ = ["profile_model"]
