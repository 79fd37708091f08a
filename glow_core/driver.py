"""The compiler driver: one model argument -> a :class:`~glow_core.pipeline.CompiledNetwork`.

It chooses the route a model takes, then leaves the compile itself to :mod:`glow_core.pipeline`:

- ``devices=``: the runtime partitions the model over several devices (:mod:`glow_core.runtime.network`);
- a program-cache hit (:mod:`glow_core.compilecache`) is served before the model is even imported;
- a model with run-time control flow is split into stages (:mod:`glow_core.controlflow`);
- a model with symbolic dims that ``input_shapes`` / ``dims`` leave open becomes a
  :class:`~glow_core.pipeline.specialize.DynamicNetwork`: compiled per input signature when run, every
  specialization through :func:`_compile_proto` with the weights read once (docs/dynamic-shapes.md);
- otherwise the model is imported and compiled by the pipeline, converted to int8 on the way when
  ``quantize=`` is given (:mod:`glow_core.quantization`).

``glow_core.api.compile`` (the public facade) and ``glow_core.onnx_backend`` call :func:`compile_model`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

from glow_core import budget, compilecache, progress
from glow_core.controlflow import CompileTarget, compile_staged
from glow_core.errors import GlowError, InputError, UnsupportedError
from glow_core.importer import load_model
from glow_core.importer.mapped import MappedWeights, map_model, settle
from glow_core.importer.onnx_importer import OnnxImporter
from glow_core.importer.subgraphs import has_control_flow
from glow_core.importer.symbols import InputShapes, ModelSymbols, dims_of
from glow_core.importer.weights import split_weights
from glow_core.ir.graph import Function
from glow_core.pipeline import (
    CompiledNetwork,
    CompileStats,
    check_input_shapes,
    check_model_arg,
    check_threads,
    compile_function,
    compile_options,
    compile_prepared,
    pass_context,
    prepare_function,
)
from glow_core.pipeline.specialize import CacheLimits, DynamicNetwork
from glow_core.pipeline.stages import SYMBOLIC_DIMS
from glow_core.pipeline.symbolic import (SymbolicCompiles, SymbolicPlan, SymbolicRefused, default_env,
                                         prepare_symbolic, shapes_at)
from glow_core.plugin_host import get_backend
from glow_core.quantization.apply import quantize_prepared, shape_free
from glow_core.runtime import parse_devices
from glow_core.runtime.network import compile_on_devices
from glow_sdk.backend import Backend, CompileOptions


def compile_model(model: Any, backend: str, input_shapes: Any = None, *,
                  bind: Mapping[str, np.ndarray] | None = None, threads: int | None = None, debug: bool = False,
                  options: Mapping[str, Any] | None = None, devices: str | None = None,
                  quantize: Any = None, dims: Any = None, specializations: CacheLimits | None = None,
                  weights: Mapping[str, np.ndarray] | None = None) -> CompiledNetwork | DynamicNetwork:
    """What ``glow_core.compile`` does (see its docstring): check the arguments, then pick the route.
    ``weights``: the initializers of a model stripped of them (``importer.weights.split_weights``), by name."""
    if devices is not None and quantize is not None:
        raise InputError("quantize and devices cannot be combined yet", hint="quantize for one backend")
    with progress.stage(f"compiling {_label(model)}"):
        shapes = check_input_shapes(input_shapes, dims)
        model = check_model_arg(model)
        check_threads(threads)
        if devices is not None:
            return _on_devices(model, devices, shapes, bind, threads, options, specializations, weights)
        be = get_backend(backend)
        with budget.using(budget.current().with_options(options)):
            return _compile(model, be, shapes, bind, threads, debug, options, quantize, specializations, weights)


def _label(model: Any) -> str:
    """How the progress line names the model: its path's file name, ``zoo:NAME``, or "the model"."""
    if isinstance(model, (str, os.PathLike)):
        return os.path.basename(os.fspath(model)) or os.fspath(model)
    return "the model"


def _compile(model: str | os.PathLike[str] | onnx.ModelProto, be: Backend, shapes: InputShapes | None,
             bind: Mapping[str, np.ndarray] | None, threads: int | None, debug: bool,
             options: Mapping[str, Any] | None, quantize: Any, specializations: CacheLimits | None,
             weights: Mapping[str, np.ndarray] | None = None) -> CompiledNetwork | DynamicNetwork:
    t0 = time.perf_counter()
    copts = compile_options(threads=threads, debug=debug, extra=options)
    served = bind is None and quantize is None and not dims_of(shapes)
    pkey, data = compilecache.program_key(model, be, copts, shapes) if served else (None, None)
    hit = _cached(pkey, be, copts, t0)
    if hit is not None:  # the program cache: served before the import (glow_core/compilecache.py)
        return hit
    with progress.stage("import"):
        proto, weights, mapping = _load(model, data, weights)
    del data
    symbols = ModelSymbols(proto, dims_of(shapes))
    open_shapes = _open_shapes(symbols, shapes, bind)
    if has_control_flow(proto.graph):  # split at run-time control flow (docs/control-flow.md)
        if quantize is not None:
            raise UnsupportedError("int8 quantization of a model with If, Loop or Scan is not supported yet",
                                   hint="compile it without --quantize")
        target = CompileTarget(be, threads, debug, dict(options or {}), budget.current(), dict(weights or {}))
        if open_shapes:  # a staged compile per input signature (docs/dynamic-shapes.md, "The rest of the stack")
            return _per_shape(proto, shapes, symbols, lambda m, s, b, w: compile_staged(
                m, dataclasses.replace(target, weights=dict(w)), s, b), specializations, weights, mapping,
                batch_split=False)
        return compile_staged(proto, target, shapes, bind)
    if open_shapes and quantize is None:
        return _dynamic(proto, be, shapes, symbols, threads, debug, options, specializations, weights, mapping)
    if open_shapes:  # int8 per input signature, every one with the same (shape-free) profile
        cfg = shape_free(quantize)
        return _per_shape(proto, shapes, symbols, lambda m, s, b, w: _compile_proto(
            m, be, s, b, threads, debug, options, cfg, weights=w), specializations, weights, mapping)
    shapes = InputShapes(symbols.resolve(shapes), symbols.dims) if shapes is not None else None
    if shapes is not None and shapes.dims and bind is None and quantize is None:
        pkey, _ = compilecache.program_key(model, be, copts, dict(shapes))  # (dims resolved into shapes)
        for name, shape in shapes.items():
            symbols.check(name, shape)  # a hit skips the import, which checks them
        hit = _cached(pkey, be, copts, t0)
        if hit is not None:
            return hit
    net = _compile_proto(proto, be, shapes, bind, threads, debug, options, quantize, t0=t0, weights=weights)
    settle(mapping)
    if pkey is not None:
        with progress.stage("cache write"):
            compilecache.store(pkey, be, net.function, net.executable, net.stats.nodes_by_kind, proto)
    return net


def _open_shapes(symbols: ModelSymbols, shapes: InputShapes | None, bind: Mapping[str, np.ndarray] | None) -> bool:
    """Do inputs remain whose shape neither ``shapes``, the dims nor ``bind`` fix (and a specialization per input
    signature can serve them: no sequence or optional input among them)?"""
    open_inputs = [n for n in symbols.open_inputs(shapes) if n not in (bind or {})]
    return bool(open_inputs) and not set(open_inputs) & set(symbols.structured)


def _on_devices(model: str | os.PathLike[str] | onnx.ModelProto, devices: str, shapes: InputShapes | None,
                bind: Mapping[str, np.ndarray] | None, threads: int | None, options: Mapping[str, Any] | None,
                specializations: CacheLimits | None,
                weights: Mapping[str, np.ndarray] | None) -> CompiledNetwork | DynamicNetwork:
    """The runtime's network over ``devices`` (glow_core/runtime/network.py); a model with open symbols: a
    partitioned network per input signature, compiled on first use (each its own devices' host manager)."""
    parse_devices(devices)  # (a bad list fails now, not at the first run)
    with progress.stage("import"):
        proto, weights, mapping = _load(model, None, weights)
    symbols = ModelSymbols(proto, dims_of(shapes))
    if _open_shapes(symbols, shapes, bind):
        return _per_shape(proto, shapes, symbols, lambda m, s, b, w: compile_on_devices(
            m, devices, s, bind=b, threads=threads, options=options, weights=w), specializations, weights, mapping)
    try:
        return compile_on_devices(proto, devices, shapes, bind=bind, threads=threads, options=options, weights=weights)
    finally:
        settle(mapping)


def _load(model: str | os.PathLike[str] | onnx.ModelProto, data: bytes | None,
          weights: Mapping[str, np.ndarray] | None) -> tuple[onnx.ModelProto, Mapping[str, np.ndarray] | None,
                                                              MappedWeights | None]:
    """The model (stripped of its large initializers' bytes when they are read from a mapping of the file:
    ``importer/mapped.py``), the weights given or mapped, and the mapping (None: none)."""
    if weights is None and data is None and isinstance(model, (str, os.PathLike)):
        mapped = map_model(model)
        if mapped is not None:
            return mapped
    proto, _ = load_model(model, data)  # (the bytes the key hashed, when it read them: the file is read once)
    return proto, weights, None


def _cached(pkey: str | None, be: Backend, copts: CompileOptions, t0: float) -> CompiledNetwork | None:
    """The program cache's network for ``pkey`` (None: no key, or a miss)."""
    hit = compilecache.load(pkey, be, copts) if pkey is not None else None
    if hit is None:
        return None
    fn, exe, counts = hit
    stats = CompileStats(import_s=time.perf_counter() - t0, nodes_by_kind=counts)
    stats.backend_s = {**dict(getattr(exe, "compile_timings", None) or {}), "program": True}
    return CompiledNetwork(fn, exe, be, stats)


def _compile_proto(proto: onnx.ModelProto, be: Backend, shapes: Mapping[str, Any] | None,
                   bind: Mapping[str, np.ndarray] | None, threads: int | None, debug: bool,
                   options: Mapping[str, Any] | None, quantize: Any = None, *, t0: float | None = None,
                   weights: Mapping[str, np.ndarray] | None = None) -> CompiledNetwork:
    """Import ``proto`` at ``shapes`` and compile it through the pipeline (int8 on the way with ``quantize``)."""
    t0 = time.perf_counter() if t0 is None else t0
    stats = CompileStats()
    with progress.stage("import"):
        fn = OnnxImporter(proto, shapes, bind, weights=weights).run()
    stats.import_s = time.perf_counter() - t0
    transform = None if quantize is None else (lambda f: quantize_prepared(f, be, quantize))
    return compile_function(fn, be, stats, threads=threads, debug=debug, options=options, transform=transform)


#: how one route compiles one input signature: (the stripped model, its shapes, bound inputs, the weights) -> network
Route = Callable[[onnx.ModelProto, InputShapes, Any, Mapping[str, np.ndarray]], CompiledNetwork]


def _per_shape(proto: onnx.ModelProto, shapes: InputShapes | None, symbols: ModelSymbols, route: Route,
               specializations: CacheLimits | None, weights: Mapping[str, np.ndarray] | None,
               mapping: MappedWeights | None = None, *, batch_split: bool = True) -> DynamicNetwork:
    """A network that compiles a specialization per input signature through ``route`` (the plain pipeline, int8,
    control flow, the runtime's devices), lazily, in the bounded LRU of glow_core/pipeline/specialize.py; every
    one imports the same stripped model with the same shared weights (views of the mapped file with ``mapping``,
    whose pages are dropped after each compile). ``batch_split``: a batch of a separable model may run one
    sample at a time on the batch-1 network (the importer proves it; a model with control flow is never split)."""
    stripped, weights = split_weights(proto) if weights is None else (proto, weights)
    limits = budget.current()
    given = dict(shapes or {})

    def build(spec: dict[str, tuple[int, ...]], bind: dict[str, np.ndarray]) -> CompiledNetwork:
        with budget.using(limits), progress.stage("compiling a specialization"):
            net = route(stripped, InputShapes({**given, **spec}, symbols.dims), bind or None, weights)
        settle(mapping)
        return net

    def import_at(spec: dict[str, tuple[int, ...]]) -> Function:
        with budget.using(limits):
            return OnnxImporter(stripped, InputShapes({**given, **spec}, symbols.dims), None, weights=weights).run()

    return DynamicNetwork(symbols, [o.name for o in proto.graph.output], build, specializations,
                          import_at if batch_split else None)


def _dynamic(proto: onnx.ModelProto, be: Backend, shapes: InputShapes | None, symbols: ModelSymbols,
             threads: int | None, debug: bool, options: Mapping[str, Any] | None,
             specializations: CacheLimits | None, weights: Mapping[str, np.ndarray] | None,
             mapping: MappedWeights | None = None) -> DynamicNetwork:
    """The plain route's network for open symbols: compiled once for them on a backend with symbolic kernels
    (glow_core/pipeline/symbolic.py), else (and for the shapes no symbolic plan serves) a specialization per
    input signature (:func:`_per_shape`)."""
    wanted = (options or {}).get(SYMBOLIC_DIMS, True)
    if not isinstance(wanted, bool):
        raise InputError(f"options['{SYMBOLIC_DIMS}'] must be True or False, got {wanted!r}",
                         hint="False: compile a specialization per input shape")
    net = _per_shape(proto, shapes, symbols, lambda m, s, b, w: _compile_proto(
        m, be, s, b, threads, debug, options, weights=w), specializations, weights, mapping)
    if be.symbolic_kinds() and wanted:
        import_at = net.importer
        assert import_at is not None
        target = CompileTarget(be, threads, debug, dict(options or {}), budget.current())
        net.symbolic = SymbolicCompiles(symbols, lambda plan: _compile_symbolic(
            symbols, plan, import_at, be, target, mapping))
        # compile now for a batch of 1 and free sizes of the other symbols
        net.symbolic_network(shapes_at(symbols, default_env(symbols)), eager=True)
    return net


def _compile_symbolic(symbols: ModelSymbols, plan: SymbolicPlan, import_at: Callable[[dict[str, Any]], Function],
                      be: Backend, target: CompileTarget, mapping: MappedWeights | None = None) -> CompiledNetwork:
    """One network for every size ``plan`` allows (glow_core/pipeline/symbolic.py), or SymbolicRefused."""
    try:
        return _symbolic_network(symbols, plan, import_at, be, target)
    finally:
        settle(mapping)


def _symbolic_network(symbols: ModelSymbols, plan: SymbolicPlan, import_at: Callable[[dict[str, Any]], Function],
                      be: Backend, target: CompileTarget) -> CompiledNetwork:
    t0 = time.perf_counter()
    def prepare(shapes: dict[str, Any]) -> Function:
        return prepare_function(import_at(shapes), be, debug=target.debug,
                                ctx=pass_context(be, debug=target.debug, options=target.options))

    with budget.using(target.budget or budget.current()), \
            progress.stage(f"compiling for symbolic dims ({plan.describe()})"):
        fn = prepare_symbolic(symbols, plan, prepare, be.symbolic_kinds())
        budget.release_pages()  # (the pairing read every weight; the backend reads them again as it packs)
        stats = CompileStats(import_s=time.perf_counter() - t0)
        try:
            return compile_prepared(fn, be, stats, threads=target.threads, debug=target.debug, options=target.options)
        except SymbolicRefused:
            raise
        except GlowError as e:  # (the per-shape compile that follows reports a genuine fault again)
            raise SymbolicRefused(f"the backend did not compile the symbolic function: {e}") from None
