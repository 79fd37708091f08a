"""ResNet-50 (seeded random weights) as a bundle: the C example's outputs equal the JIT's bit for bit.

Prints the object and weights sizes and the example's latency beside the JIT's (one run each; not asserted).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time

import numpy as np
import pytest

import glow_core
from glow_core import zoo
from glow_core.bundle import read_elf, write_bundle
from tests.bundle.util import ALLOWED_UNDEFINED, build_example, run_example

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs a C compiler and make")

THREADS = 2
RUNS = 5


def test_resnet50_bundle_matches_jit(tmp_path):
    model = zoo.load_with_random_weights("resnet50", seed=0)
    d = tmp_path / "bundle"
    write_bundle(model, "cpu", d, name="resnet50", threads=THREADS)
    manifest = json.loads((d / "resnet50.json").read_text())
    assert manifest["threads"] == THREADS
    info = read_elf(d / "resnet50.o")
    assert set(info.undefined) <= ALLOWED_UNDEFINED, set(info.undefined) - ALLOWED_UNDEFINED
    net = glow_core.compile(model, "cpu", threads=THREADS)
    feeds = zoo.random_feeds(net.input_types, seed=0)
    want = net.run(feeds)
    exe = build_example(d, "resnet50")
    got, text = run_example(exe, manifest, feeds, tmp_path / "run", runs=RUNS)
    assert set(got) == set(want)
    for k in want:
        assert np.array_equal(got[k], want[k]), f"{k}: max diff {np.abs(got[k] - want[k]).max()}"
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        net.run(feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    print(f"\nresnet50 bundle: object {(d / 'resnet50.o').stat().st_size} bytes, "
          f"weights {(d / 'resnet50.weights.bin').stat().st_size} bytes")
    print(f"C example: {text.strip().splitlines()[-1]}")
    print(f"JIT:       latency: median {statistics.median(times):.3f} ms, min {min(times):.3f} ms "
          f"over {RUNS} runs ({THREADS} thread(s))")
