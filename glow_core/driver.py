"""The compiler driver: one model argument -> a :class:`~glow_core.pipeline.CompiledNetwork`.

It chooses the route a model takes, then leaves the compile itself to :mod:`glow_core.pipeline`:

- ``devices=``: the runtime partitions the model over several devices (:mod:`glow_core.runtime.network`);
- a program-cache hit (:mod:`glow_core.compilecache`) is served before the model is even imported;
- a model with run-time control flow is split into stages (:mod:`glow_core.controlflow`);
- otherwise the model is imported and compiled by the pipeline, converted to int8 on the way when
  ``quantize=`` is given (:mod:`glow_core.quantization`).

``glow_core.api.compile`` (the public facade) and ``glow_core.onnx_backend`` call :func:`compile_model`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from glow_core import budget, compilecache, progress
from glow_core.controlflow import CompileTarget, compile_staged
from glow_core.errors import InputError, UnsupportedError
from glow_core.importer import load_model
from glow_core.importer.onnx_importer import OnnxImporter
from glow_core.importer.subgraphs import has_control_flow
from glow_core.pipeline import (
    CompiledNetwork,
    CompileStats,
    check_input_shapes,
    check_model_arg,
    check_threads,
    compile_function,
    compile_options,
)
from glow_core.plugin_host import get_backend
from glow_core.quantization.apply import quantize_prepared
from glow_core.runtime.network import compile_on_devices
from glow_sdk.backend import Backend


def compile_model(model: Any, backend: str, input_shapes: Any = None, *,
                  bind: Mapping[str, np.ndarray] | None = None, threads: int | None = None, debug: bool = False,
                  options: Mapping[str, Any] | None = None, devices: str | None = None,
                  quantize: Any = None) -> CompiledNetwork:
    """What ``glow_core.compile`` does (see its docstring): check the arguments, then pick the route."""
    if devices is not None and quantize is not None:
        raise InputError("quantize and devices cannot be combined yet", hint="quantize for one backend")
    with progress.stage(f"compiling {_label(model)}"):
        if devices is not None:
            return compile_on_devices(model, devices, input_shapes, bind=bind, threads=threads, options=options)
        model = check_model_arg(model)
        shapes = check_input_shapes(input_shapes)
        check_threads(threads)
        be = get_backend(backend)
        with budget.using(budget.current().with_options(options)):
            return _compile(model, be, shapes, bind, threads, debug, options, quantize)


def _label(model: Any) -> str:
    """How the progress line names the model: its path's file name, ``zoo:NAME``, or "the model"."""
    if isinstance(model, (str, os.PathLike)):
        return os.path.basename(os.fspath(model)) or os.fspath(model)
    return "the model"


def _compile(model: str | os.PathLike[str] | onnx.ModelProto, be: Backend, shapes: dict[str, Any] | None,
             bind: Mapping[str, np.ndarray] | None, threads: int | None, debug: bool,
             options: Mapping[str, Any] | None, quantize: Any) -> CompiledNetwork:
    t0 = time.perf_counter()
    copts = compile_options(threads=threads, debug=debug, extra=options)
    pkey, data = compilecache.program_key(model, be, copts, shapes) if bind is None and quantize is None \
        else (None, None)
    if pkey is not None:  # the program cache: served before the import (glow_core/compilecache.py)
        hit = compilecache.load(pkey, be, copts)
        if hit is not None:
            fn, exe, counts = hit
            stats = CompileStats(import_s=time.perf_counter() - t0, nodes_by_kind=counts)
            stats.backend_s = {**dict(getattr(exe, "compile_timings", None) or {}), "program": True}
            return CompiledNetwork(fn, exe, be, stats)
    with progress.stage("import"):
        proto, _ = load_model(model, data)  # (the bytes the key hashed: the file is read once)
    del data
    if has_control_flow(proto.graph):  # split at run-time control flow (docs/control-flow.md)
        if quantize is not None:
            raise UnsupportedError("int8 quantization of a model with If, Loop or Scan is not supported yet",
                                   hint="compile it without --quantize")
        target = CompileTarget(be, threads, debug, dict(options or {}), budget.current())
        return compile_staged(proto, target, shapes, bind)
    stats = CompileStats()
    with progress.stage("import"):
        fn = OnnxImporter(proto, shapes, bind).run()
    stats.import_s = time.perf_counter() - t0
    transform = None if quantize is None else (lambda f: quantize_prepared(f, be, quantize))
    net = compile_function(fn, be, stats, threads=threads, debug=debug, options=options, transform=transform)
    if pkey is not None:
        with progress.stage("cache write"):
            compilecache.store(pkey, be, net.function, net.executable, stats.nodes_by_kind, proto)
    return net
