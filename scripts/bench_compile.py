#!/usr/bin/env python3
"""Compile time of one model, cold and cached, each in fresh processes, with the time of every phase.

    python scripts/bench_compile.py [--model zoo:resnet50] [--backend cpu] [--runs 3] [--json]

Each run starts a new Python process that imports glow, loads the backend plugin, then compiles the
model twice: into an empty cache (cold), then again served by that cache (cached); then one more new
process compiles it once on the same cache (cached, fresh process: what a second program pays, glow's
own import aside). Each process reports, per compile, the wall time of ``glow_core.compile`` and its phases:

    import      ONNX load + import into the graph IR (``CompileStats.import_s``); on a program-cache hit
                (docs/cpu-backend.md, "Cache levels") the whole compile: hashing the model file, loading
    optimize    graph passes other than ``lower`` (``CompileStats.pass_s``)
    lowering    the ``lower`` pass
    key         the backend's object-cache key (hash of the prepared function) and lookup
    lir         LIR generation + memory plan (cache miss only)
    irgen       LLVM IR generation from the LIR (cache miss only)
    parse / llvm-opt / codegen   LLVM: parse + verify, the optimization pipeline, object emission (a parallel
                compile: this process's part)
    wait        a parallel compile: waiting for the worker processes' parts (docs/cpu-backend.md)
    load        loading the object code into the JIT and building the executable

and, once per process, ``python-import`` (``import glow_core.api``) and ``plugin`` (loading the
backend). The table gives the median over the runs; the load average is printed with it (timings on
a busy machine are only comparable side by side). Bytecode is written (``PYTHONDONTWRITEBYTECODE`` is
cleared for the children, and one untimed warm-up process runs first), as in an installed glow.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PHASES = ("import", "optimize", "lowering", "key", "lir", "irgen", "parse", "llvm-opt", "codegen", "wait", "load")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import glow_core.api as api
from glow_core.plugin_host import get_backend
t1 = time.perf_counter()
get_backend(sys.argv[2])
t2 = time.perf_counter()
out = {"python-import": t1 - t0, "plugin": t2 - t1}
for label in sys.argv[3].split(","):
    s = time.perf_counter()
    net = api.compile(sys.argv[1], backend=sys.argv[2])
    total = time.perf_counter() - s
    st = net.stats
    be = dict(getattr(st, "backend_s", None) or getattr(net.executable, "compile_timings", None) or {})
    lower = getattr(st, "pass_s", {}).get("lower", 0.0)  # (older glow: no per-pass figures)
    out[label] = {
        "total": total, "import": st.import_s, "optimize": st.optimize_s - lower, "lowering": lower,
        "key": be.get("key", 0.0), "lir": be.get("lir", 0.0), "irgen": be.get("irgen", 0.0),
        "parse": be.get("parse", 0.0), "llvm-opt": be.get("optimize", 0.0), "codegen": be.get("codegen", 0.0),
        "wait": be.get("wait", 0.0), "load": be.get("load", 0.0), "hit": bool(be.get("cached", False)),
        "program": bool(be.get("program", False)),
    }
print("RESULT " + json.dumps(out))
"""


def _child(model: str, backend: str, python: str, env: dict[str, str], labels: str) -> dict:
    proc = subprocess.run([python, "-c", CHILD, model, backend, labels], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the compile process failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_child(model: str, backend: str, python: str) -> dict:
    """Cold and cached in one process, then cached once more in a fresh process (``fresh``) on the same cache."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="glow-ctime-") as cache:
        env["GLOW_CACHE_DIR"] = cache  # empty: the first compile is cold
        out = _child(model, backend, python, env, "cold,cached")
        fresh = _child(model, backend, python, env, "fresh")
    out["fresh"] = fresh["fresh"]
    out["fresh-python-import"] = fresh["python-import"] + fresh["plugin"]
    return out


def table(results: list[dict]) -> str:
    def med(label: str, key: str) -> float:
        return statistics.median(r[label][key] for r in results)

    labels = ("cold", "cached", "fresh")
    rows = ["| phase | cold s | cached s | cached, fresh process s |", "|---|---:|---:|---:|"]
    for p in PHASES:
        rows.append(f"| {p} | " + " | ".join(f"{med(lb, p):.3f}" for lb in labels) + " |")
    rows.append("| **compile total** | " + " | ".join(f"**{med(lb, 'total'):.3f}**" for lb in labels) + " |")
    py = statistics.median(r["python-import"] for r in results)
    plug = statistics.median(r["plugin"] for r in results)
    hits = sum(r["cached"]["hit"] for r in results)
    programs = sum(r["fresh"]["program"] for r in results)
    rows.append("")
    rows.append(f"once per process: python-import {py:.3f} s, plugin {plug:.3f} s; "
                f"cache hits on the second compile: {hits}/{len(results)}; "
                f"program-cache hits in the fresh process: {programs}/{len(results)}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="zoo:resnet50")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes (the median is reported)")
    ap.add_argument("--json", action="store_true", help="print every run's raw figures as JSON too")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    run_child(args.model, args.backend, sys.executable)  # warm-up: writes bytecode, untimed
    results = []
    for _ in range(args.runs):
        results.append(run_child(args.model, args.backend, sys.executable))
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"] * 3
    print(f"{args.model} on {args.backend}, {args.runs} fresh processes (median); load average {' '.join(load)}")
    print(table(results))
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
