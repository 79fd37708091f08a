"""``glow dump MODEL``: print the graph IR; ``--dot FILE`` writes Graphviz DOT (or SVG).

``--backend NAME`` dumps the graph as prepared (optimized, lowered) for a
backend; ``--after PASS`` / ``--before PASS`` print the graph around a named
pass; ``--stats`` prints node counts by kind before/after optimization and the
time each pass took; ``--lir`` prints the low-level IR with its memory plan.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from glow_cli.common import Command, add_model_argument, add_shape_argument, load_model_ref, shapes_from_args
from glow_core.errors import GlowError

DOT_TIMEOUT_S = 300


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    add_shape_argument(p)
    p.add_argument("--dot", metavar="FILE", type=Path, default=None,
                   help="also write the graph as Graphviz DOT; FILE.svg renders SVG with graphviz's 'dot'")
    p.add_argument("-b", "--backend", metavar="NAME", default=None,
                   help="dump the graph as prepared (optimized and lowered) for this backend, "
                        "instead of as imported (--after/--before/--stats/--lir default to 'interpreter')")
    p.add_argument("--after", metavar="PASS", action="append", default=[],
                   help="print the graph after each run of the named pass (repeatable)")
    p.add_argument("--before", metavar="PASS", action="append", default=[],
                   help="print the graph before each run of the named pass (repeatable)")
    p.add_argument("--stats", action="store_true",
                   help="print node counts by kind before and after optimization, and each pass's time")
    p.add_argument("--lir", action="store_true",
                   help="print the low-level IR (with the memory plan) the backend's compiled function runs")


def write_dot(text: str, path: Path) -> None:
    """Write DOT text to ``path``; render SVG through graphviz when ``path`` ends in ``.svg``."""
    if path.suffix.lower() != ".svg":
        try:
            path.write_text(text)
        except OSError as e:
            raise GlowError(f"cannot write '{path}': {e.strerror or e}") from None
        return
    dot = shutil.which("dot")
    if dot is None:
        raise GlowError(
            f"cannot write '{path}': rendering SVG needs graphviz's 'dot' program, which is not on PATH",
            hint="install graphviz (e.g. apt-get install graphviz) or write a .dot file instead",
        )
    try:
        proc = subprocess.run([dot, "-Tsvg", "-o", str(path)], input=text, capture_output=True, text=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GlowError(f"graphviz 'dot' failed to render '{path}': {e}",
                        hint="write a .dot file instead") from None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise GlowError(f"graphviz 'dot' failed to render '{path}' (exit {proc.returncode})"
                        + (f": {err[0]}" if err else ""), hint="write a .dot file instead")


def _shapes(proto: Any, shapes: Any) -> tuple[Any, dict[int, str]]:
    """The input shapes to import at, and {probe size: symbol}: symbolic or unknown dimensions that
    --input-shape / --dim leave open are imported at distinct probe sizes and printed as their symbols."""
    from glow_core.importer.symbols import InputShapes, ModelSymbols

    symbols = ModelSymbols(proto, shapes.dims)
    if not symbols.open_inputs(shapes):
        return shapes or None, {}
    taken = {int(d) for t in proto.graph.initializer for d in t.dims}
    taken |= {d.size for i in symbols.inputs.values() for d in i.dims or () if d.size is not None}
    probed, names = symbols.probe(shapes, taken)
    return InputShapes(probed, shapes.dims), names


def run(args: argparse.Namespace) -> int:
    from glow_core.importer import import_model
    from glow_core.ir.printer import format_function, to_dot

    wants_pipeline = bool(args.after or args.before or args.stats or args.lir)
    backend_name = args.backend or ("interpreter" if wants_pipeline else None)
    proto, _ = load_model_ref(args.model)
    shapes, names = _shapes(proto, shapes_from_args(args.input_shape))
    if names:
        print("// symbolic dims, imported at probe sizes " + ", ".join(f"{v}={k}" for k, v in names.items())
              + " and printed by name (sizes computed from them print as numbers)")
    if args.lir:
        import glow_core
        from glow_core.lir import format_lir
        from glow_core.lircompiler import lir_of

        print(format_lir(lir_of(glow_core.compile(proto, backend_name or "interpreter", shapes))))
        return 0
    fn = import_model(proto, shapes)
    if backend_name is not None:
        from glow_core.passes import PassContext, get_pass
        from glow_core.passes.stats import format_stats, optimize_with_stats
        from glow_core.plugin_host import get_backend

        for name in list(args.after) + list(args.before):
            get_pass(name)  # an unknown pass name fails with "choose one of: ..."
        ctx = PassContext(dump_after=frozenset(args.after), dump_before=frozenset(args.before))
        stats = optimize_with_stats(fn, get_backend(backend_name), ctx=ctx)
        for label, text in ctx.dumps:
            print(f"// {label}")
            print(text)
        if args.stats:
            print(format_stats(stats))
        if args.after or args.before or args.stats:
            if args.dot is not None:
                write_dot(to_dot(fn), args.dot)
            return 0
    if args.dot is not None:
        write_dot(to_dot(fn), args.dot)
    print(format_function(fn, names))
    if args.dot is not None:
        print(f"glow: wrote {args.dot}", file=sys.stderr)
    return 0


COMMAND = Command(
    name="dump",
    help="print a model's graph IR; --dot writes Graphviz DOT or SVG",
    description="Import MODEL and print its graph IR as text (Function.dump()). With --dot FILE, also write "
                "the graph as Graphviz DOT; a FILE ending in .svg is rendered with graphviz's 'dot' program.",
    epilog="examples:\n  glow dump zoo:squeezenet\n  glow dump model.onnx --dot model.dot\n"
           "  glow dump model.onnx --dot model.svg   # needs graphviz\n"
           "  glow dump zoo:resnet50 --stats\n  glow dump zoo:resnet50 --after fold-batchnorm\n"
           "  glow dump zoo:squeezenet --lir\n"
           "  glow dump bert.onnx --dim sequence=128   # symbolic dims print by name without it",
    add_arguments=add_arguments,
    run=run,
)
