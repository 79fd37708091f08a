"""Int8 inference benchmark: ResNet-50 (seeded random weights), batch 1, glow fp32 / int8 / own int8 / onnxruntime.

    python scripts/bench_quantized.py [--threads 2] [--rounds 5] [--runs 10]

- **glow fp32**: the float model on the cpu backend;
- **glow int8**: onnxruntime's QDQ model of it (``scripts/qdq_models.py``: opset 13,
  initializers out of the graph inputs, ``quant_pre_process``, ``quantize_static`` QDQ,
  per-channel int8 weights, uint8 activations, MinMax calibration on seeded inputs)
  imported by glow: the QDQ fold puts every convolution on the fused int8 kernels;
- **glow int8 (own)**: glow's own conversion of the float model: ``glow_core.profile``
  on the cpu backend over the same calibration inputs onnxruntime calibrated on, then
  ``glow_core.compile(..., quantize=QuantizationConfig(profile=...))`` (defaults:
  asymmetric, MinMax, per-channel int8);
- **onnxruntime int8** (and fp32, for reference): the same two models in onnxruntime
  with the same thread count.

Each engine lives in its own process (spawned, compiled once, warmed up); the rounds
interleave the engines, each round timing ``--runs`` runs of every engine, and the
median of all of an engine's runs is reported with the ratios. Numbers from a
shared machine are noisy: the script prints the load average next to them.
Needs onnxruntime (``pip install glow-compiler[bench]``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ENGINES = ("glow-fp32", "glow-int8", "glow-own8", "ort-fp32", "ort-int8")
#: the model each engine runs
#: untimed runs per engine once all have compiled (more than the cpu thread chooser's first trials)
WARMUP_RUNS = 12
MODEL_OF = {"glow-fp32": "fp32", "glow-int8": "int8", "glow-own8": "fp32", "ort-fp32": "fp32", "ort-int8": "int8"}


def _worker(engine: str, model: str, feed_path: str, threads: int, profile: str,  # type: ignore[no-untyped-def]
            conn) -> None:
    feed = dict(np.load(feed_path))
    if engine.startswith("glow"):
        import glow_core
        from glow_core.quantization import QuantizationConfig

        quantize = QuantizationConfig(profile=profile) if engine == "glow-own8" else None
        net = glow_core.compile(model, backend="cpu", threads=threads, quantize=quantize)
        run = lambda: net.run(feed)  # noqa: E731
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feed)  # noqa: E731
    run()
    conn.send("ready")
    while True:
        n = conn.recv()
        if n is None:
            break
        if n < 0:  # untimed warm-up runs, one engine at a time once every engine has compiled
            for _ in range(-n):
                run()
            conn.send("warm")
            continue
        times = []
        for _ in range(n):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        conn.send(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    import onnx
    import glow_core
    from qdq_models import resnet50_qdq_calibrated

    tmp = Path(tempfile.mkdtemp(prefix="glow-bench-q-"))
    fmodel, qmodel, batches, feed = resnet50_qdq_calibrated()
    paths = {"fp32": str(tmp / "r50.onnx"), "int8": str(tmp / "r50_qdq.onnx")}
    onnx.save(fmodel, paths["fp32"])
    onnx.save(qmodel, paths["int8"])
    feed_path = str(tmp / "feed.npz")
    np.savez(feed_path, **feed)
    profile = str(tmp / "r50.cpu.profile.json")
    glow_core.profile(paths["fp32"], batches, backend="cpu", threads=args.threads).save(profile)
    ctx = mp.get_context("spawn")
    procs, conns = {}, {}
    for eng in ENGINES:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(eng, paths[MODEL_OF[eng]], feed_path, args.threads, profile, child))
        p.start()
        procs[eng], conns[eng] = p, parent
    for eng in ENGINES:
        assert conns[eng].recv() == "ready", eng
    # warm up while the other engines are idle (not while they still compile): glow's cpu backend
    # picks its thread count from measured runs (runtime.ThreadChooser), as any run would in steady state
    for eng in ENGINES:
        conns[eng].send(-WARMUP_RUNS)
        assert conns[eng].recv() == "warm", eng
    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    for _ in range(args.rounds):
        for eng in ENGINES:
            conns[eng].send(args.runs)
            times[eng].extend(conns[eng].recv())
    for eng in ENGINES:
        conns[eng].send(None)
        procs[eng].join()
    med = {e: float(np.median(t)) * 1e3 for e, t in times.items()}
    print(f"ResNet-50, batch 1, {args.threads} threads, {args.rounds} interleaved rounds x {args.runs} runs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    for eng in ENGINES:
        print(f"  {eng:10s} median {med[eng]:7.2f} ms   min {min(times[eng]) * 1e3:7.2f} ms")
    print(f"glow int8 / glow fp32        = {med['glow-int8'] / med['glow-fp32']:.2f}  (target <= 0.5)")
    print(f"glow int8 / onnxruntime int8 = {med['glow-int8'] / med['ort-int8']:.2f}  (target <= 1.0)")
    print(f"glow own int8 / glow fp32    = {med['glow-own8'] / med['glow-fp32']:.2f}")
    print(f"glow own int8 / ort int8     = {med['glow-own8'] / med['ort-int8']:.2f}")
    print(f"onnxruntime int8 / fp32      = {med['ort-int8'] / med['ort-fp32']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
