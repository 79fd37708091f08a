"""The cpu backend's side of the program cache (``glow_core/compilecache.py``): a compile served before import.

A program entry lives in the object cache's folder (so ``glow cache info`` /
``clear`` and the size limit cover it) as ``p-KEY.json`` (metadata) and
``p-KEY.bin`` (an image of the constant region: the graph constants the kernels
read, laid out as the layout says). It refers to the object entry of the same
compile (``cache.py``: object code, layout, packed constants), which is loaded
and checked as on an object-cache hit; an object entry evicted since is a miss.

The metadata holds the format number, the object entry's key, each constant's
offset and size in the region (checked against the region before anything is
copied), the executable's flags and the core's ``info``, and a digest of all
of it: a damaged, truncated or foreign file is a clean miss.

The identity (what a program depends on besides the model and the core) is the
host code generator's (triple, CPU name and features, optimization level,
llvmlite and LLVM versions), the backend's version and source digest, the cache
format, and the thread settings read from the environment.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from glow_backend_cpu import __version__
from glow_backend_cpu import cache as object_cache
from glow_backend_cpu.runtime import CpuExecutable, default_threads
from glow_backend_cpu.target import Library, host_codegen
from glow_core.errors import GlowError
from glow_core.ir.graph import Function
from glow_sdk.backend import CompiledFunction, CompileOptions

#: the layout of a program entry's metadata
FORMAT = 1
PREFIX = "p-"


def identity(options: CompileOptions) -> str | None:
    """What a program depends on besides the model and the core; None when the cache is off."""
    from glow_backend_cpu.backend import adaptive_threads, thread_options

    extra = dict(options.extra)
    if not (bool(extra.get("cache", True)) and object_cache.enabled()):
        return None
    threshold, solo_ns = thread_options(extra)
    return (f"cpu {__version__}|program {FORMAT}|objects {object_cache.FORMAT}|{object_cache.sources_digest()}|"
            f"{host_codegen().identity}|threshold {threshold}|solo {solo_ns}|"
            f"adaptive {adaptive_threads(extra, threshold)}")


def _paths(key: str) -> tuple[os.PathLike[str], os.PathLike[str]]:
    d = object_cache.cache_dir()
    return d / f"{PREFIX}{key}{object_cache.META}", d / f"{PREFIX}{key}{object_cache.IMAGE}"


def store(key: str, info: Mapping[str, Any], function: Function, exe: CompiledFunction) -> bool:
    """Store the program of ``exe`` (compiled from ``function``) under ``key``; False when it is not stored."""
    object_key = getattr(exe, "object_key", None)
    if not isinstance(exe, CpuExecutable) or not object_key or exe.layout.profile:
        return False
    layout = exe.layout
    payloads = {c.name: c.payload for c in function.constants}
    sizes = {name: int(np.asarray(payloads[name]).nbytes) for name in layout.const_offsets}
    meta: dict[str, Any] = {"format": FORMAT, "object_key": object_key, "const_bytes": layout.const_bytes,
                            "consts": {n: [layout.const_offsets[n], sizes[n]] for n in sorted(sizes)},
                            "flags": dict(exe.program_flags), "info": dict(info)}  # type: ignore[attr-defined]
    meta["check"] = object_cache.meta_check(meta)
    data = json.dumps(meta).encode()
    size = len(data) + layout.const_bytes
    limit = object_cache.max_bytes()
    if size > limit:
        return False
    meta_path, image = _paths(key)
    try:
        object_cache.cache_dir().mkdir(parents=True, exist_ok=True)
        object_cache.write_atomic(image, memoryview(exe._consts)[:layout.const_bytes])
        object_cache.write_atomic(meta_path, data)
    except OSError:
        return False
    object_cache.after_store(size, limit)
    return True


def _read_meta(key: str) -> dict[str, Any] | None:
    meta_path, _ = _paths(key)
    try:
        meta = json.loads(open(meta_path, "rb").read())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("check") != object_cache.meta_check(meta):
        return None
    return meta


def _consts(meta: Mapping[str, Any], region: np.ndarray, layout_offsets: Mapping[str, int]) -> dict[str, np.ndarray] | None:
    """Each constant as a view of the region image, when every offset and size lies inside it and matches the
    layout; else None."""
    consts = meta.get("consts")
    if not isinstance(consts, dict) or set(consts) != set(layout_offsets):
        return None
    out = {}
    for name, entry in consts.items():
        if not (isinstance(entry, list) and len(entry) == 2 and all(type(v) is int and v >= 0 for v in entry)):
            return None
        off, nbytes = entry
        if off != layout_offsets[name] or off + nbytes > region.size:
            return None
        out[name] = region[off:off + nbytes]
    return out


def load(key: str, options: CompileOptions,
         interface: Callable[[Mapping[str, Any]], Function | None]) -> tuple[Function, CompiledFunction] | None:
    """The function interface and executable stored under ``key``; None on any miss."""
    import time

    t0 = time.perf_counter()
    meta = _read_meta(key)
    if meta is None or not isinstance(meta.get("object_key"), str) or not isinstance(meta.get("flags"), dict):
        return None
    hit = object_cache.load(meta["object_key"])
    if hit is None:
        return None
    objects, layout, packed = hit
    _, image = _paths(key)
    if meta.get("const_bytes") != layout.const_bytes or not isinstance(meta.get("info"), dict):
        return None
    function = interface(meta["info"])
    if function is None:
        return None
    try:
        with open(image, "rb") as f:
            if os.fstat(f.fileno()).st_size != layout.const_bytes:
                return None
            region = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8) \
                if layout.const_bytes else np.zeros(0, np.uint8)
    except (OSError, ValueError):
        return None
    consts = _consts(meta, region, layout.const_offsets)
    if consts is None:
        return None
    cg = host_codegen()
    lib = cg.load(Library(function.name, objects[0], more_objects=objects[1:]))
    threads = int(options.threads or options.extra.get("threads") or default_threads())
    flags = meta["flags"]
    try:
        exe = CpuExecutable(function, lib, layout, consts, threads=threads, parallel=bool(flags.get("parallel")),
                            packed_image=str(packed) if layout.packed_bytes else None,
                            adaptive=bool(flags.get("adaptive")))
    except (OSError, KeyError, GlowError):
        return None  # an entry evicted under us, or an interface that does not match the layout
    try:
        os.utime(_paths(key)[0])  # the entry's last use, for LRU eviction (as an object-cache hit does)
    except OSError:
        pass
    exe.compile_timings = {"cached": True, "load": time.perf_counter() - t0}  # type: ignore[attr-defined]
    exe.object_key = meta["object_key"]  # type: ignore[attr-defined]
    exe.program_flags = dict(flags)  # type: ignore[attr-defined]
    return function, exe
