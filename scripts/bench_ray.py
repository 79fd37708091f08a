"""Throughput of Ray replica actors beside the local host manager's, and the per-request overhead of Ray.

    python scripts/bench_ray.py [--model zoo:resnet50] [--requests 40] [--small zoo:digits] [--calls 300]

Starts a local Ray cluster on this machine (loopback only, ``--cpus`` logical CPUs, default the
machine's count). Throughput: ``--requests`` requests submitted at once to 1 and to 2 replicas of
``--model`` (each replica on one one-thread device), first on local devices (``cpu:N``), then on
Ray devices (``ray:cpu:N``, one actor of one CPU each). Overhead: ``--calls`` requests one after the
other to ``--small`` on one local and on one Ray device; the difference of their latencies is what
Ray adds per request (object store both ways, the actor call, the answer's future), reported at the
median and at the 99th percentile. One run: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from glow_core import zoo
from glow_core.errors import ModelError
from glow_core.runtime import HostManager, parse_devices, plan_network


def throughput(devices: str, replicas: int, model: Any, feeds: dict[str, np.ndarray], n: int) -> float:
    with HostManager(devices, max_in_flight=n, max_queued=0) as hm:
        hm.add_network("m", model, threads=1, replicas=replicas)
        for _ in range(2 * replicas):  # warm up every replica
            hm.run_sync("m", feeds)
        t0 = time.perf_counter()
        futures = [hm.run("m", feeds) for _ in range(n)]
        for f in futures:
            f.result()
        return n / (time.perf_counter() - t0)


def latencies(devices: str, model: Any, feeds: dict[str, np.ndarray], n: int) -> list[float]:
    with HostManager(devices) as hm:
        hm.add_network("m", model, threads=1)
        for _ in range(10):
            hm.run_sync("m", feeds)
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            hm.run_sync("m", feeds)
            out.append(time.perf_counter() - t0)
        return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def load(ref: str) -> tuple[Any, dict[str, np.ndarray]]:
    model: Any = ref
    if zoo.is_zoo_ref(ref):
        try:
            model = zoo.load_with_random_weights(ref)
        except ModelError:  # a trained zoo model (zoo:digits): its own weights
            model = ref
    fn = plan_network(model, parse_devices("cpu:1")).function
    return model, zoo.random_feeds({p.name: p.type for p in fn.inputs})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:resnet50")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--small", default="zoo:digits", help="the model of the overhead measurement (tiny)")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    import ray

    from glow_core.runtime.cluster import start_local_cluster

    start_local_cluster(ray, args.cpus)
    try:
        model, feeds = load(args.model)
        rows = []
        for replicas in (1, 2):
            local = throughput(f"cpu:{replicas}", replicas, model, feeds, args.requests)
            remote = throughput(f"ray:cpu:{replicas}", replicas, model, feeds, args.requests)
            rows.append((replicas, local, remote))
        small, small_feeds = load(args.small)
        local_lat = latencies("cpu:1", small, small_feeds, args.calls)
        ray_lat = latencies("ray:cpu:1", small, small_feeds, args.calls)
    finally:
        ray.shutdown()
    print(f"{args.model}: {args.requests} requests at once, one one-thread device per replica "
          f"({os.cpu_count()} cores on this machine, load average {os.getloadavg()[0]:.1f} at the end)")
    print("  replicas   local requests/s   Ray requests/s   Ray/local")
    for replicas, local, remote in rows:
        print(f"  {replicas:8d}   {local:16.2f}   {remote:14.2f}   {remote / local:9.2f}")
    print(f"  2 replicas / 1 replica: local {rows[1][1] / rows[0][1]:.2f}x, Ray {rows[1][2] / rows[0][2]:.2f}x")
    print(f"{args.small}: {args.calls} requests one after the other, one device")
    for name, lat in (("local", local_lat), ("Ray", ray_lat)):
        print(f"  {name:5s} latency  median {statistics.median(lat) * 1e3:7.2f} ms   p99 {pct(lat, 0.99) * 1e3:7.2f} ms")
    print(f"  Ray adds per request: median {(statistics.median(ray_lat) - statistics.median(local_lat)) * 1e3:.2f} ms, "
          f"p99 {(pct(ray_lat, 0.99) - pct(local_lat, 0.99)) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
