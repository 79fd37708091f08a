"""``glow dump MODEL``: print the graph IR; ``--dot FILE`` writes Graphviz DOT (or SVG)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from glow_core.cli.common import Command, add_model_argument, add_shape_argument, load_model_ref, shapes_from_args
from glow_core.errors import GlowError

DOT_TIMEOUT_S = 300


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    add_shape_argument(p)
    p.add_argument("--dot", metavar="FILE", type=Path, default=None,
                   help="also write the graph as Graphviz DOT; FILE.svg renders SVG with graphviz's 'dot'")
    p.add_argument("-b", "--backend", metavar="NAME", default=None,
                   help="dump the graph as prepared (optimized and lowered) for this backend, "
                        "instead of as imported")


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


def run(args: argparse.Namespace) -> int:
    from glow_core.importer import import_model
    from glow_core.ir.printer import to_dot

    backend = None
    if args.backend is not None:
        from glow_core.plugin_host import get_backend

        backend = get_backend(args.backend)
    proto, _ = load_model_ref(args.model)
    fn = import_model(proto, shapes_from_args(args.input_shape) or None)
    if backend is not None:
        from glow_core.api import prepare_function

        fn = prepare_function(fn, backend)
    if args.dot is not None:
        write_dot(to_dot(fn), args.dot)
    print(fn.dump())
    if args.dot is not None:
        print(f"glow: wrote {args.dot}", file=sys.stderr)
    return 0


COMMAND = Command(
    name="dump",
    help="print a model's graph IR; --dot writes Graphviz DOT or SVG",
    description="Import MODEL and print its graph IR as text (Function.dump()). With --dot FILE, also write "
                "the graph as Graphviz DOT; a FILE ending in .svg is rendered with graphviz's 'dot' program.",
    epilog="examples:\n  glow dump zoo:squeezenet\n  glow dump model.onnx --dot model.dot\n"
           "  glow dump model.onnx --dot model.svg   # needs graphviz",
    add_arguments=add_arguments,
    run=run,
)
