"""``onnx.backend.base.Backend`` over any glow backend.

ONNX's own backend test runner (and any code written for that interface) can
drive glow::

    rep = glow_core.onnx_backend.prepare(model, device="CPU", backend="interpreter")
    outputs = rep.run([x, y])

Glow compiles for static shapes. ``run`` therefore compiles for the shapes
actually passed, and when an operand that decides shapes (a Reshape's shape,
Slice starts, Resize sizes, TopK's k, ...) comes from a model input, the input
is bound as a compile-time constant from the value passed. Compiled networks
are specializations kept per (input shapes and dtypes, bound input values) in the
LRU that ``glow_core.compile`` uses for models with symbolic dims
(``glow_core.pipeline.specialize.Specializations``: bounded by count and bytes;
``prepare(model, specializations=CacheLimits(...))``); every specialization reads
the same copy of the weights (``glow_core.importer.weights``). ``dims=`` (symbol ->
size or bound) is passed to each compile like any other option.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend as OnnxBackendBase
from onnx.backend.base import BackendRep, Device, DeviceType

from glow_core.driver import compile_model
from glow_core.errors import InputError
from glow_core.importer.precheck import check_strings
from glow_core.importer.structured import flatten_feed, kind_of, rebuild
from glow_core.importer.subgraphs import has_control_flow
from glow_core.importer.weights import split_weights
from glow_core.pipeline import CompiledNetwork
from glow_core.pipeline.specialize import CacheLimits, Specializations, signature_key

#: compiled networks kept per prepared model
CACHE_SIZE = 16


class GlowRep(BackendRep):
    """A prepared model: compiles per input signature, then runs."""

    def __init__(self, model: onnx.ModelProto, backend: str, options: Mapping[str, Any],
                 limits: CacheLimits | None = None) -> None:
        check_strings(model)  # names with invalid UTF-8 would surface as bytes among the str names below
        # one copy of the weights for every compile: the model is kept without their bytes (control flow splits
        # the model itself, and reads them from it)
        self.model, self.weights = (model, {}) if has_control_flow(model.graph) else split_weights(model)
        self.backend = backend
        self.options = dict(options)
        graph = self.model.graph  # (not ``model``'s: a part of it would keep the whole model and its weights alive)
        inits = {t.name for t in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in inits]
        self.input_types = {i.name: i.type for i in graph.input if i.name not in inits}
        self.output_names = [o.name for o in graph.output]
        #: compiled networks per input signature (and value of the inputs found to decide shapes)
        self.compiled: Specializations[CompiledNetwork] = Specializations(limits or CacheLimits(CACHE_SIZE))

    def _feeds(self, inputs: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(input signatures, flat feeds): sequences and optionals flattened (importer/structured.py)."""
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise InputError(f"{len(inputs)} inputs given; the model takes {len(self.input_names)}: "
                                 + ", ".join(self.input_names))
            feeds = dict(zip(self.input_names, inputs))
        signatures: dict[str, Any] = {}
        flat: dict[str, np.ndarray] = {}
        for name, value in feeds.items():
            tp = self.input_types.get(name)
            if tp is None or kind_of(tp) == "tensor_type":
                a = np.asarray(value)
                signatures[name], flat[name] = tuple(a.shape), a
            else:
                signatures[name], items = flatten_feed(name, value, tp)
                flat.update(items)
        return signatures, flat

    def compiled_for(self, feeds: Mapping[str, np.ndarray],
                     signatures: Mapping[str, Any] | None = None) -> CompiledNetwork:
        if signatures is None:
            signatures = {n: tuple(a.shape) for n, a in feeds.items()}
        key = signature_key(feeds, signatures)
        given = signatures

        def build(bound: list[str]) -> CompiledNetwork:
            shapes = {n: s for n, s in given.items() if n not in bound}
            return compile_model(self.model, self.backend, shapes, bind={n: feeds[n] for n in bound},
                                 weights=self.weights or None, **self.options)

        return self.compiled.get(key, feeds, build)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The outputs in order: arrays; a list of arrays for a sequence, None for an empty optional."""
        signatures, feeds = self._feeds(inputs)
        net = self.compiled_for(feeds, signatures)
        run_feeds = {n: a for n, a in feeds.items() if n in net.input_types}
        outs = net.run(run_feeds)
        structure = net.function.structure
        return tuple(rebuild(n, structure.get(n, "tensor"), outs) for n in self.output_names)


class GlowBackend(OnnxBackendBase):
    """The ONNX backend interface; ``backend=`` picks the glow backend by name."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return True

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> GlowRep:
        if not isinstance(model, onnx.ModelProto):
            from glow_core.importer import load_model

            model, _ = load_model(model)
        backend = kwargs.pop("backend", "interpreter")
        limits = kwargs.pop("specializations", None)
        return GlowRep(model, backend, kwargs, limits)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        raise NotImplementedError("run_node: build a one-node model and use run_model")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = GlowBackend.prepare
run_model = GlowBackend.run_model
run_node = GlowBackend.run_node
supports_device = GlowBackend.supports_device
is_compatible = GlowBackend.is_compatible
