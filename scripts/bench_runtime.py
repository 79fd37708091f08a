"""Throughput of a two-partition pipeline on two one-thread cpu devices vs one one-thread device.

    python scripts/bench_runtime.py [--model zoo:resnet50] [--requests 40]

The model is split in two (each cpu device may fill --share of the memory the whole model needs,
75% by default, so the partitioner must cut it in two, and is free to place the cut where the
estimated cost balances), both partitions compiled with one thread, and N requests are
submitted at once; the same N requests then run on one device holding the whole model. Prints both
throughputs and their ratio (one run: a measurement, not a test).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from glow_core import zoo
from glow_core.runtime import HostManager, parse_devices, plan_network
from glow_core.runtime.graphcut import segment_memory


def throughput(devices: str, model: object, feeds: dict[str, np.ndarray], n: int) -> tuple[float, int]:
    with HostManager(devices, max_in_flight=n, max_queued=0) as hm:
        plan = hm.add_network("m", model, threads=1)
        hm.run_sync("m", feeds)  # warm up
        t0 = time.perf_counter()
        futures = [hm.run("m", feeds) for _ in range(n)]
        for f in futures:
            f.result()
        return n / (time.perf_counter() - t0), len(plan.partitions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:resnet50")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--share", type=float, default=0.75,
                    help="each device's usable memory as a share of the whole model's (0.5 < share < 1)")
    args = ap.parse_args()
    model = zoo.load_with_random_weights(args.model) if zoo.is_zoo_ref(args.model) else args.model
    whole = plan_network(model, parse_devices("cpu:1"))
    need = segment_memory(whole.function, whole.function.nodes).total
    feeds = zoo.random_feeds({p.name: p.type for p in whole.function.inputs})
    one, _ = throughput(f"cpu:1@{need * 2}", model, feeds, args.requests)
    if not 0.5 < args.share < 1:
        ap.error("--share must be between 0.5 and 1 (exclusive): two devices must hold the model, one must not")
    two, parts = throughput(f"cpu:2@{int(need * args.share / 0.9) + 1}", model, feeds, args.requests)
    print(f"{args.model}: {args.requests} requests")
    print(f"  one cpu device, 1 thread:                {one:8.2f} requests/s")
    print(f"  two cpu devices, 1 thread each, {parts} parts: {two:8.2f} requests/s")
    print(f"  ratio two/one: {two / one:.2f}")


if __name__ == "__main__":
    main()
