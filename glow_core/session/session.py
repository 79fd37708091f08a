"""``glow_core.InferenceSession``: glow behind onnxruntime's session interface.

A script written for onnxruntime runs on glow with two changes, the import and the provider names::

    import glow_core as ort
    sess = ort.InferenceSession("model.onnx", providers=["cpu"])

The session reads the model's inputs and outputs without compiling (``get_inputs()``); ``run`` compiles
for the shapes of the feeds and the outputs asked for (the graph pruned to them), and keeps the compiled
networks in the bounded LRU of ``glow_core.compile``'s dynamic networks
(``glow_core.pipeline.specialize.Specializations``, keyed by (outputs, input signature); bounded by
``compiled_cache_size`` networks and ``compiled_cache_bytes``): a second batch size compiles once more, a
repeated one reuses its network, and every one reads the same copy of the weights (the session keeps the
model without its weights' bytes: ``glow_core.importer.weights``). Inputs whose values decide shapes are
bound as compile-time constants (the ONNX backend interface's rule). Symbols may be fixed or bounded:
``InferenceSession(..., dims={"sequence": (1, 512)})`` or onnxruntime's
``SessionOptions.add_free_dimension_override_by_name("batch", 1)``; a feed out of bounds is an
``InputError``. Several providers partition the model over them through the runtime, each node on the
first provider that runs it.
"""

from __future__ import annotations

import enum
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from glow_core.driver import compile_model
from glow_core.errors import InputError, UnknownBackendError
from glow_core.importer import load_model
from glow_core.importer.mapped import MappedWeights, map_model, settle
from glow_core.importer.subgraphs import has_control_flow
from glow_core.importer.onnx_importer import OnnxImporter
from glow_core.importer.symbols import InputShapes, ModelSymbols, check_dims
from glow_core.importer.weights import split_weights
from glow_core.importer.structured import flatten_feed, kind_of, rebuild
from glow_core.pipeline import CompiledNetwork, check_model_arg
from glow_core.ir.graph import Function
from glow_core.pipeline.batching import BatchSplitter, run_by_sample
from glow_core.pipeline.specialize import CacheLimits, Specializations, check_batches, signature_key
from glow_core.pipeline.stages import OPTIMIZATION_LEVEL
from glow_core.plugin_host import default_backend, registry
from glow_core.session.binding import IOBinding, OrtValue
from glow_core.session.model import (
    NodeArg,
    check_feed,
    check_names,
    node_args,
    numpy_dtype,
    prune,
    real_inputs,
)


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's levels; glow runs its graph optimizer at every level but ``ORT_DISABLE_ALL``."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


@dataclass
class SessionOptions:
    """How a session compiles. Attributes onnxruntime has and glow does not use may be set and are ignored."""

    #: threads a backend may use per run (0: the backend's choice)
    intra_op_num_threads: int = 0
    #: ``ORT_DISABLE_ALL`` skips the graph optimizer (lowering still runs); any other level runs it
    graph_optimization_level: int = GraphOptimizationLevel.ORT_ENABLE_ALL
    #: where to write the optimized, lowered graph (glow's graph IR as text) after each compile
    optimized_model_filepath: str = ""
    #: the memory budget: bytes (or "512M", "2G") the model's constants and a backend's arena may reach
    memory_limit: int | str | None = None
    #: compiled networks kept (one per outputs asked for and input signature)
    compiled_cache_size: int = 16
    #: bytes the kept networks may hold of their own (arenas, constant regions; shared weights count once);
    #: None: no limit but the count
    compiled_cache_bytes: int | None = None
    #: how a batch of a model whose samples never meet runs: "split" (one sample at a time on the batch-1
    #: network, no compile per batch size), "compile" or "background" (docs/dynamic-shapes.md, "Batches")
    batches: str = "split"

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """onnxruntime's: fix the symbolic dimension ``dim_name`` to ``dim_value`` in every input (a session's
        ``dims``, docs/dynamic-shapes.md)."""
        self.__dict__.setdefault("_free_dims", {})[dim_name] = dim_value

    def free_dimension_overrides(self) -> dict[str, int]:
        """The symbols fixed with :meth:`add_free_dimension_override_by_name`."""
        return dict(self.__dict__.get("_free_dims", {}))

    def compile_kwargs(self) -> dict[str, Any]:
        """``threads`` and ``options`` for ``glow_core.compile``."""
        threads = self.intra_op_num_threads
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            raise InputError(f"intra_op_num_threads must be a non-negative integer, got {threads!r}")
        options: dict[str, Any] = {OPTIMIZATION_LEVEL: 0 if self.graph_optimization_level == 0 else 1}
        if self.memory_limit is not None:
            options["max_total_bytes"] = self.memory_limit
        return {"threads": threads or None, "options": options}


def get_available_providers() -> list[str]:
    """The usable backends, the default (fastest) first: what ``providers=`` takes."""
    usable = registry().names()
    if not usable:
        return []
    first = default_backend()
    return [first] + [n for n in usable if n != first]


def resolve_providers(providers: Sequence[Any] | None,
                      provider_options: Sequence[Mapping[str, Any]] | None) -> tuple[list[str], dict[str, Any]]:
    """(backend names in priority order, backend options): ``providers`` holds names or (name, options) pairs;
    None picks the fastest installed backend."""
    if not providers:
        return [default_backend()], {}
    usable = registry().names()
    names: list[str] = []
    options: dict[str, Any] = {}
    for i, p in enumerate(providers):
        name, opts = (p[0], dict(p[1])) if isinstance(p, (tuple, list)) else (p, {})
        if provider_options is not None and i < len(provider_options):
            opts.update(provider_options[i])
        if name not in usable:
            hint = ("that is onnxruntime's name; glow's providers are its backends" if str(name).endswith(
                "ExecutionProvider") else "'glow backends' lists what is installed")
            raise UnknownBackendError(f"unknown provider {name!r}; choose among {', '.join(usable) or '(none)'}",
                                      hint=hint)
        names.append(name)
        options.update(opts)
    return names, options


def _load(model: Any, may_map: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray] | None, MappedWeights | None]:
    """The model of a path, ``zoo:NAME``, bytes or ModelProto; with ``may_map``, a large file's model without
    its weights' bytes, those weights as views of the mapped file, and the mapping (importer/mapped.py)."""
    model = check_model_arg(model)
    if isinstance(model, onnx.ModelProto):
        return model, None, None
    if may_map and isinstance(model, (str, os.PathLike)):
        mapped = map_model(model)
        if mapped is not None:
            return mapped
    return load_model(model)[0], None, None


class InferenceSession:
    """A model ready to run on glow backends, with onnxruntime's interface (module doc).

    ``model`` is a path, ``"zoo:NAME"``, serialized bytes or an ``onnx.ModelProto``; ``providers`` are glow
    backend names in priority order (None: the fastest installed); ``sess_options`` a :class:`SessionOptions`;
    ``dims`` symbol -> size or bound (``{"sequence": (1, 512)}``, docs/dynamic-shapes.md).
    """

    def __init__(self, model: Any, sess_options: SessionOptions | None = None, providers: Sequence[Any] | None = None,
                 provider_options: Sequence[Mapping[str, Any]] | None = None, *, dims: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        self._options = sess_options if sess_options is not None else SessionOptions()
        self._providers, backend_options = resolve_providers(providers, provider_options)
        compile_kwargs = self._options.compile_kwargs()
        compile_kwargs["options"] = {**backend_options, **compile_kwargs["options"]}
        self._compile_kwargs = compile_kwargs
        loaded, mapped, self._mapping = _load(model, len(self._providers) == 1)
        self._symbols = ModelSymbols(loaded, check_dims({**self._options.free_dimension_overrides(), **(dims or {})}))
        # one copy of the weights, shared by every compile: the session keeps the model without their bytes
        # (with several providers the runtime imports the model itself, and control flow splits it)
        whole = self._whole = len(self._providers) > 1 or has_control_flow(loaded.graph)
        if mapped is not None:  # (a large file: its weights stay in the file's pages)
            self._model, self._weights = loaded, mapped
        else:
            self._model, self._weights = (loaded, {}) if whole else split_weights(loaded)
        self._splitters: dict[tuple[str, ...], BatchSplitter] = {}
        del loaded
        self._all_outputs = [o.name for o in self._model.graph.output]
        size = self._options.compiled_cache_size
        self._compiled: Specializations[CompiledNetwork] = Specializations(
            CacheLimits(size, self._options.compiled_cache_bytes))
        self._pruned: OrderedDict[tuple[str, ...], onnx.ModelProto] = OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # -- what the model takes and gives, before any compile ---------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return node_args(real_inputs(self._model))

    def get_outputs(self) -> list[NodeArg]:
        return node_args(self._model.graph.output)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_session_options(self) -> SessionOptions:
        return self._options

    # -- running ---------------------------------------------------------------------------------------------
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[Any]:
        """The outputs named (all when None), in that order, for the feeds (input name -> array); only what
        those outputs need is computed."""
        names = self._output_names(output_names)
        results = self._run(names, input_feed)
        return [results[n] for n in names]

    def io_binding(self) -> IOBinding:
        return IOBinding()

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        """Run with the bound inputs, computing the bound outputs only (into the caller's arrays where bound)."""
        if not iobinding.outputs:
            raise InputError("no output is bound", hint="bind_output(name) or bind_ortvalue_output(name, value)")
        names = self._output_names(list(iobinding.outputs))
        iobinding.store(self._run(names, iobinding.inputs))

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[[Any, Any, str], None] | None = None, user_data: Any = None,
                  run_options: Any = None) -> Future:
        """``run`` on the session's worker thread: a Future of the outputs; ``callback(outputs, user_data, err)``
        (onnxruntime's, ``err`` "" on success) is called when it is done."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glow-session")
            future = self._pool.submit(self.run, output_names, dict(input_feed))
        if callback is not None:
            future.add_done_callback(lambda f: callback(None if f.exception() else f.result(), user_data,
                                                        str(f.exception() or "")))
        return future

    def close(self) -> None:
        """Stop the worker thread and release the compiled networks (their devices, with several providers)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._compiled.wait()  # (a batch size compiling in the background)
        for net in self._compiled.entries():
            close = net.executable.close
            if close is not None:
                close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------------------
    def _output_names(self, output_names: Sequence[str] | None) -> list[str]:
        if output_names is None or (not isinstance(output_names, str) and len(output_names) == 0):
            return list(self._all_outputs)
        return check_names(output_names, self._all_outputs, "output")

    def _model_for(self, outputs: tuple[str, ...]) -> onnx.ModelProto:
        """The model pruned to ``outputs`` (the whole model when they are all of its outputs, in order)."""
        if list(outputs) == self._all_outputs:
            return self._model
        with self._lock:
            hit = self._pruned.get(outputs)
            if hit is None:
                hit = self._pruned[outputs] = prune(self._model, outputs)
                while len(self._pruned) > self._options.compiled_cache_size:
                    self._pruned.popitem(last=False)
            self._pruned.move_to_end(outputs)
            return hit

    def _feeds(self, model: onnx.ModelProto, input_feed: Mapping[str, Any]
               ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(input signatures, flat arrays) of the inputs ``model`` reads, checked against its declarations."""
        if not isinstance(input_feed, Mapping):
            raise InputError(f"run() takes a dict of input name -> array, got {type(input_feed).__name__}")
        check_names(list(input_feed), [vi.name for vi in real_inputs(self._model)], "input")
        signatures: dict[str, Any] = {}
        flat: dict[str, np.ndarray] = {}
        for vi in real_inputs(model):
            if vi.name not in input_feed:
                raise InputError(f"missing input '{vi.name}'; the outputs asked for need "
                                 + ", ".join(v.name for v in real_inputs(model)))
            value = input_feed[vi.name]
            value = value.numpy() if isinstance(value, OrtValue) else value
            if kind_of(vi.type) != "tensor_type":
                signatures[vi.name], items = flatten_feed(vi.name, value, vi.type)
                flat.update(items)
                continue
            arr = value if isinstance(value, np.ndarray) else _as_array(value, vi)
            check_feed(vi, arr)
            self._symbols.check(vi.name, tuple(arr.shape), InputError)  # sizes dims fix, bounds
            signatures[vi.name], flat[vi.name] = tuple(arr.shape), arr
        return signatures, flat

    def _run(self, names: list[str], input_feed: Mapping[str, Any]) -> dict[str, Any]:
        outputs = tuple(dict.fromkeys(names))
        model = self._model_for(outputs)
        signatures, flat = self._feeds(model, input_feed)
        split = self._splitter(model, outputs, signatures)
        count = split.count(flat) if split is not None else 1
        mode = check_batches(self._options.batches)
        if split is not None and count > 1 and mode != "compile" and not self._compiled.bound() and \
                split.separability(flat, outputs).separable:
            key = (outputs, signature_key(flat, signatures))
            if self._compiled.peek(key, flat) is None:
                # a batch of a model whose samples never meet, at a batch size not compiled: one sample at a time
                # on the batch-1 network ("background": while that batch size compiles)
                if mode == "background":
                    self._compiled.build_later(key, flat, lambda bound: self._compile(model, dict(signatures), {}))
                return run_by_sample(lambda f: self._run_flat(outputs, model, {n: a.shape for n, a in f.items()}, f),
                                     flat, split.batched, count)
        return self._run_flat(outputs, model, signatures, flat)

    def _splitter(self, model: onnx.ModelProto, outputs: tuple[str, ...], signatures: Mapping[str, Any]
                  ) -> BatchSplitter | None:
        """The batch splitter of the model pruned to ``outputs`` (glow_core/pipeline/batching.py); None when the
        session runs the whole model on several devices or with control flow, or a feed or output is not a tensor."""
        if self._whole or any(not isinstance(sig, tuple) for sig in signatures.values()) or \
                any(kind_of(o.type) != "tensor_type" for o in model.graph.output):
            return None
        with self._lock:
            hit = self._splitters.get(outputs)
            if hit is None:
                dims = self._symbols.dims

                def importer(shapes: dict[str, tuple[int, ...]]) -> Function:
                    return OnnxImporter(model, InputShapes(shapes, dims), None, weights=self._weights or None).run()
                hit = self._splitters[outputs] = BatchSplitter(self._symbols, importer)
            return hit

    def _run_flat(self, outputs: tuple[str, ...], model: onnx.ModelProto, signatures: Mapping[str, Any],
                  flat: dict[str, np.ndarray]) -> dict[str, Any]:
        key = (outputs, signature_key(flat, signatures))

        def build(bound: list[str]) -> CompiledNetwork:
            shapes = {n: s for n, s in signatures.items() if n not in bound}
            return self._compile(model, shapes, {n: flat[n] for n in bound})

        net = self._compiled.get(key, flat, build)
        outs = net.run({n: a for n, a in flat.items() if n in net.input_types})
        structure = net.function.structure
        return {n: rebuild(n, structure.get(n, "tensor"), outs) for n in outputs}

    def _compile(self, model: onnx.ModelProto, shapes: dict[str, Any], bind: dict[str, np.ndarray]
                 ) -> CompiledNetwork:
        several = len(self._providers) > 1
        devices = ",".join(f"{p}:1" for p in self._providers) if several else None
        net = compile_model(model, "" if several else self._providers[0], shapes or None, bind=bind or None,
                            devices=devices, weights=self._weights or None, **self._compile_kwargs)
        settle(self._mapping)  # (the file's pages the compile read: dropped, as the driver does)
        path = self._options.optimized_model_filepath
        if path:
            with open(os.fspath(path), "w", encoding="utf-8") as f:
                f.write(net.function.dump())
        return net


def _as_array(value: Any, vi: onnx.ValueInfoProto) -> np.ndarray:
    """A Python scalar or (nested) list as an array of the input's dtype, when it converts exactly."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise InputError(f"input '{vi.name}' cannot be converted to an array: {e}") from None
    want = numpy_dtype(vi.type)
    if want is not None and arr.dtype != want and arr.dtype.kind in "biuf":
        converted = arr.astype(want)
        if np.array_equal(converted.astype(arr.dtype), arr):
            return converted
    return arr


__all__ = ["GraphOptimizationLevel", "InferenceSession", "SessionOptions", "get_available_providers",
           "resolve_providers"]
