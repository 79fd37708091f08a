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

import hashlib
import json
import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from glow_core.errors import GlowError, GlowWarning, InputError
from glow_core.ir.graph import Function, Placeholder, Value
from glow_core.pipeline import check_support, check_threads, compile_prepared, import_function, prepare_function
from glow_core.plugin_host import get_backend
from glow_core.quantization.histogram import DEFAULT_BINS, ValueRecord

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

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "model": self.model, "backend": self.backend,
                "fingerprint": self.fingerprint, "samples": self.samples, "histogram_bins": self.bins,
                "values": {n: {**self.infos[n].to_json(), **self.records[n].to_json()} for n in self.infos}}

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
                           str(doc.get("model", "")), bins)
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


def fingerprint(fn: Function, backend: str) -> str:
    """sha256 over the backend name and the graph's inputs, nodes (kind, origin, names, types) and outputs."""
    h = hashlib.sha256()

    def put(*parts: object) -> None:
        h.update(("\x1f".join(str(p) for p in parts) + "\x1e").encode())

    put("backend", backend)
    for p in fn.inputs:
        put("input", p.name, p.type)
    for node in fn.nodes:
        put("node", node.kind.name, node.origin, node.name, *(v.name if v is not None else "-" for v in node.inputs),
            *(f"{o.name}:{o.type}" for o in node.outputs))
    for name, v in fn.outputs:
        put("output", name, v.name)
    return h.hexdigest()


def _differences(had: Mapping[str, ValueInfo], now: Mapping[str, ValueInfo]) -> list[str]:
    """What differs between the values a profile describes and those of a graph (first five of each)."""
    both = [n for n in now if n in had]
    found = {
        "values missing from the profile": [n for n in now if n not in had],
        "values not in this graph": [n for n in had if n not in now],
        "different shapes": [f"{n} {list(had[n].shape)} vs {list(now[n].shape)}" for n in both
                             if (had[n].shape, had[n].elem) != (now[n].shape, now[n].elem)],
        "different kinds": [f"{n} {had[n].kind} vs {now[n].kind}" for n in both if had[n].kind != now[n].kind],
    }
    return [f"{label}: " + ", ".join(items[:5]) + (f" (+{len(items) - 5} more)" if len(items) > 5 else "")
            for label, items in found.items() if items]


def check_profile(profile: Profile, fn: Function, where: str = "profile") -> None:
    """Raise :class:`ProfileMismatchError` naming what differs when ``profile`` was not made on ``fn`` (the same
    graph, made for the same backend)."""
    if profile.fingerprint == fingerprint(fn, profile.backend):
        return
    problems = _differences(profile.infos, {n: info for n, (_, info) in profiled_values(fn).items()})
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
        elif (profile.infos[src].shape, profile.infos[src].elem) != (info.shape, info.elem):
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
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read profile {os.fspath(path)}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise GlowError(f"profile {os.fspath(path)} is not JSON: {e}") from None
    profile = Profile.from_json(doc, f"profile {os.fspath(path)}")
    return match_profile(profile, fn, backend, f"profile {os.fspath(path)}")


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


def run_profile(net: Any, fn_infos: dict[str, ValueInfo], read_from: Mapping[str, str],
                samples: Iterable[tuple[str, Mapping[str, np.ndarray]]], progress: Progress,
                bins: int = DEFAULT_BINS) -> tuple[dict[str, ValueRecord], int, list[str]]:
    """Run ``net`` on every sample, accumulating a record per value."""
    from glow_core.quantization.histogram import Histogram

    records = {n: ValueRecord(histogram=Histogram(bins)) for n in fn_infos}
    labels: list[str] = []
    for label, feeds in samples:
        try:
            checked = net.check_feeds(feeds)
        except InputError as e:
            raise InputError(f"sample {label}: {e}", hint=e.hint) from None
        outs = net.run(checked)
        for name, info in fn_infos.items():
            arr = checked[name] if info.kind == "input" else outs[read_from[name]]
            records[name].add(np.asarray(arr))
        labels.append(label)
        progress.step(label)
    progress.close()
    if not labels:
        raise InputError("no samples to profile", hint="give a folder of .npy/.npz/image files or an .npz file")
    return records, len(labels), labels


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
    """
    from glow_core.quantization.data import open_samples

    if not isinstance(bins, int) or isinstance(bins, bool) or not 16 <= bins <= 1 << 16:
        raise InputError(f"bins must be an integer in [16, 65536], got {bins!r}")
    be = get_backend(backend)
    check_threads(threads)
    probe = import_function(model, input_shapes)
    source = open_samples(data, {p.name: p.type for p in probe.inputs}, image)
    fn = prepare_function(probe, be, quantizable=True)  # the graph the int8 conversion sees
    check_support(fn, be)
    fp = fingerprint(fn, be.name)
    infos = {n: info for n, (_, info) in profiled_values(fn).items()}
    read_from = instrument(fn)
    net = compile_prepared(fn, be, threads=threads)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    records, n, labels = run_profile(net, infos, read_from, source, Progress(source.count, show), bins)
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else ""
    return Profile(be.name, fp, infos, records, n, label, bins, labels)
