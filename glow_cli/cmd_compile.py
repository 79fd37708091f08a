"""``glow compile MODEL --backend NAME [--stats] [--lir]``: compile without running.

Prints the compile time of each stage; ``--stats`` adds node counts by kind
after optimization and the memory plan (arena, lower bound, naive sum of all
activations); ``--lir`` prints the low-level IR with its memory plan.
"""

from __future__ import annotations

import argparse
from typing import Any

from glow_cli.common import (Command, add_model_argument, add_precision_argument, add_shape_argument, fmt_ms,
                             shapes_from_args)
from glow_cli.quantize_args import add_quantize_arguments, quantize_from_args


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    add_shape_argument(p)
    p.add_argument("-b", "--backend", default=None, metavar="NAME",
                   help="the backend to compile for (default: the fastest installed, cpu when present, else "
                        "interpreter)")
    p.add_argument("--stats", action="store_true",
                   help="print node counts by kind and the memory plan's figures")
    p.add_argument("--lir", action="store_true", help="print the low-level IR with the memory plan")
    add_quantize_arguments(p)
    add_precision_argument(p)


def memory_report_text(net: object) -> str | None:
    """The memory figures of a compiled network whose executable has a memory plan."""
    exe = getattr(net, "executable", None)
    report = getattr(exe, "memory", None)
    if report is None:
        lir = getattr(exe, "lir", None)
        plan = getattr(lir, "plan", None)
        report = getattr(plan, "report", None)
    return report.format() if report is not None else None


def run(args: argparse.Namespace) -> int:
    import glow_core
    from glow_core.plugin_host import default_backend

    args.backend = args.backend or default_backend()
    model = args.model
    if args.lir:  # the LIR is built from the prepared graph, which a program-cache hit does not keep: compile
        from glow_core import zoo  # from the loaded model (never served by that cache; docs/cpu-backend.md)
        from glow_core.importer import load_model

        model = load_model(zoo.resolve_model(args.model))[0]
    net = glow_core.compile(model, args.backend, shapes_from_args(args.input_shape) or None,
                            quantize=quantize_from_args(args), precision=args.precision)
    if isinstance(net, glow_core.DynamicNetwork):
        return _dynamic(args, net)
    s = net.stats
    print(f"compiled {args.model} for {args.backend}: import {fmt_ms(s.import_s)}, "
          f"optimize+lower {fmt_ms(s.optimize_s)}, backend {fmt_ms(s.backend_compile_s)}")
    if s.quantized is not None:
        kinds = ", ".join(f"{k} x{len(v)}" for k, v in s.quantized.quantized.items()) or "nothing"
        print(f"quantized to int8: {kinds}; kept float: {len(s.quantized.kept_float)} node(s)")
    if args.stats:
        print("nodes after optimization and lowering:")
        for kind, n in sorted(s.nodes_by_kind.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {kind:28s} {n:6d}")
        mem = memory_report_text(net)
        print("memory plan:" if mem else "memory plan: (this backend does not report one)")
        if mem:
            print("  " + mem.replace("\n", "\n  "))
    if args.lir:
        from glow_core.lir import format_lir
        from glow_core.lircompiler import lir_of

        print(format_lir(lir_of(net)))
    return 0


def _dynamic(args: argparse.Namespace, net: Any) -> int:
    """A model whose symbolic dims stay open compiles per input shape when run: say so (and what fixes them)."""
    from glow_core.errors import ImportShapeError

    inputs = ", ".join(f"{n}: {t}" for n, t in net.input_dims.items())
    hint = "fix them with --dim SYMBOL=N or --input-shape NAME=d1,d2,... to compile one shape now"
    if args.stats or args.lir:
        raise ImportShapeError(f"{args.model} has symbolic dimensions ({inputs}): --stats and --lir describe one "
                               "compiled shape", hint=hint)
    print(f"{args.model} has symbolic dimensions ({inputs}): a network for {args.backend} that compiles a "
          f"specialization per input shape when run ({hint})")
    return 0


COMMAND = Command(
    name="compile",
    help="compile a model for a backend; --stats prints node counts and memory figures",
    description="Import, optimize, lower and compile MODEL for a backend without running it. --stats prints "
                "the node counts by kind and the memory plan (arena size, lower bound, naive sum of activations); "
                "--lir prints the low-level IR with the plan's offsets.",
    epilog="examples:\n  glow compile zoo:resnet50 --stats\n  glow compile model.onnx -b interpreter --lir\n"
           "  glow compile bert.onnx --dim batch=1 --dim sequence=128 --stats",
    add_arguments=add_arguments,
    run=run,
)
