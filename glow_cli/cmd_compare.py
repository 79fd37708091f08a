"""``glow compare MODEL --backend A --reference B``: which node diverges first? (``glow_tools.divergence``).

``glow compare MODEL --quantize PROFILE.json --data DATA``: how well does the int8 network agree with the
float one, and which layers lose most (``glow_core.quantization.report``).

``glow compare MODEL --backend A --precision bf16``: how close is A's bf16 network to its float32 one, per
output (``precision_report.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glow_cli.common import (
    Command,
    add_model_argument,
    add_precision_argument,
    add_shape_argument,
    input_spec,
    load_array,
    load_model_ref,
    positive_int,
    shapes_from_args,
)
from glow_cli.quantize_args import add_quantize_arguments, quantize_from_args
from glow_core.errors import GlowError, InputError


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    p.add_argument("-b", "--backend", metavar="A",
                   help="the backend to check (required without --quantize; with it, default: the backend the "
                        "profile was made for)")
    p.add_argument("-r", "--reference", default="interpreter", metavar="B",
                   help="the backend to compare with (default: interpreter)")
    add_shape_argument(p)
    p.add_argument("--input", metavar="NAME=FILE.npy", action="append", type=input_spec, default=[],
                   help="read input NAME from a .npy file (repeatable; give all inputs or none)")
    p.add_argument("--seed", metavar="S", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--rtol", type=_non_negative, default=None, metavar="X",
                   help="relative tolerance, of each value's largest magnitude (default 1e-3)")
    p.add_argument("--atol", type=_non_negative, default=None, metavar="X", help="absolute tolerance (default 1e-6)")
    add_quantize_arguments(p)
    p.add_argument("--data", metavar="PATH", type=Path, default=None,
                   help="with --quantize: the samples to compare on (a folder of .npy/.npz/images, or one .npz)")
    p.add_argument("--worst", metavar="N", type=positive_int, default=5,
                   help="with --quantize: how many layers to name, worst SQNR first (default 5)")
    add_precision_argument(p)


def _profile_backend(path: Path) -> str:
    """The backend a profile was made for (its "backend" field) when installed, else the fastest installed."""
    import json

    from glow_core.plugin_host import default_backend, registry

    try:
        made_for = json.loads(path.read_text(encoding="utf-8")).get("backend")
    except (OSError, ValueError, AttributeError):  # the profile's own reader reports a bad file
        made_for = None
    return made_for if isinstance(made_for, str) and made_for in registry().names() else default_backend()


def _run_quantized(args: argparse.Namespace) -> int:
    from glow_core.quantization.report import compare_quantized

    if args.data is None:
        raise InputError("--quantize needs --data PATH: the samples to compare the int8 and float networks on")
    if args.input:
        raise InputError("--input does not combine with --quantize; give the samples with --data")
    report = compare_quantized(args.model, quantize_from_args(args), args.data,
                               args.backend or _profile_backend(args.quantize), shapes_from_args(args.input_shape)
                               or None)
    for line in report.lines(args.worst):
        print(line)
    return 0


def _run_precision(args: argparse.Namespace) -> int:
    """``--precision bf16``: the backend's bf16 network against its own float32 one, per output."""
    from glow_cli.precision_report import agreement_line, compare_precision
    from glow_core.plugin_host import get_backend

    if args.backend is None:
        raise InputError("glow compare --precision needs --backend A (the backend compiled both ways)")
    get_backend(args.backend)
    feeds = {name: load_array(name, path) for name, path in args.input} or None
    proto, label = load_model_ref(args.model)
    origin, outputs = compare_precision(proto, args.backend, args.precision, shapes_from_args(args.input_shape)
                                        or None, feeds, args.seed)
    print(f"model    {label}")
    print(f"backend  {args.backend}: {args.precision} against fp32")
    for name, where in origin.items():
        print(f"input {name}: {where}")
    for out in outputs:
        print(agreement_line(out))
    return 0


def run(args: argparse.Namespace) -> int:
    from glow_core.plugin_host import get_backend

    if args.precision not in (None, "fp32"):
        if args.quantize is not None:
            raise InputError("--precision does not combine with --quantize")
        return _run_precision(args)
    if args.quantize is not None:
        return _run_quantized(args)
    quantize_from_args(args)  # companions of --quantize without it: a clear error
    if args.data is not None:
        raise InputError("--data applies with --quantize only", hint="give inputs with --input NAME=FILE.npy")
    if args.backend is None:
        raise InputError("glow compare needs --backend A (or --quantize PROFILE.json --data DATA)")
    from glow_sdk.testing import Tolerance
    from glow_tools.divergence import DEFAULT_TOLERANCE, first_divergence

    get_backend(args.backend)  # fail fast on unknown or broken backends
    get_backend(args.reference)
    if args.backend == args.reference:
        raise GlowError(f"--backend and --reference are both '{args.backend}'", hint="compare two different backends")
    proto, label = load_model_ref(args.model)
    feeds = None
    if args.input:
        feeds = {}
        for name, path in args.input:
            if name in feeds:
                raise InputError(f"--input gives '{name}' twice")
            feeds[name] = load_array(name, path)
    tol = Tolerance(DEFAULT_TOLERANCE.rtol if args.rtol is None else args.rtol,
                    DEFAULT_TOLERANCE.atol if args.atol is None else args.atol, scaled=True)
    report = first_divergence(proto, args.backend, args.reference, input_shapes=shapes_from_args(args.input_shape)
                              or None, feeds=feeds, seed=args.seed, tolerance=tol)
    print(f"model    {label}")
    for name, origin in report.feeds.items():
        print(f"input {name}: {origin}")
    for line in report.lines():
        print(line)
    return 1 if report.diverges else 0


COMMAND = Command(
    name="compare",
    help="run a model on two backends and name the first node whose result diverges",
    description="Run MODEL on --backend and on --reference with the same inputs, every value of the graph "
                "exposed, and compare the values in topological order: the first one beyond tolerance names the "
                "node that diverges, with both values' statistics (min, max, mean, std, NaN/inf counts) and the "
                "worst element. Tolerance: |a - b| <= atol + rtol * max|b| per value. Exit status 0 when "
                "nothing diverges, 1 when something does (or on an error). With --quantize PROFILE.json --data "
                "DATA: run the float and the int8 network on the samples and report, per output, top-1 agreement, "
                "max / mean absolute error and cosine similarity, and the --worst layers by signal-to-"
                "quantization-noise ratio (docs/quantization.md). With --precision bf16: compile MODEL for "
                "--backend in float32 and in bf16 and report, per output, the largest difference, the cosine "
                "similarity and the top-1 agreement.",
    epilog="examples:\n  glow compare zoo:resnet50 --backend xyz\n"
           "  glow compare model.onnx -b xyz -r interpreter --input x=x.npy --rtol 1e-4\n"
           "  glow compare zoo:digits --quantize profile.json --data samples.npz\n"
           "  glow compare zoo:resnet50 --backend cpu --precision bf16",
    add_arguments=add_arguments,
    run=run,
)
