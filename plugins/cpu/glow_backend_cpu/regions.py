"""Constant regions shared between executables: one copy of the weights for every compile of a model.

A :class:`~glow_backend_cpu.runtime.CpuExecutable` reads two constant regions: the graph constants its
kernels read (``regions[0]``) and the constants emitters packed at compile time (``regions[3]``,
``pack.py``). Compiles of one model at several shapes (the core's specializations of a model with
symbolic dims) or several compiles of the same file hold the same weights; each executable used to
fill regions of its own. Here a region is built once per content and shared, held weakly: it is freed
with the last executable that reads it (so the table is bounded by what is alive).

- the graph-constant region is keyed by the layout's offsets and the identity of the payloads placed
  there (the core hands every compile of a model the same read-only weight arrays; the region keeps
  them alive, so an identity cannot be reused while the key exists);
- the packed region is keyed by a digest of the packed bytes (each compile packs afresh); the layout's
  copy of those bytes is then replaced by views of the shared region.

Both regions are read-only for the code (no kernel writes a constant).
"""

from __future__ import annotations

import hashlib
import mmap
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from glow_backend_cpu import chunks
from glow_backend_cpu.codegen import Layout
from glow_core import budget

#: bytes of packed constants placed between two returns of the freed heap to the system
TRIM_EVERY = 64 << 20
#: makes an aligned, uninitialized byte buffer of the given size (``runtime.aligned_empty``)
Alloc = Callable[[int], np.ndarray]


class Region:
    """A constant region: ``array`` (uint8) and what must stay alive with it (payloads, a file mapping)."""

    __slots__ = ("array", "keep", "__weakref__")

    def __init__(self, array: np.ndarray, keep: list[Any]) -> None:
        self.array = array
        self.keep = keep

    @property
    def mapping(self) -> mmap.mmap | None:
        """The cache file's mapping the region reads, when it is one."""
        return next((k for k in self.keep if isinstance(k, mmap.mmap)), None)


_TABLE: weakref.WeakValueDictionary[Hashable, Region] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def _shared(key: Hashable | None, make: Callable[[], Region]) -> Region:
    """The live region for ``key``, or ``make()`` entered under it (``key`` None: never shared)."""
    if key is None:
        return make()
    with _LOCK:
        hit = _TABLE.get(key)
    if hit is not None:
        return hit
    region = make()
    region.array.setflags(write=False)
    with _LOCK:
        return _TABLE.setdefault(key, region)


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def const_region(layout: Layout, constants: Mapping[str, np.ndarray], alloc: Alloc) -> Region:
    """The graph-constant region of ``layout`` filled from ``constants`` (shared with every executable whose
    layout places the same payload arrays at the same offsets). KeyError names a missing constant."""
    placed = [(off, constants[name]) for name, off in sorted(layout.const_offsets.items(), key=lambda kv: kv[1])]
    key = ("const", layout.const_bytes,
           tuple((off, _address(p), p.nbytes, p.dtype.str, p.shape, p.strides) for off, p in placed))

    def make() -> Region:
        buf = alloc(max(layout.const_bytes, 1))
        for off, payload in placed:
            raw = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
            buf[off:off + raw.size] = raw
        budget.release_pages()  # (weights read from a mapped model file: their pages need not stay)
        return Region(buf, [p for _, p in placed])

    return _shared(key, make)


#: the digest of each live layout's packed constants (by id), computed once or read with a cached layout
_DIGESTS: dict[int, str] = {}


def remember_digest(layout: Layout, digest: str | None) -> None:
    """Record the packed digest of ``layout`` (stored with a cached layout, whose bytes stay in the image file)."""
    if digest and id(layout) not in _DIGESTS:
        _DIGESTS[id(layout)] = digest
        weakref.finalize(layout, _DIGESTS.pop, id(layout), None)


def packed_digest(layout: Layout) -> str | None:
    """A digest of the packed constants' bytes and offsets (None when neither the layout's bytes nor a recorded
    digest give it)."""
    known = _DIGESTS.get(id(layout))
    if known is not None or not layout.packed:
        return known
    h = hashlib.sha1(str(layout.packed_bytes).encode())
    if len(layout.packed_chunks) == len(layout.packed):  # (each chunk's digest, computed as it was packed)
        for off, n, d in layout.packed_chunks:
            h.update(f"|{off}:{n}:{d}|".encode())
    else:
        for off, data in layout.packed:
            h.update(f"|{off}:{len(data)}|".encode())
            h.update(data)
    digest = h.hexdigest()
    remember_digest(layout, digest)
    return digest


def packed_region(layout: Layout, image: str | None, alloc: Alloc) -> Region:
    """The packed-constant region: mapped read-only from the cache's image file ``image`` (no copy) or
    filled from the layout, shared by content; the layout's bytes become views of it."""
    digest = packed_digest(layout)
    key: Hashable | None = ("packed", digest) if digest is not None else \
        (("image", image) if image is not None else None)

    def make() -> Region:
        if image is not None and layout.packed_bytes:
            with open(image, "rb") as f:
                mapped = mmap.mmap(f.fileno(), layout.packed_bytes, access=mmap.ACCESS_READ)
            return Region(np.frombuffer(mapped, dtype=np.uint8), [mapped])
        buf = alloc(max(layout.packed_bytes, 1))
        view = memoryview(buf)
        placed = 0
        for k, (off, data) in enumerate(layout.packed):
            buf[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)
            layout.packed[k] = (off, view[off:off + len(data)])  # (each packed copy freed once placed: never two)
            placed += len(data)
            if placed >= TRIM_EVERY:  # (and given back to the system as we go)
                budget.trim_heap()
                placed = 0
        return Region(buf, [])

    region = _shared(key, make)
    chunks.register(region.array, layout.packed_chunks, region.keep)  # (a later compile's chunks find these)
    if digest is not None and layout.packed:  # one copy: the layout reads the shared region from now on
        view = memoryview(region.array)
        layout.packed = [(off, view[off:off + len(data)]) for off, data in layout.packed]
    return region


__all__ = ["Region", "const_region", "packed_digest", "packed_region"]
