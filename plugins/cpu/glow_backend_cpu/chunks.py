"""Packed constants shared chunk by chunk: one copy of each packed weight in the process.

Every constant an executable reads from its packed region (the GEMM panels emitters pack, and the large
graph constants placed there: ``codegen.SHARED_CONST_BYTES``) is a *chunk* with a digest of its bytes.
The chunks of live packed regions are registered here, held weakly (a region keeps its chunks' views
alive): a later compile of the same weights (a prefill and a decode network of one model, each
specialization of a shape, a second compile of one file) finds each chunk it packs already in memory and
keeps a view of it instead of its own bytes, so its region is built from the same bytes and, when every
chunk matches, is the same region (``regions.packed_region``). Without this a compile first held its own
copy of every packed weight (hundreds of MB for a transformer) until the region was shared.

A chunk's digest is also what the region's key is made of (``regions.packed_digest``), so the bytes are
hashed once per compile.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence

import numpy as np

#: chunks smaller than this are neither looked up nor registered (not worth a digest)
MIN_SHARED = 64 << 10

_LIVE: weakref.WeakValueDictionary[tuple[str, int], np.ndarray] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def digest(data: bytes | memoryview) -> str:
    return hashlib.sha1(data).hexdigest()


def lookup(d: str, nbytes: int) -> memoryview | None:
    """A read-only view of a live chunk with digest ``d`` and ``nbytes`` bytes, or None."""
    if nbytes < MIN_SHARED:
        return None
    with _LOCK:
        hit = _LIVE.get((d, nbytes))
    return None if hit is None else memoryview(hit)


def register(array: np.ndarray, chunks: Sequence[tuple[int, int, str]], keep: list[object]) -> None:
    """Register the chunks ``(offset, bytes, digest)`` of the region ``array`` (uint8); ``keep`` (the region's
    list of what stays alive with it) holds their views."""
    with _LOCK:
        for off, n, d in chunks:
            if n < MIN_SHARED or (d, n) in _LIVE:
                continue
            view = array[off:off + n]
            keep.append(view)
            _LIVE[(d, n)] = view


__all__ = ["MIN_SHARED", "digest", "lookup", "register"]
