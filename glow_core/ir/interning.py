"""Constants shared by content: one read-only array per distinct content in the process.

A table keyed by element type, shape and a digest of the bytes, held weakly: :func:`intern` returns the
array already entered for the same content (so two imports of one model, or the probe and bound
versions a symbolic compile prepares, hold one copy of each large weight and of each large folded
constant, such as a transposed weight), freed when the last graph or network reading it is.
``importer/weights.py`` enters the weights it reads here; constant folding enters large results.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Callable

import numpy as np

#: constants smaller than this are not worth a digest
MIN_SHARED_BYTES = 16384

_TABLE: weakref.WeakValueDictionary[tuple[str, tuple[int, ...], str], np.ndarray] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def _key(dtype: np.dtype, shape: tuple[int, ...], data: memoryview | bytes) -> tuple[str, tuple[int, ...], str]:
    return dtype.str, shape, hashlib.sha1(data).hexdigest()


def _share(key: tuple[str, tuple[int, ...], str], make: Callable[[], np.ndarray]) -> np.ndarray:
    """The table's array for ``key``, or ``make()`` (an array that owns its memory, made read-only) entered
    under it. The table holds arrays that own their memory: every view of one keeps it alive (numpy points
    a view's ``base`` at the owner), so an entry lives exactly as long as a graph or network reads it."""
    with _LOCK:
        hit = _TABLE.get(key)
    if hit is not None:
        return hit
    own = make()
    own.setflags(write=False)
    with _LOCK:
        return _TABLE.setdefault(key, own)


def intern(a: np.ndarray) -> np.ndarray:
    """A read-only array equal to ``a`` (same dtype, shape and bytes), shared with every other caller that
    interned the same content; ``a`` itself when it is too small to be worth a digest."""
    if a.nbytes < MIN_SHARED_BYTES or a.dtype.hasobject:
        return a
    c = np.ascontiguousarray(a)
    key = _key(c.dtype, tuple(c.shape), memoryview(c.reshape(-1).view(np.uint8)))
    if c.flags.owndata and c.flags.writeable and c is a:  # (the caller's own new array: no copy)
        c.setflags(write=False)
    return _share(key, lambda: c if c.flags.owndata and not c.flags.writeable else c.copy())


__all__ = ["MIN_SHARED_BYTES", "intern"]
