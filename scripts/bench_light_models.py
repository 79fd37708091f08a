#!/usr/bin/env python3
"""Benchmark the 9 light zoo models on a backend against onnxruntime and write a Markdown table.

    python scripts/bench_light_models.py [--backend cpu] [--threads 2] [--runs 20] [--out bench.md]

For each model (seeded random weights, random inputs): a cold compile into an empty object cache, a
second compile served by the cache, then ``glow bench``'s measurement (``glow_cli.cmd_bench.benchmark``):
warm-up runs, timed runs of glow and of onnxruntime on the same inputs with the same thread count, in
this process. The table gives the median latencies, their ratio (glow / onnxruntime: below 1, glow is
faster), glow's effective GFLOP/s and both compile times; below it, the geometric mean of the ratios
and the speedup of one model from 1 thread to N threads.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
    ap.add_argument("--scaling-model", default="resnet50", help="model timed with 1 thread too ('' to skip)")
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = ap.parse_args(argv)

    cache_dir = tempfile.mkdtemp(prefix="glow-bench-cache-")
    os.environ["GLOW_CACHE_DIR"] = cache_dir  # cold compiles really are cold
    from glow_core.api import compile as glow_compile
    from glow_cli.cmd_bench import benchmark

    # thread scaling first, before any onnxruntime session exists in this process (their
    # intra-op threads keep spinning after each run and would steal the cores being measured)
    scaling = ""
    if args.scaling_model:
        ref = f"zoo:{args.scaling_model}"
        one = benchmark(ref, args.backend, threads=1, warmup=args.warmup, runs=args.runs, random_weights=True)
        many = benchmark(ref, args.backend, threads=args.threads, warmup=args.warmup, runs=args.runs,
                         random_weights=True)
        scaling = (f"{args.scaling_model}: {one.glow.median * 1e3:.2f} ms with 1 thread, "
                   f"{many.glow.median * 1e3:.2f} ms with {args.threads}: "
                   f"speedup **{one.glow.median / many.glow.median:.2f} x**.")
        shutil.rmtree(cache_dir, ignore_errors=True)  # the table's cold compiles must miss the cache
        os.makedirs(cache_dir, exist_ok=True)
    rows = []
    ratios = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        ref = f"zoo:{name}"
        from glow_core import zoo

        proto = zoo.load_with_random_weights(ref, seed=0)
        t0 = time.perf_counter()
        glow_compile(proto, args.backend, threads=args.threads)
        cold = time.perf_counter() - t0
        r = benchmark(ref, args.backend, threads=args.threads, compare="onnxruntime", warmup=args.warmup,
                      runs=args.runs, random_weights=True)
        cached = r.compile_s
        ratio = r.ratio or math.nan
        ratios.append(ratio)
        rows.append((name, r.glow.median * 1e3, r.ref.median * 1e3 if r.ref else math.nan, ratio, r.gflops(),
                     cold, cached, r.max_abs_diff))
        print(f"{name:14s} glow {r.glow.median * 1e3:8.2f} ms  onnxruntime {rows[-1][2]:8.2f} ms  ratio {ratio:.3f}  "
              f"{r.gflops():7.1f} GFLOP/s  compile {cold:.2f} s cold, {cached:.2f} s cached", file=sys.stderr)

    head = (f"Backend `{args.backend}`, {args.threads} threads, batch 1, median of {args.runs} runs after "
            f"{args.warmup} warm-up runs; onnxruntime with the same threads and inputs, in the same process.")
    lines = [head, "",
             "| model | glow ms | onnxruntime ms | ratio | GFLOP/s | compile s (cold) | compile s (cached) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, g, o, ratio, gf, cold, cached, _ in rows:
        gfs = f"{gf:.1f}" if not math.isnan(gf) else "-"
        lines.append(f"| {name} | {g:.2f} | {o:.2f} | {ratio:.3f} | {gfs} | {cold:.2f} | {cached:.2f} |")
    good = [x for x in ratios if not math.isnan(x) and x > 0]
    if good:
        gm = math.exp(sum(math.log(x) for x in good) / len(good))
        lines += ["", f"Geometric mean of the ratios: **{gm:.3f}** (over {len(good)} models)."]
    if scaling:
        lines += ["", scaling]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
