"""``glow bundle MODEL --backend cpu -o DIR``: an ahead-of-time bundle (object file, C header, weights).

The bundle runs without Python or LLVM (docs/bundles.md). A backend writes its
own format through ``Backend.save_bundle``; one without it is reported in one
line before any work is done.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from glow_cli.common import (
    Command,
    add_model_argument,
    add_shape_argument,
    fmt_ms,
    positive_int,
    shapes_from_args,
)
from glow_cli.quantize_args import add_quantize_arguments, quantize_from_args
from glow_core.errors import GlowError


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    add_shape_argument(p)
    p.add_argument("-b", "--backend", default="cpu", metavar="NAME", help="the backend that writes it (default: cpu)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", type=Path, help="folder to write the bundle into")
    p.add_argument("--name", metavar="NAME", help="bundle name: the files NAME.* and the C entry point NAME "
                                                  "(default: the model's name)")
    p.add_argument("--target", metavar="TRIPLE", help="target triple, e.g. aarch64-linux-gnu (default: this host)")
    p.add_argument("--cpu", metavar="NAME", help="target CPU, e.g. cortex-a72, skylake (default: the target's "
                                                 "generic CPU; this host's CPU when no --target)")
    p.add_argument("--features", metavar="LIST", help="LLVM feature string, e.g. +avx2,+fma")
    p.add_argument("--threads", metavar="N", type=positive_int, default=1,
                   help="threads the entry point runs on (default 1; above 1 the bundle needs pthreads)")
    p.add_argument("--embed-weights", action="store_true", help="put the weights inside the object file")
    p.add_argument("--weights-text", action="store_true", help="also write NAME.weights.txt, a C array initializer")
    p.add_argument("--random-weights", action="store_true", help="zoo models: seeded random weights")
    p.add_argument("--seed", metavar="S", type=int, default=0, help="seed of --random-weights (default 0)")
    add_quantize_arguments(p)


def run(args: argparse.Namespace) -> int:
    import time

    from glow_core import zoo
    from glow_core.bundle import default_name, write_bundle

    model: object = args.model
    if args.random_weights:
        if not zoo.is_zoo_ref(args.model):
            raise GlowError("--random-weights applies to zoo:NAME models only")
        model = zoo.load_with_random_weights(args.model, seed=args.seed)
    t0 = time.perf_counter()
    files = write_bundle(model, args.backend, args.output, name=args.name or default_name(args.model),
                         target=args.target, cpu=args.cpu, features=args.features, threads=args.threads,
                         embed_weights=args.embed_weights, weights_text=args.weights_text,
                         input_shapes=shapes_from_args(args.input_shape) or None,
                         quantize=quantize_from_args(args))
    print(f"bundled {args.model} for {args.backend} in {fmt_ms(time.perf_counter() - t0)}:")
    for f in files:
        print(f"  {f}  {f.stat().st_size} bytes")
    manifest = _manifest(files)
    symbols = manifest.get("symbols") or ()
    if symbols:
        print("symbolic dims: " + ", ".join(f"{s['name']} {s['min']}..{s['max']}"
                                            + (f" (multiples of {s['step']})" if s["step"] > 1 else "")
                                            for s in symbols)
              + "; the entry takes their sizes after the three areas (docs/bundles.md, \"Symbolic dims\")")
        print("areas at the bounds: " + ", ".join(f"{k} {manifest.get(f'{k}_mem_size', 0)} bytes"
                                                  for k in ("constant", "mutable", "activations")))
    return 0


def _manifest(files: list[Path]) -> dict[str, Any]:
    """A bundle's manifest (NAME.json, the cpu backend's format); empty when it has none."""
    import json

    for f in files:
        if f.suffix == ".json":
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                return {}
            return data if isinstance(data, dict) else {}
    return {}


COMMAND = Command(
    name="bundle",
    help="compile a model ahead of time into an object file, a C header and its weights",
    description="Compile MODEL ahead of time into DIR: NAME.o (all code, one C entry point), NAME.h (the C API: "
                "entry, area sizes, input and output offsets), NAME.weights.bin and NAME.json. The object needs "
                "no Python and no LLVM: link it with a C program, libc and libm (and pthreads with --threads > 1). "
                "See docs/bundles.md.",
    epilog="examples:\n  glow bundle zoo:resnet50 -o build --random-weights\n"
           "  glow bundle model.onnx -o build --name net --target aarch64-linux-gnu --cpu cortex-a72",
    add_arguments=add_arguments,
    run=run,
)
