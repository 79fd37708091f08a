"""Image models from one compile for symbolic dims: every batch and two image sizes, beside a compile per shape.

    python scripts/bench_symbolic_images.py [--models resnet50,yolov8n] [--threads 2] [--runs 10]

For each model, one process compiles it once with its batch, height and width symbolic (bounded by the
larger image size) and runs batches 1, 2, 4 and 8 at two image sizes; each shape is also compiled on its
own (``options={"symbolic_dims": False}`` and the shape given), its outputs compared with the one compile's
(``np.testing.assert_allclose``, rtol and atol 1e-4: a global pool sums in another order) and its speed
measured. Printed: the compile seconds of both, images/s per batch and size (median of ``--runs`` after two
warm-up runs), and whether every output matched.

- ``resnet50``: onnx's light-zoo ResNet-50 (placeholder weights; the package ships it), its input made
  ``[batch, 3, height, width]`` (``tests/dynamic/models.py``), 224 x 224 and 160 x 192;
- ``yolov8n``: YOLOv8n's structure with random weights (``tests/runtime/detector.py``), the three heads'
  maps as outputs, 320 x 320 and 256 x 320;
- ``tiny``: the small YOLO-style detector of ``tests/dynamic/test_symbolic_images.py`` (the script's test).

Run on an idle machine: the figures are ratios of one process's runs, and a loaded machine makes them noise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import glow_core  # noqa: E402


def _resnet50() -> tuple[onnx.ModelProto, str, list[tuple[int, int]]]:
    from tests.dynamic.models import light_resnet50

    model = light_resnet50()
    return model, model.graph.input[0].name, [(224, 224), (160, 192)]


def _yolov8n() -> tuple[onnx.ModelProto, str, list[tuple[int, int]]]:
    from tests.runtime.detector import yolov8n_like

    return yolov8n_like("symbolic", flatten=False), "images", [(320, 320), (256, 320)]


def _tiny() -> tuple[onnx.ModelProto, str, list[tuple[int, int]]]:
    from tests.dynamic.test_symbolic_images import detector_like

    return detector_like(), "x", [(64, 64), (32, 64)]


MODELS: dict[str, Callable[[], tuple[onnx.ModelProto, str, list[tuple[int, int]]]]] = {
    "resnet50": _resnet50, "yolov8n": _yolov8n, "tiny": _tiny}
BATCHES = (1, 2, 4, 8)


def _images_per_s(run: Callable[[], object], batch: int, runs: int) -> float:
    for _ in range(2):
        run()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return batch / float(np.median(times))


def bench(name: str, threads: int, runs: int) -> list[str]:
    model, input_name, sizes = MODELS[name]()
    top_h, top_w = max(h for h, _ in sizes), max(w for _, w in sizes)
    dims = {"height": (1, top_h), "width": (1, top_w)}
    t = time.perf_counter()
    net = glow_core.compile(model, "cpu", dims=dims, threads=threads)
    rng = np.random.default_rng(0)
    rows, per_shape_s, matched, first_s = [], [], True, 0.0
    for h, w in sizes:
        for batch in BATCHES:
            feeds = {input_name: rng.standard_normal((batch, 3, h, w)).astype(np.float32)}
            got = net.run(feeds)
            first_s = first_s or time.perf_counter() - t  # (the compile and the first run)
            t1 = time.perf_counter()
            ref = glow_core.compile(model, "cpu", {input_name: (batch, 3, h, w)}, threads=threads,
                                    options={"symbolic_dims": False})
            per_shape_s.append(time.perf_counter() - t1)
            want = ref.run(feeds)
            for k in want:
                try:
                    np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4)
                except AssertionError:
                    matched = False
            fast = _images_per_s(lambda: net.run(feeds), batch, runs)
            alone = _images_per_s(lambda: ref.run(feeds), batch, runs)
            rows.append(f"| {name} | {h} x {w} | {batch} | {fast:.1f} | {alone:.1f} | {fast / alone:.2f} |")
            del ref
    plans = "; ".join(p.describe() for p in net.symbolic.plans) if net.symbolic else "-"
    head = [f"**{name}**: one compile {first_s:.1f} s (compile and first run), compiles of its own: {net.specializations_compiled}; "
            f"a compile per shape {np.median(per_shape_s):.1f} s (median of {len(per_shape_s)}); "
            f"outputs {'equal' if matched else 'DIFFER'}; plan: {plans}", "",
            "| model | image | batch | one compile images/s | per-shape images/s | ratio |",
            "|---|---|---:|---:|---:|---:|"]
    return head + rows + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,yolov8n", help=f"of {', '.join(MODELS)} (tiny: for tests)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args(argv)
    names = [m for m in a.models.split(",") if m]
    bad = [m for m in names if m not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; models: {', '.join(MODELS)}")
    lines: list[str] = []
    for m in names:
        lines += bench(m, a.threads, a.runs)
    print("\n".join(lines))
    print(f"{a.threads} threads; cpu backend; November 2026 builds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
