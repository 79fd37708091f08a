"""The cpu backend's work split (``balance.py``) on unequal cores: the even split against the measured one.

Glow's caller thread is pinned to the first CPU of the process's affinity and its worker to the second; a
competitor process (pinned to the second CPU) is busy ``--busy`` microseconds of every ``--busy + --idle``,
so the worker runs slower than the caller, as on a virtual CPU whose sibling hyperthread another tenant keeps
busy. Runs alternate between the even split (pinned) and the measured one, first without the competitor, then
with it, and the script prints the median latency of each::

    python scripts/bench_split.py resnet50 --busy 300 --idle 300

MODEL is a light-zoo name (``resnet50``, ``squeezenet``, ...) or an ONNX file whose inputs are all float32 with
fixed shapes. Linux only (CPU affinity); needs two CPUs. Timing on a shared machine is noisy: read the two
columns of one phase against each other.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

import glow_core
from glow_core.zoo import model_path


def _spin(cpu: int, busy_us: float, idle_us: float, seconds: float) -> None:
    """The competitor: busy ``busy_us``, asleep ``idle_us``, on ``cpu``, for ``seconds``."""
    os.sched_setaffinity(0, {cpu})
    end = time.time() + seconds
    while time.time() < end:
        t = time.perf_counter()
        while time.perf_counter() - t < busy_us * 1e-6:
            pass
        time.sleep(idle_us * 1e-6)


def _feeds(path: str) -> dict[str, np.ndarray]:
    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in m.graph.input if i.name not in inits}


def median_ms(run: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def compare(run: Callable[[], object], set_split: Callable[[list[float] | None], None], rounds: int,
            n: int) -> tuple[float, float]:
    """(even, measured): medians over ``rounds`` interleaved blocks of ``n`` runs."""
    even, measured = [], []
    for _ in range(rounds):
        set_split([1.0, 1.0])
        even.append(median_ms(run, n))
        set_split(None)
        for _ in range(3):
            run()
        measured.append(median_ms(run, n))
    return float(np.median(even)), float(np.median(measured))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--busy", type=float, default=300.0, help="competitor busy time per period, us")
    p.add_argument("--idle", type=float, default=300.0, help="competitor sleep per period, us")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--spin", nargs=3, type=float, metavar=("CPU", "BUSY", "IDLE"), help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=600.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.spin:
        _spin(int(a.spin[0]), a.spin[1], a.spin[2], a.seconds)
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("bench_split: needs two CPUs", file=sys.stderr)
        return 2
    path = a.model if Path(a.model).exists() else str(model_path(a.model))
    feeds = _feeds(path)
    net = glow_core.compile(path, "cpu", threads=2, input_shapes={k: v.shape for k, v in feeds.items()})
    for _ in range(5):
        net.run(feeds)
    os.sched_setaffinity(0, {cpus[0]})  # the caller (this thread)
    for t in threading.enumerate():
        if t.name.startswith("glow-cpu") and t.native_id is not None:
            os.sched_setaffinity(t.native_id, {cpus[1]})

    def run() -> object:
        return net.run(feeds)

    print(f"{Path(path).stem}: caller on cpu {cpus[0]}, worker on cpu {cpus[1]}")
    print("| phase | even split ms | measured split ms |\n|---|---:|---:|")
    for phase in ("alone", f"competitor {a.busy:g}/{a.idle:g} us on cpu {cpus[1]}"):
        rival = None if phase == "alone" else subprocess.Popen(
            [sys.executable, __file__, "x", "--spin", str(cpus[1]), str(a.busy), str(a.idle)])
        time.sleep(0.3)
        try:
            even, measured = compare(run, net.executable.set_split, a.rounds, a.runs)
        finally:
            if rival is not None:
                rival.kill()
                rival.wait()
        print(f"| {phase} | {even:.2f} | {measured:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
