"""Ahead-of-time bundles: write one with a backend (``write_bundle``), check one from Python (``load_bundle``).

A bundle (docs/bundles.md) is ``NAME.o`` (all code, one C entry point),
``NAME.h`` (the C API), ``NAME.weights.bin`` (unless the weights are embedded)
and ``NAME.json`` (the same facts as the header, for tools). The format is the
backend's (``Backend.save_bundle``); this module drives the core pipeline in
front of it, and runs a bundle for tests and for users who want to check one
before shipping it: the object is linked into a shared library with ``cc
-shared``, loaded with ctypes, and fed from 64-byte aligned areas, feeds being
checked first as ``CompiledNetwork.run`` checks them.

A model whose inputs keep symbolic dims (neither ``input_shapes`` nor its dims fix them) is bundled once for
every size within the symbols' bounds (docs/bundles.md, "Symbolic dims"): the function is prepared at the
bounds with its symbolic dims (``glow_core/pipeline/symbolic.py``, every symbol free), the backend gets the
symbols in ``BundleOptions.symbols`` (SDK 2.5, on a backend whose ``symbolic_bundles()`` is True), and the
bundle's entry takes their sizes as arguments.
``load_bundle`` infers them from the feeds' shapes.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from glow_core.errors import (
    BackendError,
    ExecutionError,
    GlowError,
    IndexRangeError,
    InputError,
    ModelError,
    UnsupportedError,
)
from glow_core.ir.types import ElemKind, TensorType
from glow_core.importer.onnx_importer import OnnxImporter, load_model
from glow_core.importer.symbols import DimBound, InputShapes, ModelSymbols, dims_of
from glow_core.ir.graph import Function
from glow_core.ir.symbolic import SymExpr, actual_shape, bind_symbols
from glow_core.pipeline import (
    CompiledNetwork,
    check_input_shapes,
    check_model_arg,
    check_support,
    check_threads,
    compile_options,
    guard_backend,
    pass_context,
    prepare_function,
    prepare_model,
)
from glow_core.pipeline.symbolic import DEFAULT_BOUNDS, SymbolicPlan, SymbolicRefused, default_env, prepare_symbolic
from glow_core.plugin_host import get_backend
from glow_core.quantization.apply import quantize_prepared
from glow_sdk.backend import Backend, BundleOptions, BundleSymbol

ALIGN = 64
#: ELF e_machine numbers of the targets people bundle for
ELF_MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv", 21: "ppc64", 8: "mips"}
#: what a bundle's entry returns when an index was out of range
INDEX_OUT_OF_RANGE = 1
_STATUS_TEXT = {INDEX_OUT_OF_RANGE: "an index input is out of range for its axis (Gather / Scatter / ... indices); "
                   "the outputs were not computed",
                2: "the bundle could not start its threads (pthread_create failed)",
                3: "an area given to the bundle is not aligned",
                4: "a symbol's size is out of its bounds or off its step; nothing was computed"}


# -- writing --------------------------------------------------------------------------------------------
def write_bundle(model: Any, backend: str, out_dir: str | os.PathLike[str], *, name: str | None = None,
                 target: str | None = None, cpu: str | None = None, features: str | None = None,
                 threads: int = 1, embed_weights: bool = False, weights_text: bool = False,
                 input_shapes: Mapping[str, Sequence[int]] | None = None, quantize: Any = None,
                 options: Mapping[str, Any] | None = None) -> list[Path]:
    """Import, optimize and lower ``model`` for ``backend``, then let the backend write its bundle (compiled for
    the symbolic dims ``input_shapes`` leaves open, within their bounds: :func:`symbolic_function`)."""
    check_threads(threads, optional=False)
    be = get_backend(backend)
    if type(be).save_bundle is Backend.save_bundle:  # say so before the whole pipeline runs
        raise UnsupportedError(f"backend '{be.name}' cannot write bundles",
                               hint="use a backend that can, such as cpu (glow backends lists them)")
    shapes = check_input_shapes(input_shapes)
    proto, _ = load_model(check_model_arg(model))
    symbols = ModelSymbols(proto, dims_of(shapes))
    open_inputs = symbols.open_inputs(shapes)
    entry_symbols: tuple[BundleSymbol, ...] = ()
    if open_inputs and not set(open_inputs) & set(symbols.structured):
        if quantize is not None:
            raise UnsupportedError("an int8 bundle needs every symbolic dimension fixed",
                                   hint=_fix_hint(symbols, open_inputs))
        fn, entry_symbols = symbolic_function(proto, be, symbols, shapes, options)
    else:
        fn = prepare_model(model, be, shapes, quantizable=quantize is not None)  # (re-read: external data)
    if quantize is not None:
        quantize_prepared(fn, be, quantize)
    check_support(fn, be)
    opts = BundleOptions(name=name or default_name(model), target=target, cpu=cpu, features=features,
                         threads=threads, embed_weights=embed_weights, weights_text=weights_text,
                         symbols=entry_symbols)
    with guard_backend(be.name, "to write the bundle", activity="writing the bundle"):
        try:
            return be.save_bundle(fn, compile_options(threads=threads, extra=options), opts, Path(out_dir))
        except OSError as e:
            raise BackendError(f"cannot write the bundle into '{out_dir}': {e}") from None


# -- symbolic dims ----------------------------------------------------------------------------------------
#: the smallest bound (in steps) a symbol is laid out for: the probe takes distinct odd primes below the bounds
_LAYOUT_MIN = 8


def _fix_hint(symbols: ModelSymbols, inputs: Sequence[str]) -> str:
    names = list(default_env(symbols))
    return (f"fix them with --dim NAME=N (e.g. --dim {names[0]}=1)" if names else "fix the inputs' shapes") + \
        " or --input-shape NAME=d1,d2,... (dims= / input_shapes= in Python): " + \
        "; ".join(f"{n} {symbols.inputs[n].describe()}" if n in symbols.inputs else n for n in inputs)


def bundle_plans(symbols: ModelSymbols) -> list[tuple[SymbolicPlan, tuple[BundleSymbol, ...]]]:
    """The plans a bundle of the open symbols is tried with, and the symbols' specs (the entry's arguments, in
    the order the symbols first appear in the inputs): every symbol free between its minimum (at least 1) and
    its maximum, in multiples of its ``multiple_of``; a symbol without a maximum is tried at each of
    :data:`DEFAULT_BOUNDS` (the largest the model imports at wins), as ``compile`` does. The layout's bound is
    at least :data:`_LAYOUT_MIN` steps, so that the probe finds distinct sizes below it."""
    out = []
    for default in DEFAULT_BOUNDS:
        free, lows, steps, spec = [], [], [], []
        for s in default_env(symbols):
            want = symbols.dims.get(s)
            bound = want if isinstance(want, DimBound) else DimBound()
            m = max(1, bound.multiple_of)
            hi = (bound.max if bound.max is not None else default) // m * m
            lo = -(-max(1, bound.min) // m) * m
            if hi < lo:
                raise InputError(f"symbol '{s}' has no size in its bound {bound.min}..{bound.max}"
                                 + (f" that is a multiple of {m}" if m > 1 else ""), hint="widen the bound (--dim)")
            free.append((s, max(hi, _LAYOUT_MIN * m)))  # (laid out for more than the entry accepts)
            lows.append((s, lo // m))
            if m > 1:
                steps.append((s, m))
            spec.append(BundleSymbol(s, f"{s}/{m}" if m > 1 else s, lo, hi, m))
        plan = SymbolicPlan(tuple(free), lows=tuple(lows), steps=tuple(steps))
        if all(p != plan for p, _ in out):
            out.append((plan, tuple(spec)))
    return out


def symbolic_function(proto: Any, be: Backend, symbols: ModelSymbols, shapes: InputShapes | None,
                      options: Mapping[str, Any] | None) -> tuple[Function, tuple[BundleSymbol, ...]]:
    """The function of a bundle for the model's open symbols, prepared at their bounds with its symbolic dims
    (``glow_core/pipeline/symbolic.py``), and the entry's symbol arguments (``BundleOptions.symbols``)."""
    open_inputs = symbols.open_inputs(shapes)
    if not be.symbolic_bundles() or not be.symbolic_kinds():
        raise UnsupportedError(f"backend '{be.name}' writes bundles for fixed shapes only, and input(s) "
                               f"{', '.join(repr(n) for n in open_inputs)} have symbolic dimensions",
                               hint=_fix_hint(symbols, open_inputs))
    given = dict(shapes or {})
    fixed = {k: v for k, v in symbols.dims.items() if isinstance(v, int)}  # (the bounds: the entry checks them)

    def prepare(spec: dict[str, tuple[int, ...]]) -> Function:
        fn = OnnxImporter(proto, InputShapes({**given, **spec}, fixed), None).run()
        return prepare_function(fn, be, ctx=pass_context(be, options=options))

    why = ""
    for plan, spec in bundle_plans(symbols):
        try:
            return prepare_symbolic(symbols, plan, prepare, be.symbolic_kinds()), spec
        except SymbolicRefused as e:
            why = str(e)
            if e.final or e.stepped:
                break
    raise UnsupportedError(f"the model cannot be bundled for symbolic dims: {why}",
                           hint=_fix_hint(symbols, open_inputs))


def default_name(model: Any) -> str:
    """``zoo:resnet50`` -> ``resnet50``, ``path/my-net.onnx`` -> ``my_net``: a C identifier."""
    import re

    stem = str(model).removeprefix("zoo:") if isinstance(model, str) else "model"
    stem = Path(stem).stem if isinstance(model, (str, os.PathLike)) else stem
    ident = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "model"
    return ident if not ident[0].isdigit() and not ident.startswith("glow_") else f"m_{ident}"


# -- ELF -----------------------------------------------------------------------------------------------
@dataclass
class ElfInfo:
    machine: int
    machine_name: str
    bits: int
    #: the names of undefined symbols
    undefined: list[str]
    #: the names of defined global (exported) symbols
    exported: list[str]


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """The machine and the undefined and exported symbols of an ELF object (32/64-bit, either byte order)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or len(data) < 52:
        raise ModelError(f"'{path}' is not an ELF object file")
    bits = 64 if data[4] == 2 else 32
    end = "<" if data[5] == 1 else ">"
    machine = struct.unpack_from(end + "H", data, 18)[0]
    if bits == 64:
        shoff, = struct.unpack_from(end + "Q", data, 40)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 58)
    else:
        shoff, = struct.unpack_from(end + "I", data, 32)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 46)
    sections = []
    for i in range(shnum):
        at = shoff + i * shentsize
        if bits == 64:
            _n, typ, _f, _a, off, size, link, _i, _al, entsize = struct.unpack_from(end + "IIQQQQIIQQ", data, at)
        else:
            _n, typ, _f, _a, off, size, link, _i, _al, entsize = struct.unpack_from(end + "IIIIIIIIII", data, at)
        sections.append((typ, off, size, link, entsize))
    undefined: list[str] = []
    exported: list[str] = []
    for typ, off, size, link, entsize in sections:
        if typ != 2:  # SHT_SYMTAB
            continue
        str_off = sections[link][1]
        for k in range(1, size // entsize):
            at = off + k * entsize
            if bits == 64:
                name, info, _o, shndx = struct.unpack_from(end + "IBBH", data, at)
            else:
                name, _v, _s, info, _o, shndx = struct.unpack_from(end + "IIIBBH", data, at)
            text = data[str_off + name:data.index(b"\0", str_off + name)].decode()
            if not text:
                continue
            if shndx == 0:
                undefined.append(text)
            elif info >> 4 in (1, 2) and info & 0xF != 4:  # global / weak, not a file symbol
                exported.append(text)
    return ElfInfo(machine, ELF_MACHINES.get(machine, str(machine)), bits, sorted(set(undefined)), sorted(exported))


# -- loading --------------------------------------------------------------------------------------------
def _aligned(nbytes: int) -> np.ndarray:
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes]


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class LoadedBundle:
    """A bundle linked into a shared library and loaded into this process; ``run(feeds)`` -> outputs."""

    def __init__(self, directory: Path, manifest: dict[str, Any], library: Path) -> None:
        self.directory = directory
        self.manifest = manifest
        self.name: str = manifest["name"]
        self._lib = ctypes.CDLL(str(library))
        self._entry = getattr(self._lib, self.name)
        self._entry.restype = ctypes.c_int
        #: the symbols of a bundle compiled for symbolic dims (the entry's arguments after the areas, in order)
        self.symbols: list[dict[str, Any]] = list(manifest.get("symbols") or ())
        self._entry.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * len(self.symbols)
        self.input_types: dict[str, TensorType] = {}
        self.output_names: list[str] = []
        self._io: list[tuple[dict[str, Any], TensorType]] = []
        for io in manifest["io"]:
            t = TensorType(ElemKind.from_dtype(_dtype(io["dtype"])), tuple(io["shape"]))
            if "dims" in io:
                t = t.with_sym(tuple(None if isinstance(d, int) else SymExpr.parse(d) for d in io["dims"]))
            self._io.append((io, t))
            if io["role"] == "input":
                self.input_types[io["name"]] = t
            else:
                self.output_names.append(io["name"])
        if manifest["weights_embedded"]:
            self._const = _aligned(ALIGN)
        else:
            wpath = directory / f"{self.name}.weights.bin"
            if not wpath.is_file() or wpath.stat().st_size != manifest["constant_mem_size"]:
                raise ModelError(f"'{wpath}' is missing or is not {manifest['constant_mem_size']} bytes",
                                 hint="write the bundle again with glow bundle")
            self._const = _aligned(manifest["constant_mem_size"])
            self._const[:] = np.fromfile(wpath, dtype=np.uint8)
        self._mutable = _aligned(max(manifest["mutable_mem_size"], 1))
        self._acts = _aligned(max(manifest["activations_mem_size"], 1))

    # the checks of ``CompiledNetwork.run`` (names, dtypes, shapes), before native code sees anything
    check_feeds = CompiledNetwork.check_feeds
    _fast_feeds = CompiledNetwork._fast_feeds
    _expected = None
    describe_inputs = CompiledNetwork.describe_inputs
    _check_one = staticmethod(CompiledNetwork._check_one)
    _strided = False  # (the entry reads contiguous feeds)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run once on ``feeds`` (a symbolic bundle: at any shape its symbols' bounds allow)."""
        self._check_bounds(feeds)
        checked = self.check_feeds(feeds)
        env, values = self.symbol_values(checked)
        for io, _t in self._io:
            if io["role"] == "input":
                raw = np.ascontiguousarray(checked[io["name"]]).reshape(-1).view(np.uint8)
                self._mutable[io["offset"]:io["offset"] + raw.size] = raw  # (dense: the entry lays it out)
        rc = self.call(values)
        if rc == INDEX_OUT_OF_RANGE:
            raise self._index_error()
        if rc != 0:
            raise ExecutionError(f"bundle {self.name}: " + _STATUS_TEXT.get(rc, f"status {rc}"))
        out: dict[str, np.ndarray] = {}
        for io, t in self._io:
            if io["role"] != "input":
                shape = actual_shape(t, env)
                nbytes = int(np.prod(shape, dtype=np.int64)) * t.dtype.itemsize
                data = self._mutable[io["offset"]:io["offset"] + nbytes].copy()
                out[io["name"]] = data.view(t.dtype).reshape(shape)
        return out

    def call(self, symbols: Sequence[int] = ()) -> int:
        """The entry's status for one call on the bundle's areas as they are, with these symbol values (no
        check here: the entry checks them itself)."""
        return int(self._entry(self._const.ctypes.data, self._mutable.ctypes.data, self._acts.ctypes.data,
                               *[int(v) for v in symbols]))

    def _check_bounds(self, feeds: Mapping[str, Any]) -> None:
        """An input axis sized by a symbol must be within the symbol's bound (the layout may be larger)."""
        by = {s["symbol"]: s for s in self.symbols}
        for name, t in self.input_types.items():
            shape = getattr(feeds.get(name) if isinstance(feeds, Mapping) else None, "shape", None)
            if shape is None or len(shape) != t.rank:
                continue  # (check_feeds reports it)
            for k, e in enumerate(t.sym or ()):
                if e is None or len(e.terms) != 1 or len(e.terms[0][0]) != 1 or e.terms[0][0][0] not in by:
                    continue
                (sym,), c = e.terms[0]
                s, size = by[sym], int(shape[k])
                if size % c == 0 and not s["min"] <= size // c * s["step"] <= s["max"]:
                    raise InputError(f"input '{name}' has {size} at axis {k} (symbol '{s['name']}'), outside its "
                                     f"bound {s['min']}..{s['max']} in bundle {self.name}",
                                     hint="feed sizes within the bound the bundle was written for "
                                          "(glow bundle --dim NAME=LO:HI)")

    def symbol_values(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, int], list[int]]:
        """The symbols the feeds' shapes give (as ``DynamicNetwork.run`` infers them), checked against their
        bounds and steps: the function's symbols (sizes over steps) and the entry's arguments."""
        if not self.symbols:
            return {}, []
        env = bind_symbols(self.input_types, feeds)
        values = []
        for s in self.symbols:
            v = env.get(s["symbol"])
            if v is None:
                raise InputError(f"bundle {self.name}: no input gives the size of symbol '{s['name']}'")
            v *= s["step"]
            if not s["min"] <= v <= s["max"]:
                raise InputError(f"bundle {self.name}: symbol '{s['name']}' is {v} in these inputs, outside its "
                                 f"bound {s['min']}..{s['max']}", hint="feed sizes within the bound the bundle "
                                 "was written for (glow bundle --dim NAME=LO:HI)")
            values.append(v)
        return env, values


    def _index_error(self) -> IndexRangeError:
        """The error of a run that returned GLOW_BUNDLE_INDEX_OUT_OF_RANGE, naming the node from the manifest
        (``NAME_error_node()``: bundles written before it name none)."""
        where = ""
        error_node = getattr(self._lib, f"{self.name}_error_node", None)
        if error_node is not None:
            error_node.restype = ctypes.c_int
            where = self.manifest.get("index_checks", {}).get(str(error_node()), "")
        text = _STATUS_TEXT[INDEX_OUT_OF_RANGE]
        if where:
            text = f"an index is out of range for its axis in {where}; the outputs were not computed"
            fed = [n for n in self.input_types if f"'{n}'" in where.partition("come from")[2]]
            if len(fed) == 1:
                return IndexRangeError(f"bundle {self.name}: {text}", hint=f"check the values of input '{fed[0]}'")
        return IndexRangeError(f"bundle {self.name}: {text}", hint="check the index inputs")


def _host_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def _check_runnable(manifest: dict[str, Any], directory: Path) -> None:
    arch = manifest["triple"].split("-")[0]
    if arch != _host_arch():
        raise BackendError(f"bundle {manifest['name']} in '{directory}' was built for {manifest['triple']}; "
                           f"this machine is {_host_arch()}", hint="load_bundle runs bundles built for the host")
    if arch == "x86_64":
        import llvmlite.binding as llvm

        host = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
        want = {f[1:] for f in manifest["features"].split(",") if f.startswith("+")}
        missing = sorted(want - host)
        if missing:
            raise BackendError(f"bundle {manifest['name']} uses CPU features this machine lacks: "
                               f"{', '.join(missing[:8])}", hint="bundle it again with --cpu / --features for this CPU")


def load_bundle(directory: str | os.PathLike[str], name: str | None = None, *, cc: str | None = None) -> LoadedBundle:
    """Link the bundle in ``directory`` into a shared library (``cc -shared``) and load it.

    ``name`` picks the bundle when the folder holds several. Needs a C compiler (``$CC`` or ``cc``).
    """
    d = Path(directory)
    manifests = sorted(d.glob("*.json")) if name is None else [d / f"{name}.json"]
    manifests = [m for m in manifests if m.is_file() and (m.with_suffix(".o")).is_file()]
    if len(manifests) != 1:
        raise ModelError(f"'{d}' holds {len(manifests)} bundles (NAME.json with NAME.o)"
                         + ("" if name is None else f" named {name}"), hint="pass the bundle's folder (and name)")
    try:
        manifest = json.loads(manifests[0].read_text())
        if manifest.get("format") not in (1, 2):
            raise ValueError(f"unknown format {manifest.get('format')!r}")
    except (ValueError, OSError) as e:
        raise ModelError(f"'{manifests[0]}' is not a bundle manifest: {e}") from None
    _check_runnable(manifest, d)
    compiler = cc or os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        raise BackendError(f"load_bundle needs a C compiler to link the object; '{compiler}' was not found",
                           hint="install gcc or clang, or set CC")
    tmp = Path(tempfile.mkdtemp(prefix="glow-bundle-"))
    lib = tmp / f"lib{manifest['name']}.so"
    cmd = [compiler, "-shared", "-o", str(lib), str(manifests[0].with_suffix(".o")), "-lm", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BackendError(f"linking the bundle failed ({' '.join(cmd)}): {proc.stderr.strip()[:500]}")
    try:
        return LoadedBundle(d, manifest, lib)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the loaded library stays mapped


__all__ = ["ElfInfo", "LoadedBundle", "default_name", "load_bundle", "read_elf", "write_bundle"]
