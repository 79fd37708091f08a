"""Profiling: run a model on sample data and record every float value's range and histogram.

The model is imported, optimized and lowered for the chosen backend exactly as
``glow_core.compile`` does (``prepare_function``); then every float node result
that is not already a graph output is marked as an extra output (named
``__profile__.<value name>``), so any backend runs the instrumented function
unchanged; the host accumulates one :class:`ValueRecord` per value. Graph inputs
are recorded from the feeds.

Values are named by their graph-IR name: the importer names a node after its
ONNX node (or first output tensor), and a lowering step names what it emits
``<node>.<kind>``, so ``conv1.add`` is the Add that lowering ``conv1`` produced.
Each entry also keeps the ONNX origin and node kind, and a *portable key* made of
origin names, which survive lowering: ``fc>softmax>`` is the value ONNX node ``fc``
hands to ``softmax``, whether the backend runs ``fc`` as a Gemm or lowers it to a
FusedMatMul. A profile made on one backend is applied to another backend's graph
by those keys (:func:`match_profile`): the int8 conversion then reads the same
ranges on every backend whose lowering keeps those values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import onnx

from glow_core.errors import GlowError, GlowWarning, InputError
from glow_core.importer import load_model
from glow_core.importer.onnx_importer import OnnxImporter
from glow_core.importer.symbols import InputShapes, ModelSymbols, dims_of
from glow_core.importer.weights import split_weights
from glow_core.ir.graph import Function, Placeholder, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.pipeline import (CompiledNetwork, check_input_shapes, check_model_arg, check_support, check_threads,
                                compile_prepared, import_function, prepare_function)
from glow_core.pipeline.specialize import DynamicNetwork
from glow_core.plugin_host import get_backend
from glow_core.quantization.data import fits
from glow_core.quantization.histogram import DEFAULT_BINS, ValueRecord
from glow_sdk.backend import Backend

FORMAT = "glow-quantization-profile"
VERSION = 1
PREFIX = "__profile__."


class ProfileMismatchError(GlowError):
    """A profile was made on a different graph (or backend) than the one it is applied to."""


@dataclass(frozen=True)
class ValueInfo:
    """Where a profiled value comes from: node kind (``input`` for graph inputs), ONNX origin, type."""

    kind: str
    origin: str
    shape: tuple[int, ...]
    elem: str
    output: str = ""  # the graph output name, when the value is one
    step: str = ""  # the lowering/fusion step that produced it: ``reducesum_1`` of ``ln0.reducesum_1``
    #: the portable key (:func:`portable_keys`): "" for a value inside one ONNX node's lowering
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "origin": self.origin, "step": self.step, "shape": list(self.shape),
                "elem": self.elem, "output": self.output, "key": self.key}


@dataclass
class Profile:
    """The result of profiling: per value name, its :class:`ValueInfo` and :class:`ValueRecord`."""

    backend: str
    fingerprint: str
    infos: dict[str, ValueInfo]
    records: dict[str, ValueRecord]
    samples: int = 0
    model: str = ""
    bins: int = DEFAULT_BINS
    sources: list[str] = field(default_factory=list)
    #: recorded over the shapes of a model with symbolic dims: one record per value whatever the shapes, each
    #: value's shape with -1 on the axes that differed, the fingerprint without shapes (:func:`fingerprint`);
    #: it quantizes the model at every shape
    symbolic: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "model": self.model, "backend": self.backend,
                "fingerprint": self.fingerprint, "samples": self.samples, "histogram_bins": self.bins,
                **({"symbolic_dims": True} if self.symbolic else {}),
                "values": {n: {**self.infos[n].to_json(), **self.records[n].to_json()} for n in self.infos}}

    def shape_free(self) -> Profile:
        """This profile for a network compiled per input shape: its ranges hold at every shape (a value's range
        does not depend on the shapes it was recorded at), so every axis of every value's shape is left open."""
        infos = {n: dataclasses.replace(i, shape=(-1,) * len(i.shape)) for n, i in self.infos.items()}
        return dataclasses.replace(self, infos=infos, symbolic=True)

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")

    @staticmethod
    def from_json(doc: Any, where: str = "profile") -> Profile:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise GlowError(f"{where} is not a Glow quantization profile (no \"format\": \"{FORMAT}\")")
        if doc.get("version") != VERSION:
            raise GlowError(f"{where} has profile format version {doc.get('version')!r}; this Glow reads "
                            f"version {VERSION}", hint="profile the model again with this version")
        try:
            bins = int(doc["histogram_bins"])
            infos, records = {}, {}
            for name, v in dict(doc["values"]).items():
                infos[name] = ValueInfo(str(v["kind"]), str(v["origin"]), tuple(int(d) for d in v["shape"]),
                                        str(v["elem"]), str(v.get("output", "")), str(v.get("step", "")),
                                        str(v.get("key", "")))
                records[name] = ValueRecord.from_json(v, bins, f"{where}: value '{name}'")
            return Profile(str(doc["backend"]), str(doc["fingerprint"]), infos, records, int(doc["samples"]),
                           str(doc.get("model", "")), bins, symbolic=bool(doc.get("symbolic_dims", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise GlowError(f"{where} is malformed ({type(e).__name__}: {e})") from None


# -- what is profiled, and the graph's fingerprint -------------------------------------------------

def profiled_values(fn: Function) -> dict[str, tuple[Value, ValueInfo]]:
    """The float graph inputs and float node results of ``fn``, by value name, in topological order."""
    out_names: dict[int, str] = {}
    for name, v in fn.outputs:
        out_names.setdefault(id(v), name)
    keys = portable_keys(fn)
    found: dict[str, tuple[Value, ValueInfo]] = {}
    for p in fn.inputs:
        if p.type.elem.is_float:
            found[p.name] = (p, ValueInfo("input", p.name, p.type.shape, p.type.elem.value, out_names.get(id(p), ""),
                                          key=keys[id(p)]))
    for node in fn.nodes:
        for o in node.outputs:
            if o.type.elem.is_float:
                found[o.name] = (o, ValueInfo(node.kind.name, node.origin, o.type.shape, o.type.elem.value,
                                              out_names.get(id(o), ""), _step(node.name, node.origin),
                                              keys.get(id(o), "")))
    return found


def portable_keys(fn: Function) -> dict[int, str]:
    """Keys of the values that cross from one ONNX node to another, by ``id(value)``: ``input:x`` for a graph
    input, ``ORIGIN>CONSUMERS>OUTPUTS#k`` for a node result read by nodes of other ONNX origins (or a graph
    output). Origins survive lowering, so the keys name the same values on every backend whose lowering
    keeps them; ``#k`` counts results with the same key (an ONNX node with several outputs)."""
    outs: dict[int, list[str]] = {}
    for name, v in fn.outputs:
        outs.setdefault(id(v), []).append(name)
    keys: dict[int, str] = {id(p): f"input:{p.name}" for p in fn.inputs}
    seen: dict[str, int] = {}
    for node in fn.nodes:
        origin = node.origin or node.name
        for o in node.outputs:
            readers = sorted({u.origin or u.name for u, _ in o.users} - {origin})
            if not readers and id(o) not in outs:
                continue  # inside the lowering of one ONNX node: backend-specific
            base = f"{origin}>{'|'.join(readers)}>{'|'.join(sorted(outs.get(id(o), [])))}"
            seen[base] = seen.get(base, -1) + 1
            keys[id(o)] = f"{base}#{seen[base]}"
    return keys


def _step(name: str, origin: str) -> str:
    """``reducesum_1`` for node ``ln0.reducesum_1`` from ONNX node ``ln0``; "" for the node itself."""
    return name[len(origin) + 1:] if origin and name.startswith(origin + ".") else ""


def fingerprint(fn: Function, backend: str, shapes: bool = True) -> str:
    """sha256 over the backend name and the graph's inputs, nodes (kind, origin, names, types) and outputs;
    ``shapes=False``: element kinds and ranks instead of types (the fingerprint of a symbolic profile)."""
    h = hashlib.sha256()

    def put(*parts: object) -> None:
        h.update(("\x1f".join(str(p) for p in parts) + "\x1e").encode())

    def typ(t: Any) -> object:
        return t if shapes else f"{t.elem.value}/{len(t.shape)}"

    put("backend", backend)
    for p in fn.inputs:
        put("input", p.name, typ(p.type))
    for node in fn.nodes:
        put("node", node.kind.name, node.origin, node.name, *(v.name if v is not None else "-" for v in node.inputs),
            *(f"{o.name}:{typ(o.type)}" for o in node.outputs))
    for name, v in fn.outputs:
        put("output", name, v.name)
    return h.hexdigest()


def shape_fits(had: ValueInfo, now: ValueInfo, symbolic: bool) -> bool:
    """Does a value of a graph (``now``) have the element kind and shape the profile recorded (``had``; -1 on an
    axis of a ``symbolic`` profile: any size)?"""
    return had.elem == now.elem and (fits(had.shape, now.shape) if symbolic else had.shape == now.shape)


def _differences(had: Mapping[str, ValueInfo], now: Mapping[str, ValueInfo], symbolic: bool = False) -> list[str]:
    """What differs between the values a profile describes and those of a graph (first five of each). A
    ``symbolic`` profile holds the values of the graphs of every shape it saw: one graph need not have them all."""
    both = [n for n in now if n in had]
    found = {
        "values missing from the profile": [n for n in now if n not in had],
        "values not in this graph": [] if symbolic else [n for n in had if n not in now],
        "different shapes": [f"{n} {list(had[n].shape)} vs {list(now[n].shape)}" for n in both
                             if not shape_fits(had[n], now[n], symbolic)],
        "different kinds": [f"{n} {had[n].kind} vs {now[n].kind}" for n in both if had[n].kind != now[n].kind],
    }
    return [f"{label}: " + ", ".join(items[:5]) + (f" (+{len(items) - 5} more)" if len(items) > 5 else "")
            for label, items in found.items() if items]


def check_profile(profile: Profile, fn: Function, where: str = "profile") -> None:
    """Raise :class:`ProfileMismatchError` naming what differs when ``profile`` was not made on ``fn`` (the same
    graph, made for the same backend)."""
    if profile.fingerprint == fingerprint(fn, profile.backend, shapes=not profile.symbolic):
        return
    problems = _differences(profile.infos, {n: info for n, (_, info) in profiled_values(fn).items()},
                            profile.symbolic)
    if profile.symbolic and not problems:
        return  # (this shape's graph differs from the first one profiled, but every value of it was recorded)
    raise ProfileMismatchError(f"{where} does not match this graph: " + "; ".join(
        problems or ["the graph's structure (node order, operands or outputs) differs"]),
        hint="profile this model again with these input shapes")


def _source(name: str, info: ValueInfo, profile: Profile, by_key: Mapping[str, str], legacy: bool) -> str | None:
    """The profile's value that ``name`` (of the graph being quantized) is: by portable key, or by name for a
    value inside one ONNX node's lowering (and for profiles written before keys)."""
    if info.key and not legacy:
        return by_key.get(info.key)
    had = profile.infos.get(name)
    return name if had is not None and had.kind == info.kind and (legacy or not had.key) else None


def match_profile(profile: Profile, fn: Function, backend: str | None = None, where: str = "profile") -> Profile:
    """``profile`` keyed by the value names of ``fn`` (prepared for ``backend``).

    Made for the same backend, it must describe exactly this graph (:func:`check_profile`). Made for another
    backend, its values are matched by portable key (:func:`portable_keys`): values that cannot be matched
    get no range (a :class:`GlowWarning` names them; the nodes reading them stay float), and a profile that
    matches none of this graph's inputs, or gives a matched value another shape, is a
    :class:`ProfileMismatchError`.
    """
    if backend is None or backend == profile.backend:
        check_profile(profile, fn, where)
        return profile
    values = profiled_values(fn)
    now = {n: info for n, (_, info) in values.items()}
    by_key = {info.key: n for n, info in profile.infos.items() if info.key}
    legacy = not by_key
    infos: dict[str, ValueInfo] = {}
    unmatched, reshaped = [], []
    for name, info in now.items():
        src = _source(name, info, profile, by_key, legacy)
        if src is None:
            if values[name][0].users or info.output:  # (a result nothing reads needs no range)
                unmatched.append(name)
        elif not shape_fits(profile.infos[src], info, profile.symbolic):
            reshaped.append(f"{name} {list(profile.infos[src].shape)} vs {list(info.shape)}")
        else:
            infos[name] = info
    missing = [n for n, info in now.items() if info.kind == "input" and n not in infos]
    if reshaped or missing or not infos:
        problems = [f"different shapes: {', '.join(reshaped[:5])}"] if reshaped else []
        problems += [f"inputs not in the profile: {', '.join(missing)}"] if missing else []
        raise ProfileMismatchError(
            f"{where} (made for backend '{profile.backend}') does not describe this graph for '{backend}': "
            + ("; ".join(problems) or "none of its values match"),
            hint="profile this model again with these input shapes")
    if unmatched:
        warnings.warn(GlowWarning(
            f"{where} (made for backend '{profile.backend}') has no range for {len(unmatched)} value(s) of the graph "
            f"'{backend}' lowers: {', '.join(unmatched[:5])}{' ...' if len(unmatched) > 5 else ''}; the nodes "
            f"reading them stay float (profile on '{backend}' to quantize them)"), stacklevel=3)
    records = {n: profile.records[_source(n, i, profile, by_key, legacy) or n] for n, i in infos.items()}
    return Profile(backend, fingerprint(fn, backend), infos, records, profile.samples, profile.model, profile.bins,
                   list(profile.sources))


def load_profile(path: str | os.PathLike[str], function: Function | Any, backend: str | None = None) -> Profile:
    """Read a profile and match it to ``function`` (a prepared Function or a CompiledNetwork) prepared for
    ``backend`` (:func:`match_profile`): a profile made on another backend comes back keyed by this graph's
    value names."""
    fn: Function = function
    if not isinstance(function, Function) and hasattr(function, "executable"):  # a CompiledNetwork
        backend = backend or function.backend.name
        fn = function.function
    return match_profile(read_profile(path), fn, backend, f"profile {os.fspath(path)}")


def read_profile(path: str | os.PathLike[str]) -> Profile:
    """The profile in the JSON file ``path``, as recorded (not matched to a graph)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read profile {os.fspath(path)}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise GlowError(f"profile {os.fspath(path)} is not JSON: {e}") from None
    return Profile.from_json(doc, f"profile {os.fspath(path)}")


# -- the instrumented run --------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on a stream (stderr), drawn only when enabled."""

    def __init__(self, total: int | None, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.enabled, self.stream, self.done = total, enabled, stream or sys.stderr, 0

    def step(self, label: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.total:
            filled = int(30 * self.done / self.total)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
        else:
            bar = f"{self.done} samples"
        self.stream.write(f"\rprofiling {bar} {label[-40:]:40s}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


def instrument(fn: Function) -> dict[str, str]:
    """Mark every profiled node result as an output of ``fn``; value name -> output name to read it from."""
    read_from: dict[str, str] = {}
    taken = {n for n, _ in fn.outputs}
    for name, (value, info) in profiled_values(fn).items():
        if isinstance(value, Placeholder):
            continue
        if info.output:
            read_from[name] = info.output
            continue
        out = PREFIX + name
        while out in taken:
            out += "_"
        taken.add(out)
        fn.set_output(out, value)
        read_from[name] = out
    return read_from


#: what runs one sample: its feeds -> (the instrumented network for their shapes, its values, value -> output)
Lookup = Callable[[Mapping[str, np.ndarray]], tuple[Any, dict[str, ValueInfo], Mapping[str, str]]]


def merge_info(had: ValueInfo | None, now: ValueInfo) -> ValueInfo:
    """One value seen in the graphs of two shapes: the same value, its shape -1 on the axes that differ."""
    if had is None or had.shape == now.shape:
        return now if had is None else had
    if len(had.shape) != len(now.shape):
        return dataclasses.replace(had, shape=(-1,) * len(now.shape))
    return dataclasses.replace(had, shape=tuple(h if h == n else -1 for h, n in zip(had.shape, now.shape)))


def run_profile(lookup: Lookup, samples: Iterable[tuple[str, Mapping[str, np.ndarray]]], progress: Progress,
                bins: int = DEFAULT_BINS) -> tuple[dict[str, ValueInfo], dict[str, ValueRecord], int, list[str]]:
    """Run every sample on the network ``lookup`` gives for it, accumulating one record per value name (whatever
    the shapes the samples have: a value's range does not depend on them)."""
    from glow_core.quantization.histogram import Histogram

    infos: dict[str, ValueInfo] = {}
    records: dict[str, ValueRecord] = {}
    labels: list[str] = []
    for label, feeds in samples:
        try:
            net, fn_infos, read_from = lookup(feeds)
            checked = net.check_feeds(feeds)
        except InputError as e:
            raise InputError(f"sample {label}: {e}", hint=e.hint) from None
        outs = net.run(checked)
        for name, info in fn_infos.items():
            infos[name] = merge_info(infos.get(name), info)
            if name not in records:
                records[name] = ValueRecord(histogram=Histogram(bins))
            records[name].add(np.asarray(checked[name] if info.kind == "input" else outs[read_from[name]]))
        labels.append(label)
        progress.step(label)
    progress.close()
    if not labels:
        raise InputError("no samples to profile", hint="give a folder of .npy/.npz/image files or an .npz file")
    return infos, records, len(labels), labels


@dataclass
class Instrumented:
    """A prepared function compiled with every profiled value exposed: the network, those values, value -> the
    output that exposes it, and the prepared graph's fingerprints with and without shapes."""

    net: Any
    infos: dict[str, ValueInfo]
    read_from: dict[str, str]
    fingerprint: str
    shape_free: str

    def parts(self) -> tuple[Any, dict[str, ValueInfo], Mapping[str, str]]:
        """What a :data:`Lookup` returns."""
        return self.net, self.infos, self.read_from


def _instrumented(fn: Function, be: Backend, threads: int | None) -> Instrumented:
    """``fn`` prepared for ``be`` (the graph the int8 conversion sees), instrumented and compiled."""
    fn = prepare_function(fn, be, quantizable=True)
    check_support(fn, be)
    fps = fingerprint(fn, be.name), fingerprint(fn, be.name, shapes=False)
    infos = {n: info for n, (_, info) in profiled_values(fn).items()}
    read_from = instrument(fn)
    return Instrumented(compile_prepared(fn, be, threads=threads), infos, read_from, *fps)


def sample_types(symbols: ModelSymbols, shapes: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the samples of each input must be: its type where ``shapes`` or the dims fix its shape, else a
    :class:`~.data.SampleType` with -1 on the open axes (samples of different shapes then conform)."""
    from glow_core.quantization.data import SampleType

    fixed = symbols.resolve(shapes)
    out: dict[str, Any] = {}
    for name, inp in symbols.inputs.items():
        try:
            elem = ElemKind(inp.elem)
        except ValueError:
            raise InputError(f"input '{name}' has element type {inp.elem}, which glow cannot profile") from None
        if name in fixed:
            out[name] = TensorType(elem, fixed[name])
            continue
        dims = None if inp.dims is None else tuple(
            d.size if d.size is not None else _size(symbols.dims.get(d.symbol or "")) for d in inp.dims)
        out[name] = SampleType(elem, dims, inp.describe())
    return out


def _size(value: Any) -> int:
    return value if isinstance(value, int) else -1


def _symbolic_lookup(proto: onnx.ModelProto, symbols: ModelSymbols, shapes: Mapping[str, Any] | None, be: Backend,
                     threads: int | None) -> tuple[Lookup, list[str]]:
    """The lookup of a model with open symbols: an instrumented network per input signature, compiled when a
    sample of that signature first comes, in the bounded LRU of a DynamicNetwork (glow_core/pipeline/specialize.py;
    the weights read once); and the shape-free fingerprint of the first (filled in by the first compile)."""
    stripped, weights = split_weights(proto)
    given = dict(shapes or {})
    first: list[str] = []

    def build(spec: dict[str, tuple[int, ...]], bind: dict[str, np.ndarray]) -> CompiledNetwork:
        fn = OnnxImporter(stripped, InputShapes({**given, **spec}, symbols.dims), bind or None, weights=weights).run()
        made = _instrumented(fn, be, threads)
        made.net.profiled = made  # (what the lookup reads back from the specialization the LRU gives)
        if not first:
            first.append(made.shape_free)
        return made.net

    dyn = DynamicNetwork(symbols, [o.name for o in proto.graph.output], build)

    def lookup(feeds: Mapping[str, np.ndarray]) -> tuple[Any, dict[str, ValueInfo], Mapping[str, str]]:
        made: Instrumented = dyn.specialization(feeds).profiled  # type: ignore[attr-defined]
        return made.parts()

    return lookup, first


def profile(model: Any, data: Any, backend: str = "interpreter",
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            *, image: Any = None, progress: bool | None = None, bins: int = DEFAULT_BINS,
            threads: int | None = None) -> Profile:
    """Profile ``model`` on ``data`` for ``backend``; see docs/quantization.md.

    ``data`` is a path (a folder of .npy/.npz/image files, or one .npz/.npy with
    samples along axis 0), a mapping input name -> array with samples along axis
    0, or an iterable of feed dicts. ``image`` is an
    :class:`~glow_core.quantization.data.ImageOptions` for image folders.
    ``progress`` None draws the bar only when stderr is a terminal.

    A model with symbolic dims that ``input_shapes`` (and its dims) leave open is profiled at the shapes of
    the samples, which may differ: an instrumented network per shape, one record per value for all of them
    (a :class:`Profile` with ``symbolic``), which quantizes the model at every shape.
    """
    from glow_core.quantization.data import open_samples

    if not isinstance(bins, int) or isinstance(bins, bool) or not 16 <= bins <= 1 << 16:
        raise InputError(f"bins must be an integer in [16, 65536], got {bins!r}")
    be = get_backend(backend)
    check_threads(threads)
    shapes = check_input_shapes(input_shapes)
    proto, _ = load_model(check_model_arg(model))
    symbols = ModelSymbols(proto, dims_of(shapes))
    symbolic = bool(symbols.open_inputs(shapes))
    if symbolic:
        lookup, first = _symbolic_lookup(proto, symbols, shapes, be, threads)
        source = open_samples(data, sample_types(symbols, shapes), image)
    else:
        probe = import_function(proto, shapes)
        source = open_samples(data, {p.name: p.type for p in probe.inputs}, image)
        made = _instrumented(probe, be, threads)
        first = [made.fingerprint]

        def lookup(_: Mapping[str, np.ndarray]) -> tuple[Any, dict[str, ValueInfo], Mapping[str, str]]:
            return made.parts()
    show = sys.stderr.isatty() if progress is None else bool(progress)
    infos, records, n, labels = run_profile(lookup, source, Progress(source.count, show), bins)
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else ""
    return Profile(be.name, first[0], infos, records, n, label, bins, labels, symbolic=symbolic)
