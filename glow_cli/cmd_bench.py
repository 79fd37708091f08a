"""``glow bench MODEL --backend NAME``: latency and throughput, optionally side by side with onnxruntime.

Compiles the model once (the compile time is reported), runs it ``--warmup``
times untimed, then ``--runs`` times timed, and prints the median / min / max
latency and the effective GFLOP/s (2 x the multiply-accumulates of every
Conv / MatMul / Gemm node of the compiled graph, fused kinds included, per
median run). With ``--compare onnxruntime`` the same inputs run through an
onnxruntime session with the same thread count in the same process, and the
latency ratio glow / onnxruntime is printed (below 1: glow is faster).
onnxruntime is a bench extra (``pip install glow-compiler[bench]``), never a run-time
dependency. :func:`benchmark` is the same as a function (``scripts/bench_light_models.py``).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from glow_core import zoo
from glow_cli.common import (
    Command,
    add_model_argument,
    add_precision_argument,
    add_shape_argument,
    fmt_ms,
    load_model_ref,
    model_inputs,
    note,
    positive_int,
    require_sizes,
    shapes_from_args,
)
from glow_cli.quantize_args import add_quantize_arguments, quantize_from_args
from glow_core.errors import GlowError
from glow_core.ir.graph import Function, Node


@dataclass
class Timing:
    """Latencies of repeated runs (seconds)."""

    runs: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else math.nan

    @property
    def min(self) -> float:
        return min(self.runs) if self.runs else math.nan

    @property
    def max(self) -> float:
        return max(self.runs) if self.runs else math.nan


@dataclass
class BenchResult:
    model: str
    backend: str
    threads: int
    flops: int
    compile_s: float
    glow: Timing
    cached: bool | None = None
    reference: str | None = None
    ref: Timing | None = None
    #: largest |glow - reference| over the outputs (same inputs)
    max_abs_diff: float | None = None

    def gflops(self, t: Timing | None = None) -> float:
        t = t or self.glow
        return self.flops / t.median / 1e9 if self.flops and t.median > 0 else math.nan

    @property
    def ratio(self) -> float | None:
        return self.glow.median / self.ref.median if self.ref is not None and self.ref.median > 0 else None


# -- FLOPs --------------------------------------------------------------------------------------

def _conv_flops(n: Node) -> int:
    w = n.inputs[1]
    out = n.outputs[0].type.shape
    if w is None:
        return 0
    # per output element: C/group x kernel MACs
    return 2 * math.prod(out) * math.prod(w.type.shape[1:])


def _matmul_flops(n: Node) -> int:
    a, b = n.inputs[0], n.inputs[1]
    if a is None or b is None:
        return 0
    k = a.type.shape[-1]
    return 2 * math.prod(n.outputs[0].type.shape) * k


def _gemm_flops(n: Node) -> int:
    a = n.inputs[0]
    if a is None:
        return 0
    k = a.type.shape[0] if n.attrs.get("trans_a") else a.type.shape[-1]
    return 2 * math.prod(n.outputs[0].type.shape) * k


def _attention_flops(n: Node) -> int:
    q, kt, v = (n.inputs[i] for i in range(3))
    if q is None or kt is None or v is None:
        return 0
    return 2 * math.prod(q.type.shape[:-1]) * kt.type.shape[-1] * (q.type.shape[-1] + v.type.shape[-1])


#: node kind -> FLOPs of one node (2 x multiply-accumulates)
FLOP_COUNTERS: Mapping[str, Callable[[Node], int]] = {
    "Conv": _conv_flops, "FusedConv": _conv_flops, "MatMul": _matmul_flops, "FusedMatMul": _matmul_flops,
    "Gemm": _gemm_flops, "FusedAttention": _attention_flops,
}


def count_flops(fn: Function) -> int:
    """2 x the multiply-accumulates of the Conv / MatMul / Gemm / attention nodes (fused kinds included) of ``fn``."""
    return sum(FLOP_COUNTERS[n.kind.name](n) for n in fn.nodes if n.kind.name in FLOP_COUNTERS)


# -- running ------------------------------------------------------------------------------------

def _time(fn: Callable[[], Any], warmup: int, runs: int) -> Timing:
    gc.collect()  # garbage of earlier work (graphs hold their weights in cycles) must not be freed mid-run
    for _ in range(warmup):
        fn()
    t = Timing()
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.runs.append(time.perf_counter() - t0)
    return t


def _onnxruntime_session(proto: onnx.ModelProto, threads: int) -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise GlowError("--compare onnxruntime needs the onnxruntime package",
                        hint="pip install onnxruntime (or glow-compiler[bench])") from None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def benchmark(model: str, backend: str, *, threads: int | None = None, compare: str | None = None,
              warmup: int = 3, runs: int = 10, seed: int = 0, random_weights: bool = False,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None,
              options: Mapping[str, Any] | None = None, quantize: Any = None) -> BenchResult:
    """Compile ``model`` for ``backend`` and time it (and onnxruntime with ``compare='onnxruntime'``)."""
    from glow_core.api import compile as glow_compile

    if compare not in (None, "onnxruntime"):
        raise GlowError(f"--compare {compare!r}: only 'onnxruntime' can be compared with")
    proto, label = load_model_ref(model)
    if random_weights:
        if not zoo.is_zoo_ref(model):
            raise GlowError("--random-weights applies to zoo:NAME models only")
        proto = zoo.load_with_random_weights(model, seed=seed)
    require_sizes(proto, input_shapes, "glow bench times one shape with random inputs; give its sizes")
    t0 = time.perf_counter()
    net = glow_compile(proto, backend, input_shapes or None, threads=threads,
                       options=dict(options or {}), quantize=quantize)
    compile_s = time.perf_counter() - t0
    used = int(net.executable.threads or threads or len(os.sched_getaffinity(0)))
    feeds = zoo.random_feeds(net.input_types, seed, zoo.index_ranges(proto))  # (embedding indices in range)
    glow_t = _time(lambda: net.run(feeds), warmup, runs)
    timings = net.executable.compile_timings
    res = BenchResult(label, backend, used, count_flops(net.function), compile_s, glow_t,
                      cached=bool(timings.get("cached")) if isinstance(timings, dict) else None)
    if compare == "onnxruntime":
        sess = _onnxruntime_session(proto, used)
        real = {vi.name for vi in model_inputs(proto)}
        ort_feeds = {k: v for k, v in feeds.items() if k in real}
        res.reference = "onnxruntime"
        res.ref = _time(lambda: sess.run(None, ort_feeds), warmup, runs)
        got = net.run(feeds)
        want = sess.run(None, ort_feeds)
        diffs = [float(np.max(np.abs(got[n].astype(np.float64) - w.astype(np.float64)))) if w.size else 0.0
                 for n, w in zip(net.output_names, want)]
        res.max_abs_diff = max(diffs, default=0.0)
    return res


def format_result(r: BenchResult) -> list[str]:
    def row(name: str, t: Timing) -> str:
        gf = r.gflops(t)
        gfs = f"  {gf:8.1f} GFLOP/s" if not math.isnan(gf) else ""
        return f"{name:<12} median {fmt_ms(t.median):>10}  min {fmt_ms(t.min):>10}  max {fmt_ms(t.max):>10}{gfs}"

    cached = "" if r.cached is None else (" (object cache hit)" if r.cached else " (cold)")
    lines = [f"model        {r.model}",
             f"backend      {r.backend}, {r.threads} thread(s); {len(r.glow.runs)} timed runs",
             f"work         {r.flops / 1e9:.3f} GFLOP per run (2 x MACs of Conv/MatMul/Gemm)",
             f"compile      {fmt_ms(r.compile_s)}{cached}",
             row("glow", r.glow)]
    if r.ref is not None and r.reference:
        lines.append(row(r.reference, r.ref))
        lines.append(f"ratio        {r.ratio:.3f} x {r.reference} latency (median; below 1: glow is faster)")
        lines.append(f"agreement    max |glow - {r.reference}| = {r.max_abs_diff:.3g}")
    return lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    p.add_argument("-b", "--backend", required=True, metavar="NAME", help="the backend to benchmark")
    p.add_argument("--threads", metavar="N", type=positive_int, default=None,
                   help="threads for glow and for the comparison (default: the backend's choice, all cores)")
    p.add_argument("--compare", metavar="RUNTIME", choices=["onnxruntime"], default=None,
                   help="also time onnxruntime on the same inputs with the same thread count")
    p.add_argument("--warmup", metavar="W", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--runs", metavar="R", type=positive_int, default=10, help="timed runs (default 10)")
    p.add_argument("--seed", metavar="S", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--random-weights", action="store_true", help="zoo models: seeded random weights")
    p.add_argument("--no-cache", action="store_true", help="compile without the backend's object cache (cold)")
    add_precision_argument(p)
    p.add_argument("--profile", action="store_true",
                   help="compile an instrumented variant and print the time of every kernel (LIR instructions) and "
                        "of every ONNX node, slowest first, and write a Chrome trace of the last run")
    p.add_argument("--trace", metavar="FILE", default="glow-trace.json",
                   help="with --profile: where the trace-event JSON goes (default glow-trace.json)")
    p.add_argument("--top", metavar="N", type=positive_int, default=15,
                   help="with --profile: rows of each table (default 15)")
    add_shape_argument(p)
    add_quantize_arguments(p)


def run(args: argparse.Namespace) -> int:
    from glow_core.plugin_host import get_backend

    get_backend(args.backend)
    if args.warmup < 0:
        raise GlowError(f"--warmup must be at least 0, got {args.warmup}")
    if args.compare and args.threads is None:
        note("comparing with the backend's default thread count for both runtimes")
    if args.profile:
        from glow_cli.bench_profile import profile_model

        if args.compare:
            raise GlowError("--profile times glow's kernels only; run --compare without --profile")
        if args.quantize is not None:
            raise GlowError("--profile does not combine with --quantize yet", hint="time the int8 network without --profile")

        opts: dict[str, Any] = {"cache": False} if args.no_cache else {}
        opts.update({"precision": args.precision} if args.precision else {})
        for line in profile_model(args.model, args.backend, threads=args.threads, warmup=args.warmup,
                                  runs=args.runs, seed=args.seed, input_shapes=shapes_from_args(args.input_shape),
                                  options=opts, trace=args.trace, top=args.top,
                                  random_weights=args.random_weights):
            print(line)
        return 0
    r = benchmark(args.model, args.backend, threads=args.threads, compare=args.compare, warmup=args.warmup,
                  runs=args.runs, seed=args.seed, random_weights=args.random_weights,
                  input_shapes=shapes_from_args(args.input_shape),
                  options={**({"cache": False} if args.no_cache else {}),
                           **({"precision": args.precision} if args.precision else {})},
                  quantize=quantize_from_args(args))
    for line in format_result(r):
        print(line)
    return 0


COMMAND = Command(
    name="bench",
    help="time a compiled model (median/min/max, GFLOP/s), optionally against onnxruntime",
    description=__doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else "",
    epilog="examples:\n  glow bench zoo:resnet50 --backend cpu --threads 2 --compare onnxruntime\n"
           "  glow bench zoo:squeezenet --backend cpu --threads 2 --profile --trace squeezenet.json\n"
           "  glow bench model.onnx -b cpu --warmup 5 --runs 50",
    add_arguments=add_arguments,
    run=run,
)
