"""Ahead-of-time bundles: write one with a backend (``write_bundle``), check one from Python (``load_bundle``).

A bundle (docs/bundles.md) is ``NAME.o`` (all code, one C entry point),
``NAME.h`` (the C API), ``NAME.weights.bin`` (unless the weights are embedded)
and ``NAME.json`` (the same facts as the header, for tools). The format is the
backend's (``Backend.save_bundle``); this module drives the core pipeline in
front of it, and runs a bundle for tests and for users who want to check one
before shipping it: the object is linked into a shared library with ``cc
-shared``, loaded with ctypes, and fed from 64-byte aligned areas, feeds being
checked first as ``CompiledNetwork.run`` checks them.
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
from glow_core.pipeline import (
    CompiledNetwork,
    check_support,
    check_threads,
    compile_options,
    guard_backend,
    prepare_model,
)
from glow_core.plugin_host import get_backend
from glow_core.quantization.apply import quantize_prepared
from glow_sdk.backend import Backend, BundleOptions

ALIGN = 64
#: ELF e_machine numbers of the targets people bundle for
ELF_MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv", 21: "ppc64", 8: "mips"}
#: what a bundle's entry returns when an index was out of range
INDEX_OUT_OF_RANGE = 1
_STATUS_TEXT = {INDEX_OUT_OF_RANGE: "an index input is out of range for its axis (Gather / Scatter / ... indices); "
                   "the outputs were not computed",
                2: "the bundle could not start its threads (pthread_create failed)",
                3: "an area given to the bundle is not aligned"}


# -- writing --------------------------------------------------------------------------------------------
def write_bundle(model: Any, backend: str, out_dir: str | os.PathLike[str], *, name: str | None = None,
                 target: str | None = None, cpu: str | None = None, features: str | None = None,
                 threads: int = 1, embed_weights: bool = False, weights_text: bool = False,
                 input_shapes: Mapping[str, Sequence[int]] | None = None, quantize: Any = None,
                 options: Mapping[str, Any] | None = None) -> list[Path]:
    """Import, optimize and lower ``model`` for ``backend``, then let the backend write its bundle."""
    check_threads(threads, optional=False)
    be = get_backend(backend)
    if type(be).save_bundle is Backend.save_bundle:  # say so before the whole pipeline runs
        raise UnsupportedError(f"backend '{be.name}' cannot write bundles",
                               hint="use a backend that can, such as cpu (glow backends lists them)")
    fn = prepare_model(model, be, input_shapes, quantizable=quantize is not None)
    if quantize is not None:
        quantize_prepared(fn, be, quantize)
    check_support(fn, be)
    opts = BundleOptions(name=name or default_name(model), target=target, cpu=cpu, features=features,
                         threads=threads, embed_weights=embed_weights, weights_text=weights_text)
    with guard_backend(be.name, "to write the bundle", activity="writing the bundle"):
        try:
            return be.save_bundle(fn, compile_options(threads=threads, extra=options), opts, Path(out_dir))
        except OSError as e:
            raise BackendError(f"cannot write the bundle into '{out_dir}': {e}") from None


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
        self._entry.argtypes = [ctypes.c_void_p] * 3
        self.input_types: dict[str, TensorType] = {}
        self.output_names: list[str] = []
        self._io: list[tuple[dict[str, Any], TensorType]] = []
        for io in manifest["io"]:
            t = TensorType(ElemKind.from_dtype(_dtype(io["dtype"])), tuple(io["shape"]))
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

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        checked = self.check_feeds(feeds)
        for io, _t in self._io:
            if io["role"] == "input":
                raw = np.ascontiguousarray(checked[io["name"]]).reshape(-1).view(np.uint8)
                self._mutable[io["offset"]:io["offset"] + io["size"]] = raw
        rc = self._entry(self._const.ctypes.data, self._mutable.ctypes.data, self._acts.ctypes.data)
        if rc == INDEX_OUT_OF_RANGE:
            raise self._index_error()
        if rc != 0:
            raise ExecutionError(f"bundle {self.name}: " + _STATUS_TEXT.get(rc, f"status {rc}"))
        out: dict[str, np.ndarray] = {}
        for io, t in self._io:
            if io["role"] != "input":
                data = self._mutable[io["offset"]:io["offset"] + io["size"]].copy()
                out[io["name"]] = data.view(t.dtype).reshape(t.shape)
        return out


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
        if manifest.get("format") != 1:
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
