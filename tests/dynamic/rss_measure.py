"""Resident memory of one model compiled at several shapes in one process (docs/dynamic-shapes.md,
"Memory"): ``python -m tests.dynamic.rss_measure [compile|onnx_backend] [--layers N --hidden H ...]``.

Prints RSS (and its anonymous and file-backed parts) after the first shape and after every shape; the
ratio last / first is the figure issue 28 asks to keep <= 1.2. Not a test: machine-dependent figures are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
import onnx

from tests.dynamic.models import bert_feeds, bert_like


def rss() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in MB."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) // 1024
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("route", choices=["compile", "onnx_backend"], nargs="?", default="compile")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=3072)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--lengths", default="16,32,64,128,256,384")
    p.add_argument("--no-cache", action="store_true", help="compile without the cpu backend's object cache")
    a = p.parse_args()
    model = bert_like(a.layers, a.hidden, a.heads, a.ffn, a.vocab)
    weight_mb = sum(np.prod(t.dims) * 4 for t in model.graph.initializer) / 2**20
    data = model.SerializeToString()
    del model
    gc.collect()
    print(f"weights {weight_mb:.0f} MB; before loading: {rss()}")
    proto = onnx.load_model_from_string(data)
    del data
    options = {"cache": False} if a.no_cache else None
    if a.route == "compile":
        import glow_core

        net = glow_core.compile(proto, a.backend, options=options)
        run = net.run
    else:
        import glow_core.onnx_backend as ob

        rep = ob.prepare(proto, backend=a.backend, options=options)
        run = lambda feeds: dict(zip(rep.output_names, rep.run(feeds)))  # noqa: E731
    del proto
    gc.collect()
    first = None
    for k, n in enumerate(int(x) for x in a.lengths.split(",")):
        t = time.perf_counter()
        run(bert_feeds(1, n, a.vocab))
        gc.collect()
        now = rss()
        first = first or now
        print(f"sequence {n}: first run {time.perf_counter() - t:.1f} s; RSS {now}; "
              f"ratio to the first shape {now['VmRSS'] / first['VmRSS']:.2f}", flush=True)


if __name__ == "__main__":
    main()
