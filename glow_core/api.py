"""The Python API: ``glow_core.compile(model, backend=...)`` -> CompiledNetwork."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from glow_core.errors import InputError, UnsupportedError
from glow_core.importer import import_model
from glow_core.ir.graph import Function, Node
from glow_core.ir.types import ElemKind, TensorType
from glow_core.plugin_host import get_backend
from glow_sdk.backend import Backend, CompiledFunction, CompileOptions


@dataclass
class CompileStats:
    import_s: float = 0.0
    optimize_s: float = 0.0
    backend_compile_s: float = 0.0
    nodes_by_kind: dict[str, int] = field(default_factory=dict)


def check_support(function: Function, backend: Backend) -> None:
    """Report every node the backend cannot run, all at once."""
    bad: dict[str, list[Node]] = {}
    for node in function.nodes:
        if not backend.supports(node):
            elems = "/".join(sorted({v.type.elem.value for v in node.inputs if v is not None} or {"-"}))
            bad.setdefault(f"{node.kind.name}({elems})", []).append(node)
    if bad:
        parts = []
        for key, nodes in sorted(bad.items()):
            names = ", ".join(n.origin or n.name for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
            parts.append(f"{key} x{len(nodes)} [{names}]")
        raise UnsupportedError(
            f"backend '{backend.name}' cannot run {sum(len(v) for v in bad.values())} node(s): " + "; ".join(parts),
            hint="choose another backend",
        )


class CompiledNetwork:
    """A model compiled for one backend. ``run`` checks feeds before executing."""

    def __init__(self, function: Function, executable: CompiledFunction, backend: Backend, stats: CompileStats) -> None:
        self.function = function
        self.executable = executable
        self.backend = backend
        self.stats = stats
        self.input_types: dict[str, TensorType] = {p.name: p.type for p in function.inputs}
        self.output_names: list[str] = [n for n, _ in function.outputs]
        self._lock = threading.Lock()

    def check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InputError(f"run() takes a dict of input name -> numpy array, got {type(feeds).__name__}")
        missing = [n for n in self.input_types if n not in feeds]
        unknown = [n for n in feeds if n not in self.input_types]
        expected = ", ".join(f"{n}: {t}" for n, t in self.input_types.items()) or "(none)"
        if missing or unknown:
            what = []
            if missing:
                what.append("missing input(s) " + ", ".join(missing))
            if unknown:
                what.append("unknown input(s) " + ", ".join(map(str, unknown)))
            raise InputError("; ".join(what) + f"; the network takes {expected}")
        out: dict[str, np.ndarray] = {}
        for name, t in self.input_types.items():
            a = feeds[name]
            if not isinstance(a, np.ndarray):
                if np.isscalar(a) or isinstance(a, (list, tuple)):
                    a = np.asarray(a)
                else:
                    raise InputError(f"input '{name}' must be a numpy array, got {type(a).__name__}")
                if a.dtype != t.dtype and a.dtype.kind == np.dtype(t.dtype).kind:
                    a = a.astype(t.dtype)
            if a.dtype != t.dtype:
                raise InputError(f"input '{name}' has dtype {a.dtype}, expected {t.dtype} ({t})",
                                 hint=f"convert it with .astype(numpy.{t.dtype})")
            if tuple(a.shape) != t.shape:
                raise InputError(f"input '{name}' has shape {list(a.shape)}, expected {list(t.shape)}",
                                 hint="recompile with input_shapes=... for another shape")
            out[name] = np.ascontiguousarray(a)
        return out

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        checked = self.check_feeds(feeds)
        return self.executable.execute(checked)


def compile(
    model: str | os.PathLike[str] | onnx.ModelProto,
    backend: str = "interpreter",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    bind: Mapping[str, np.ndarray] | None = None,
    threads: int | None = None,
    debug: bool = False,
    options: Mapping[str, Any] | None = None,
) -> CompiledNetwork:
    """Import an ONNX model (path or ModelProto) and compile it for ``backend``."""
    be = get_backend(backend)
    stats = CompileStats()
    t0 = time.perf_counter()
    fn = import_model(model, input_shapes, bind)
    stats.import_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    fn = prepare_function(fn, be, debug=debug)
    stats.optimize_s = time.perf_counter() - t1
    stats.nodes_by_kind = fn.count_by_kind()
    check_support(fn, be)
    t2 = time.perf_counter()
    exe = be.compile(fn, CompileOptions(threads=threads, debug=debug, extra=dict(options or {})))
    stats.backend_compile_s = time.perf_counter() - t2
    return CompiledNetwork(fn, exe, be, stats)


def prepare_function(fn: Function, backend: Backend, debug: bool = False) -> Function:
    """Graph optimization and lowering for a backend (the middle of the pipeline)."""
    if debug:
        fn.verify()
    return fn


__all__ = ["CompiledNetwork", "CompileStats", "ElemKind", "compile", "check_support"]
