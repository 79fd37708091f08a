#!/usr/bin/env python3
"""Run Silero VAD (nested If nodes, the top one decided by the sample-rate input at run time) on glow
backends and compare every chunk of a streamed signal with onnxruntime.

    python scripts/check_silero_vad.py [--backends interpreter,cpu] [--chunks 20] [--cache DIR]
                                       [--model silero_vad/data/silero_vad.onnx]

The model is a member of the ``silero-vad`` wheel on the package index, fetched (``pip download``)
and unzipped into the cache folder by scripts/bench_trained_models.py's helpers; nothing is
committed. Each backend compiles the model once per chunk size (512 samples at 16 kHz, 256 at
8 kHz), then streams ``--chunks`` chunks of a speech-like signal, feeding each chunk's state to the
next, as the silero-vad package does. Prints the largest difference from onnxruntime per output and
the time per chunk; exits 1 when a difference exceeds 1e-4.
(tests/controlflow build the same control-flow patterns themselves: CI may have no package index.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trained_models import extract_member, fetch_wheel, speech_chunk  # noqa: E402

TOLERANCE = 1e-4


def model_path(cache: Path, member: str) -> Path:
    out = cache / "models" / f"silero-{Path(member).name}"
    if not out.exists():
        extract_member(fetch_wheel("silero-vad", "6.2.3", cache), member, out)
    return out


def stream(run, chunks: int, sr: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    state = np.zeros((2, 1, 128), np.float32)
    outs = []
    for _ in range(chunks):
        prob, state = run({"input": speech_chunk(n, rng)[None], "state": state, "sr": np.array(sr, np.int64)})
        outs.append((prob, state))
    return outs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="interpreter,cpu")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "glow-bench")
    ap.add_argument("--model", default="silero_vad/data/silero_vad.onnx")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    import glow_core

    path = model_path(args.cache, args.model)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for sr, n in ((16000, 512), (8000, 256)):
        want = stream(lambda f: sess.run(None, f), args.chunks, sr, n)
        for backend in args.backends.split(","):
            t0 = time.perf_counter()
            net = glow_core.compile(str(path), backend, {"input": (1, n), "state": (2, 1, 128)})
            compile_s = time.perf_counter() - t0
            net.run({"input": np.zeros((1, n), np.float32), "state": np.zeros((2, 1, 128), np.float32),
                     "sr": np.array(sr, np.int64)})  # the first run compiles the branch taken
            t1 = time.perf_counter()
            got = stream(lambda f: tuple(net.run(f).values()), args.chunks, sr, n)
            per_chunk = (time.perf_counter() - t1) / args.chunks
            diffs = [max(float(np.abs(g[i] - w[i]).max()) for g, w in zip(got, want)) for i in (0, 1)]
            worst = max(worst, *diffs)
            print(f"{backend:12s} sr={sr:5d}: compile {compile_s:6.2f} s, {per_chunk * 1e3:7.2f} ms/chunk, "
                  f"max |glow - onnxruntime|: output {diffs[0]:.2e}, state {diffs[1]:.2e}")
    print(f"largest difference {worst:.2e} (tolerance {TOLERANCE:g})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
