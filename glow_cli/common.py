"""Shared pieces of the ``glow`` subcommands.

A subcommand is a :class:`Command` record (name, help, an argument-adding
function and a run function) listed in the table of ``glow_cli.main``.
This module also holds what several commands need: model references
(paths and ``zoo:NAME``), ``--input`` / ``--input-shape`` parsing, ``.npy``
loading with clear errors, and random inputs of the right type.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import numpy as np
import onnx

from glow_core import zoo
from glow_core.errors import GlowError, ImportShapeError, InputError
from glow_core.ir.types import TensorType

if TYPE_CHECKING:  # (imported where used: the importer is not loaded to parse the command line)
    from glow_core.importer.symbols import DimBound, InputShapes


class UsageError(Exception):
    """Bad command-line syntax: reported in one line, exit code 2."""

    def __init__(self, message: str, prog: str = "glow") -> None:
        super().__init__(message)
        self.prog = prog


#: namespace attribute naming the innermost (sub)command parsed so far, for usage errors found after it
USAGE_PROG_ATTR = "_usage_prog"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (raised, then printed by ``main``).

    Every parser of the ``glow`` tree is a ``Parser`` (subparsers inherit the
    class), so every argparse error becomes a :class:`UsageError` naming the
    (sub)command it belongs to. Unrecognized arguments are found by the
    top-level parser after the subcommand has parsed; ``main`` stores each
    subcommand's ``prog`` in the namespace (:data:`USAGE_PROG_ATTR`) so that
    ``glow dump X --bogus`` reports ``glow dump: error: ...`` like every other
    usage error of ``glow dump``.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = getattr(ns, USAGE_PROG_ATTR, self.prog)
            raise UsageError(f"unrecognized arguments: {' '.join(extras)}", prog)
        return ns


def subcommand_parsers(parser: argparse.ArgumentParser,
                       path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every subcommand parser under ``parser``, depth first: ``(("sdk", "info"), <parser>)``, ...

    Nested subcommands (``glow sdk new-backend``) are included; the order is the
    order in which ``glow --help`` lists them.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from subcommand_parsers(sub, (*path, name))


@dataclass(frozen=True)
class Command:
    """One ``glow`` subcommand: the CLI's table is a list of these."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    epilog: str = ""


# -- option value types (argparse ``type=``: bad syntax is a usage error) -------
def shape_spec(text: str) -> tuple[str, tuple[int, ...]]:
    """``name=1,3,224,224`` -> ``("name", (1, 3, 224, 224))``."""
    from glow_core.importer.onnx_importer import parse_shape_spec

    try:
        return parse_shape_spec(text)
    except GlowError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def input_spec(text: str) -> tuple[str, Path]:
    """``name=file.npy`` -> ``("name", Path("file.npy"))``."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"'{text}' is not of the form NAME=FILE.npy")
    return name, Path(path)


def range_spec(text: str) -> tuple[str, tuple[float, float]]:
    """``name=0:2`` -> ``("name", (0.0, 2.0))``: the range of random values of an input (LO < HI)."""
    name, sep, rng = text.partition("=")
    lo_text, colon, hi_text = rng.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo = hi = float("nan")
    if not sep or not name or not colon or not lo < hi:
        raise argparse.ArgumentTypeError(f"'{text}' is not of the form NAME=LO:HI with numbers LO < HI")
    return name, (lo, hi)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_model_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help=f"an .onnx file, or zoo:NAME: a model trained and shipped with glow "
                        f"({', '.join(sorted(zoo.TRAINED))}) or a light model shipped with onnx "
                        f"({', '.join(sorted(zoo.MODELS))})")


@dataclass(frozen=True)
class DimArg:
    """One ``--dim NAME=N`` (a size) or ``--dim NAME=LO:HI`` (a bound; HI may be empty)."""

    name: str
    value: "int | DimBound"


def dim_spec(text: str) -> DimArg:
    """``sequence=128`` -> ``DimArg("sequence", 128)``; ``sequence=1:512`` -> a :class:`DimBound`."""
    from glow_core.importer.symbols import DimBound

    name, sep, value = text.partition("=")
    lo, colon, hi = value.partition(":")
    try:
        if not sep or not name or not value:
            raise ValueError
        if colon:
            return DimArg(name, DimBound(int(lo or 0), int(hi) if hi else None))
        size = int(value)
        if size < 0:
            raise ValueError
        return DimArg(name, size)
    except (ValueError, GlowError):
        raise argparse.ArgumentTypeError(f"'{text}' is not of the form NAME=N (a size >= 0) or NAME=LO:HI "
                                         "(a bound)") from None


def add_precision_argument(p: argparse.ArgumentParser) -> None:
    """``--precision fp32|bf16`` (``glow_core.compile(..., precision=...)``; docs/performance.md, "bf16")."""
    p.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                   help="bf16: GEMM weights and operands in bfloat16 with float32 sums (cpu backend); "
                        "default fp32")


def add_shape_argument(p: argparse.ArgumentParser) -> None:
    """``--input-shape`` and ``--dim`` (both land in ``args.input_shape``; :func:`shapes_from_args` splits them)."""
    p.add_argument("--input-shape", metavar="NAME=D1,D2,...", action="append", type=shape_spec, default=[],
                   help="fix the shape of an input with symbolic or unknown dimensions (repeatable)")
    p.add_argument("--dim", metavar="NAME=N", action="append", type=dim_spec, dest="input_shape",
                   help="fix the symbolic dimension NAME to N in every input that names it, or bound it with "
                        "NAME=LO:HI (repeatable; docs/dynamic-shapes.md)")


def shapes_from_args(specs: Sequence[tuple[str, tuple[int, ...]] | DimArg]) -> "InputShapes":
    """The ``input_shapes`` argument of ``--input-shape`` and ``--dim`` (the dims travel with it)."""
    from glow_core.importer.symbols import InputShapes

    out = InputShapes()
    for spec in specs:
        if isinstance(spec, DimArg):
            if spec.name in out.dims and out.dims[spec.name] != spec.value:
                raise ImportShapeError(f"--dim gives two values for '{spec.name}': {out.dims[spec.name]} and "
                                       f"{spec.value}")
            out.dims[spec.name] = spec.value
            continue
        name, shape = spec
        if name in out and out[name] != shape:
            raise ImportShapeError(f"--input-shape gives two shapes for '{name}': {list(out[name])} and {list(shape)}")
        out[name] = shape
    return out


def require_sizes(proto: onnx.ModelProto, shapes: "Mapping[str, Any] | None", need: str, more: str = "") -> None:
    """For a command that needs one shape of a model (random inputs, one printed plan): an ImportShapeError naming
    the inputs whose symbolic or unknown dimensions neither --input-shape nor --dim fixes, and those flags.
    ``need``: what needs the sizes; ``more``: another way out, appended to the hint."""
    from glow_core.importer.symbols import ModelSymbols, dims_of

    symbols = ModelSymbols(proto, dims_of(shapes))
    open_inputs = symbols.open_inputs(shapes)
    if open_inputs:
        shown = [f"{n} {symbols.inputs[n].describe()}" if n in symbols.inputs else n for n in open_inputs]
        raise ImportShapeError(
            "input(s) with symbolic or unknown dimensions: " + "; ".join(shown),
            hint=f"{need}: --dim SYMBOL=N (every input that names it) or --input-shape NAME=d1,d2,...{more}")


# -- models --------------------------------------------------------------------
def load_model_ref(ref: str) -> tuple[onnx.ModelProto, str]:
    """Load a model named on the command line; returns it and a label for messages."""
    from glow_core.importer import load_model

    path = zoo.resolve(ref) if zoo.is_zoo_ref(ref) else Path(ref)
    label = f"{ref} ({path})" if zoo.is_zoo_ref(ref) else str(path)
    if path.is_dir():
        raise GlowError(f"'{path}' is a directory, not an ONNX model file")
    proto, _ = load_model(path)
    return proto, label


def model_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: graph inputs that are not initializers (IR v3 models list both)."""
    inits = {t.name for t in proto.graph.initializer}
    return [i for i in proto.graph.input if i.name not in inits]


def has_static_shape(vi: onnx.ValueInfoProto) -> bool:
    tt = vi.type.tensor_type
    return tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)


# -- input arrays ----------------------------------------------------------------
#: the first bytes of a .npy file and of an .npz (zip) archive
NPY_MAGIC, NPZ_MAGIC = b"\x93NUMPY", b"PK\x03\x04"


def load_array(name: str, path: Path) -> np.ndarray:
    """Read the ``.npy`` (or single-array ``.npz``) file given for input ``name``."""
    if not path.exists():
        raise InputError(f"input file '{path}' (for input '{name}') does not exist", hint="check the path")
    if path.is_dir():
        raise InputError(f"input file '{path}' (for input '{name}') is a directory")
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as e:
        raise InputError(f"cannot read '{path}' (for input '{name}'): {e.strerror or e}") from None
    if not head.startswith((NPY_MAGIC, NPZ_MAGIC)):
        raise InputError(f"'{path}' (for input '{name}') is not a numpy .npy or .npz file: it starts with "
                         f"{head!r}, not {NPY_MAGIC!r} (.npy) or {NPZ_MAGIC!r} (.npz)",
                         hint="save arrays with numpy.save")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001  (numpy raises assorted errors on bad files)
        raise InputError(f"'{path}' (for input '{name}') is truncated or corrupt: {type(e).__name__}: {e}",
                         hint="save it again with numpy.save") from None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            keys = list(loaded.keys())
            if len(keys) != 1:
                raise InputError(f"'{path}' (for input '{name}') holds {len(keys)} arrays; give a .npy file "
                                 "or an .npz with exactly one array")
            loaded = loaded[keys[0]]
    arr = np.asarray(loaded)
    if arr.dtype == object:
        raise InputError(f"'{path}' (for input '{name}') holds Python objects, not numbers")
    return arr


def check_array(name: str, path: Path, arr: np.ndarray, want: TensorType, from_option: bool = False) -> np.ndarray:
    """A one-line error when an array read from ``path`` does not fit input ``name``; ``from_option``: its
    shape was fixed with ``--input-shape``."""
    if arr.dtype != want.dtype:
        raise InputError(
            f"input '{name}' from '{path}' has dtype {arr.dtype}, the model expects {want}",
            hint=f"save it with .astype(numpy.{want.dtype})",
        )
    if tuple(arr.shape) != want.shape:
        raise InputError(
            f"input '{name}' from '{path}' has shape {fmt_shape(arr.shape)}, the model expects {want}",
            hint=f"--input-shape {name}=... fixed that shape: drop it or make it match the file" if from_option
            else f"save an array of shape {fmt_shape(want.shape)}",
        )
    return arr


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | str] | None:
    """An input's declared dimensions: numbers, symbols (``"N"``) or ``"?"``; None when it declares no shape."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def check_declared(name: str, path: Path, arr: np.ndarray, vi: onnx.ValueInfoProto) -> None:
    """A one-line error naming the file when an array's rank or a fixed dimension differs from what the model
    declares for input ``name`` (before anything is compiled)."""
    dims = declared_dims(vi)
    if dims is None:
        return
    fits = len(dims) == arr.ndim and all(not isinstance(d, int) or d == n for d, n in zip(dims, arr.shape))
    if not fits:
        elem = vi.type.tensor_type.elem_type
        shown = (onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "") + \
            "[" + ",".join(str(d) for d in dims) + "]"
        raise InputError(f"input '{name}' from '{path}' has shape {fmt_shape(arr.shape)} (rank {arr.ndim}); the "
                         f"model expects {shown} (rank {len(dims)})",
                         hint=f"save an array of rank {len(dims)} with the model's fixed dimensions")


# -- printing ----------------------------------------------------------------------
def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.1f} ms" if ms < 1e4 else f"{seconds:.2f} s"


def fmt_num(x: float | np.generic) -> str:
    v = float(x)
    if np.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"


def warn(message: str, stream: TextIO | None = None) -> None:
    print(f"glow: warning: {message}", file=stream or sys.stderr)


def note(message: str, stream: TextIO | None = None) -> None:
    print(f"glow: {message}", file=stream or sys.stderr)
