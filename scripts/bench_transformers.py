#!/usr/bin/env python3
"""Transformers at changing shapes: BERT-base over a sequence sweep, GPT-2 small generating with a KV cache,
ViT-B/16, on glow (cpu), onnxruntime and OpenVINO.

    python scripts/bench_transformers.py [--threads 2] [--engines glow,onnxruntime,openvino]
        [--tasks bert-sweep,gpt2-generate,gpt2-prefill,gpt2-decode512,vit] [--lengths 16,32,64,128,256,384]
        [--prompt 32] [--new-tokens 64] [--prefill 128] [--cache DIR] [--tiny] [--out table.md]

The graphs are written with onnx.helper with seeded random weights (``transformer_graphs.py``: the shapes
and operators of the ``transformers`` exports, symbolic ``batch`` / ``sequence`` / ``past_sequence``), saved
under ``--cache`` (default ``~/.cache/glow-bench/transformers``; nothing is committed). Each task runs on
each engine alone in a fresh process (``--worker``), at the engine's defaults but the thread count
(OpenVINO: its latency hint, its CPU plugin's default; ``glow-bf16``, not a default engine, is glow with
``precision="bf16"``; ``openvino-f32``, not a default either, is OpenVINO with ``INFERENCE_PRECISION_HINT`` f32,
float32 on a CPU where its default is bfloat16), and reports:

- ``bert-sweep``: for each length in order, in one process: the first run's time (what a new length costs,
  a compile included) and the median of ``--runs`` later runs; resident memory after the first length and
  after the sweep, and the peak;
- ``gpt2-generate``: a ``--prompt``-token prompt and ``--new-tokens`` greedy tokens at batch 1 (prefill,
  then one decode step per token with the growing cache): tokens per second over the whole loop, the number
  of compiles glow made, peak resident memory;
- ``gpt2-prefill``: GPT-2 reading a ``--prefill``-token prompt (128 by default) with an empty cache, batch 1: the
  first run and the median;
- ``gpt2-decode512``: the median decode step with 512 cached positions, and the rate at which it reads the
  weights, beside a streaming copy's rate on this machine (numpy, in the same process);
- ``vit``: ViT-B/16 at batch 1, the first run and the median.

``--tiny`` uses toy sizes (for the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import transformer_graphs as tg  # noqa: E402

ENGINES = ("glow", "onnxruntime", "openvino")
TASKS = ("bert-sweep", "gpt2-generate", "gpt2-prefill", "gpt2-decode512", "vit")
Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


# -- engines: a session that takes any shape ----------------------------------------------------------

def _glow(path: Path, threads: int, precision: str | None = None) -> tuple[Run, Callable[[], int | None]]:
    import glow_core

    net = glow_core.compile(str(path), "cpu", threads=threads, precision=precision)
    compiles = (lambda: net.specializations_compiled) if hasattr(net, "specializations_compiled") else (lambda: 1)

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return net.run(feeds)

    run.precompile = getattr(net, "precompile", None)  # type: ignore[attr-defined]  (--precompile)
    return run, compiles


def _ort(path: Path, threads: int) -> tuple[Run, Callable[[], int | None]]:
    import onnxruntime as ort

    so = ort.SessionOptions()  # its defaults but the thread count
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return (lambda feeds: dict(zip(names, sess.run(None, feeds)))), (lambda: None)


def _openvino(path: Path, threads: int, precision: str | None = None) -> tuple[Run, Callable[[], int | None]]:
    import openvino as ov

    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    req = compiled.create_infer_request()
    names = [o.get_any_name() for o in compiled.outputs]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        res = req.infer(feeds)
        return {n: np.asarray(res[o]) for n, o in zip(names, compiled.outputs)}
    return run, (lambda: None)


def _glow_bf16(path: Path, threads: int) -> tuple[Run, Callable[[], int | None]]:
    """glow with ``precision="bf16"`` (an opt-in that changes answers: not a default engine; ``--engines``)."""
    return _glow(path, threads, "bf16")


def _openvino_f32(path: Path, threads: int) -> tuple[Run, Callable[[], int | None]]:
    """OpenVINO with ``INFERENCE_PRECISION_HINT`` f32 (float32 beside glow's float32, on a CPU where its default
    is bfloat16: not a default engine; ``--engines``)."""
    return _openvino(path, threads, "f32")


OPEN: Mapping[str, Callable[[Path, int], tuple[Run, Callable[[], int | None]]]] = {
    "glow": _glow, "glow-bf16": _glow_bf16, "onnxruntime": _ort, "openvino": _openvino,
    "openvino-f32": _openvino_f32}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    """The process's peak resident memory (VmHWM: reset by exec; getrusage's ru_maxrss would carry the peak of
    the parent that started the worker across the exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median_ms(run: Run, feeds: dict[str, np.ndarray], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


# -- feeds --------------------------------------------------------------------------------------------

def bert_feeds(length: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed + length).integers(1000 % vocab, vocab, (1, length))
    return {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((1, length), np.int64),
            "token_type_ids": np.zeros((1, length), np.int64)}


def gpt2_feeds(ids: np.ndarray, past: list[np.ndarray], c: tg.Config) -> dict[str, np.ndarray]:
    have = past[0].shape[2]
    total = have + ids.shape[1]
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((1, total), np.int64),
             "position_ids": np.arange(have, total, dtype=np.int64)[None]}
    for i in range(c.layers):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = past[2 * i], past[2 * i + 1]
    return feeds


def empty_past(c: tg.Config, length: int = 0, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (1, c.heads, length, c.hidden // c.heads)
    return [rng.standard_normal(shape).astype(np.float32) * 0.5 for _ in range(2 * c.layers)]


# -- tasks (run in a worker) ----------------------------------------------------------------------------

def task_bert_sweep(run: Run, compiles: Callable[[], int | None], a: argparse.Namespace, c: tg.Config) -> dict:
    rows, first_rss = [], None
    for length in a.lengths:
        feeds = bert_feeds(length, c.vocab)
        t = time.perf_counter()
        run(feeds)
        first = (time.perf_counter() - t) * 1e3
        steady = _median_ms(run, feeds, a.runs)
        rows.append({"length": length, "first_ms": first, "steady_ms": steady})
        first_rss = rss_mb() if first_rss is None else first_rss
    return {"rows": rows, "rss_first_mb": first_rss, "rss_end_mb": rss_mb(), "peak_mb": peak_mb(),
            "compiles": compiles()}


def task_gpt2_generate(run: Run, compiles: Callable[[], int | None], a: argparse.Namespace, c: tg.Config) -> dict:
    ids = np.random.default_rng(1).integers(0, c.vocab, (1, a.prompt))
    past, made = empty_past(c), []
    pre, precompile_s = getattr(run, "precompile", None) if a.precompile else None, None
    if pre is not None:  # the prefill and decode networks compiled before the loop (DynamicNetwork.precompile)
        t = time.perf_counter()
        pre({n: v.shape for n, v in gpt2_feeds(ids, past, c).items()})
        pre({n: v.shape for n, v in gpt2_feeds(ids[:, :1], empty_past(c, a.prompt), c).items()})
        precompile_s = time.perf_counter() - t
    t = time.perf_counter()
    for step in range(a.new_tokens + 1):
        out = run(gpt2_feeds(ids, past, c))
        past = [out[f"present.{i}.{kv}"] for i in range(c.layers) for kv in ("key", "value")]
        ids = np.array([[int(np.argmax(out["logits"][0, -1]))]])
        if step:
            made.append(int(ids[0, 0]))
    total = time.perf_counter() - t
    return {"tokens_per_s": a.new_tokens / total, "seconds": total, "compiles": compiles(), "peak_mb": peak_mb(),
            "tokens": made[:8], "precompile_s": precompile_s}


def streaming_copy_gbs(nbytes: int = 512 << 20) -> float:
    """Bytes read per second by a large numpy copy (the read side of a streaming copy)."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return nbytes / best / 1e9


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def task_gpt2_decode512(run: Run, compiles: Callable[[], int | None], a: argparse.Namespace, c: tg.Config) -> dict:
    feeds = gpt2_feeds(np.array([[7]]), empty_past(c, a.past), c)
    run(feeds)
    ms = _median_ms(run, feeds, a.runs)
    weight_bytes = 4 * (c.layers * (12 * c.hidden * c.hidden + 4 * c.hidden) + c.vocab * c.hidden)
    peak = peak_mb()  # (before the copy's own buffers)
    return {"step_ms": ms, "weights_gbs": weight_bytes / (ms / 1e3) / 1e9, "copy_gbs": streaming_copy_gbs(),
            "peak_mb": peak}


def _first_and_steady(run: Run, feeds: dict[str, np.ndarray], runs: int) -> dict:
    """The first run's milliseconds (a compile included), the median of ``runs`` later ones, the peak memory."""
    t = time.perf_counter()
    run(feeds)
    first = (time.perf_counter() - t) * 1e3
    return {"first_ms": first, "steady_ms": _median_ms(run, feeds, runs), "peak_mb": peak_mb()}


def task_gpt2_prefill(run: Run, compiles: Callable[[], int | None], a: argparse.Namespace, c: tg.Config) -> dict:
    ids = np.random.default_rng(3).integers(0, c.vocab, (1, a.prefill))
    return _first_and_steady(run, gpt2_feeds(ids, empty_past(c), c), a.runs)


def task_vit(run: Run, compiles: Callable[[], int | None], a: argparse.Namespace, c: tg.Config) -> dict:
    size = 32 if a.tiny else 224
    feeds = {"pixel_values": np.random.default_rng(2).standard_normal((1, 3, size, size)).astype(np.float32)}
    return _first_and_steady(run, feeds, a.runs)


TASK_RUNS = {"bert-sweep": task_bert_sweep, "gpt2-generate": task_gpt2_generate, "gpt2-prefill": task_gpt2_prefill,
             "gpt2-decode512": task_gpt2_decode512, "vit": task_vit}


def configs(tiny: bool) -> dict[str, tg.Config]:
    if tiny:
        return {"bert": tg.Config.tiny(), "gpt2": tg.Config(2, 32, 4, 64, 100, 1024), "vit": tg.Config.tiny()}
    return {"bert": tg.Config(), "gpt2": tg.Config(vocab=50257, positions=1024), "vit": tg.Config()}


def model_path(task: str, cache: Path, tiny: bool) -> Path:
    """Build (once) and return the model a task runs."""
    name = task.split("-")[0]
    path = cache / f"{name}{'-tiny' if tiny else ''}.onnx"
    if not path.is_file():
        c = configs(tiny)[name]
        model = {"bert": lambda: tg.bert(c), "gpt2": lambda: tg.gpt2(c),
                 "vit": lambda: tg.vit(c, image=32, patch=8, classes=10) if tiny else tg.vit(c)}[name]()
        tg.save(model, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
    return path


def worker(task: str, engine: str, path: Path, a: argparse.Namespace) -> int:
    try:
        t = time.perf_counter()
        run, compiles = OPEN[engine](path, a.threads)
        opened = time.perf_counter() - t
        result = TASK_RUNS[task](run, compiles, a, configs(a.tiny)[task.split("-")[0]])
        result["open_s"] = opened  # loading the model (onnxruntime and OpenVINO compile it here; glow at a run)
    except Exception as e:  # noqa: BLE001  (any failure of any engine is reported in the table)
        result = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    print(json.dumps(result), flush=True)
    return 0


def run_worker(task: str, engine: str, path: Path, a: argparse.Namespace, timeout: float) -> dict[str, Any]:
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", task, engine, str(path),
            "--threads", str(a.threads), "--runs", str(a.runs), "--lengths", ",".join(map(str, a.lengths)),
            "--prompt", str(a.prompt), "--new-tokens", str(a.new_tokens), "--past", str(a.past),
            "--prefill", str(a.prefill)] + (
        ["--tiny"] if a.tiny else []) + (["--precompile"] if a.precompile else [])
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": f"worker exited with code {done.returncode}: {' '.join(done.stderr.split())[-300:]}"}
    return json.loads(lines[-1])


# -- tables ---------------------------------------------------------------------------------------------

def _f(x: Any, spec: str = ".1f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def _ratio(a: Any, b: Any) -> str:
    return f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def table_sweep(res: Mapping[str, dict], engines: Sequence[str]) -> list[str]:
    peers = [p for p in ("onnxruntime", "openvino", "openvino-f32") if p in engines]
    lines = ["| length | " + " | ".join(f"{e} first ms | {e} steady ms" for e in engines)
             + "".join(f" | glow/{p}" for p in peers) + " |",
             "|---:|" + "---:|" * (2 * len(engines) + len(peers))]
    lengths = [r["length"] for r in next((v["rows"] for v in res.values() if "rows" in v), [])]
    for i, n in enumerate(lengths):
        cells = []
        steady = {}
        for e in engines:
            row = res.get(e, {}).get("rows", [None] * len(lengths))[i] or {}
            steady[e] = row.get("steady_ms")
            cells += [_f(row.get("first_ms")), _f(row.get("steady_ms"))]
        lines.append(f"| {n} | " + " | ".join(cells) + "".join(f" | {_ratio(steady.get('glow'), steady.get(p))}"
                                                             for p in peers) + " |")
    lines += ["", "| engine | load s | RSS after the first length MB | after the sweep MB | peak MB | compiles |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {e} | {_f(r.get('open_s'), '.2f')} | {_f(r.get('rss_first_mb'), '.0f')} | "
              f"{_f(r.get('rss_end_mb'), '.0f')} | {_f(r.get('peak_mb'), '.0f')} | "
              f"{r.get('compiles') if r.get('compiles') is not None else '-'} |" for e, r in res.items() if "rows" in r]
    return lines


def table_rows(res: Mapping[str, dict], columns: Sequence[tuple[str, str, str]]) -> list[str]:
    lines = ["| engine | " + " | ".join(h for h, _, _ in columns) + " |", "|---|" + "---:|" * len(columns)]
    for e, r in res.items():
        if "error" not in r:
            lines.append(f"| {e} | " + " | ".join(_f(r.get(k), spec) if k != "compiles" else
                                                   str(r.get(k) if r.get(k) is not None else "-")
                                                   for _, k, spec in columns) + " |")
    return lines


COLUMNS = {
    "gpt2-generate": [("load s", "open_s", ".2f"), ("precompile s", "precompile_s", ".1f"),
                      ("tokens/s", "tokens_per_s", ".2f"), ("loop s", "seconds", ".1f"), ("compiles", "compiles", ""),
                      ("peak MB", "peak_mb", ".0f")],
    "gpt2-decode512": [("step ms", "step_ms", ".1f"), ("weights read GB/s", "weights_gbs", ".1f"),
                       ("streaming copy GB/s", "copy_gbs", ".1f"), ("peak MB", "peak_mb", ".0f")],
    "vit": [("load s", "open_s", ".2f"), ("first ms", "first_ms", ".1f"), ("steady ms", "steady_ms", ".1f"), ("peak MB", "peak_mb", ".0f")],
}
COLUMNS["gpt2-prefill"] = COLUMNS["vit"]


def report(results: Mapping[str, Mapping[str, dict]], engines: Sequence[str], note: str) -> list[str]:
    lines: list[str] = []
    for task, res in results.items():
        lines += [f"### {task}", ""]
        lines += table_sweep(res, engines) if task == "bert-sweep" else table_rows(res, COLUMNS[task])
        failed = [f"- {e}: {r['error']}" for e, r in res.items() if "error" in r]
        lines += (["", "not run:"] + failed if failed else []) + [""]
    return lines + [note]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=3, metavar=("TASK", "ENGINE", "MODEL"), help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per shape (median)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[16, 32, 64, 128, 256, 384])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--past", type=int, default=512, help="cached positions of gpt2-decode512")
    ap.add_argument("--prefill", type=int, default=128, help="prompt tokens of gpt2-prefill")
    ap.add_argument("--precompile", action="store_true",
                    help="gpt2-generate: glow compiles the prefill and decode networks before the loop (precompile s)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds a task may take on one engine")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "glow-bench" / "transformers")
    ap.add_argument("--tiny", action="store_true", help="toy model sizes (tests)")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker[0], a.worker[1], Path(a.worker[2]), a)
    engines = [e for e in a.engines.split(",") if e]
    tasks = [t for t in a.tasks.split(",") if t]
    bad = [e for e in engines if e not in OPEN] + [t for t in tasks if t not in TASK_RUNS]
    if bad:
        ap.error(f"unknown engine(s) or task(s) {bad}; engines: {', '.join(OPEN)}; tasks: {', '.join(TASK_RUNS)}")
    results: dict[str, dict[str, dict]] = {}
    for task in tasks:
        path = model_path(task, a.cache, a.tiny)
        results[task] = {}
        for e in engines:
            results[task][e] = run_worker(task, e, path, a, a.timeout)
            print(f"{task} on {e}: {json.dumps(results[task][e])[:200]}", file=sys.stderr, flush=True)
    note = (f"{a.threads} threads, batch 1, each engine alone in a fresh process per task; median of {a.runs} runs; "
            f"{'toy sizes (--tiny)' if a.tiny else 'BERT-base, GPT-2 small, ViT-B/16 with random weights'}")
    lines = report(results, engines, note)
    print("\n".join(lines))
    if a.out:
        a.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
