"""Large outputs handed to the caller instead of copied: pooled buffers the kernels write in place.

A run's large outputs used to be fresh arrays (a static function: ``aligned_empty`` per run) or copies out of
the leading corner of a bound-shaped buffer (a function compiled for symbolic dims). Both cost the system's
page faults for every page of every run's results, and the second a copy as well: a GPT-2 decode step at 512
cached positions returns 24 KV tensors (38 MB), and copying them out took more of the step than the kernels
that wrote them.

Now each large output is written by the kernels into a buffer of its own, taken from a small pool per output
(``HandedBuffers``: page-aligned anonymous mappings, so only the pages a run writes become resident), and the
caller receives a view of it: the whole buffer (a static function: a contiguous array) or the leading corner
of its bound shape (symbolic dims: the bound's strides, not C-contiguous when an inner axis is symbolic).

A buffer goes back to work only when no view of it is left. Every view of a handed array (a slice of it, a
reshape, ``np.asarray``) keeps the pooled array as its ``base``, so its reference count says whether a
caller still holds any: a result never changes under its holder, however many later runs there are.
"""

from __future__ import annotations

import functools
import mmap
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: outputs at least this large (bytes, at the bound shape) are handed over rather than copied out
HANDED_BYTES = 256 * 1024
#: buffers kept per output for reuse (more held at once are made as needed, freed when their views go)
POOL_SIZE = 3
#: feeds of a run at least this large in total (bytes) are copied into their padded buffers by two threads
#: (below it, handing half to a second thread costs about what it saves: a GPT-2 step at 64 positions
#: copies 4.7 MB in 0.5 ms either way; at 400 positions, 29 MB in 4.6 ms alone, 2.4 ms with two)
PARALLEL_FEED_BYTES = 8 << 20


def _mapped(nbytes: int) -> np.ndarray:
    """A page-aligned byte array over an anonymous private mapping, at least ``nbytes`` long (zeros until
    written): the system supplies a page when it is first written, so what a run never touches costs no memory
    (``np.zeros`` may instead reuse, and clear, heap pages). Handed views keep this array as their ``base``."""
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)


def _unheld_count() -> int:
    """The reference count ``HandedBuffers`` sees for a pooled buffer that no view holds, measured with the same
    code shape (the pool's list, the loop's variable, the call's argument)."""
    pool = [_mapped(1)]
    for owner in pool:
        return sys.getrefcount(owner)
    raise AssertionError("unreachable")


_UNHELD = _unheld_count()


def zero_pages(nbytes: int) -> np.ndarray:
    """Exactly ``nbytes`` of zeros in an anonymous private mapping (page aligned): :func:`_mapped`, sliced."""
    return _mapped(nbytes)[:nbytes]


class HandedBuffers:
    """Per large output of one executable (keyed by its region): a small pool of byte buffers the kernels write
    and the caller receives views of."""

    def __init__(self) -> None:
        self._pools: dict[int, list[np.ndarray]] = {}

    def take(self, region: int, nbytes: int) -> np.ndarray:
        """A byte buffer of at least ``nbytes`` for ``region`` that no handed-out view refers to."""
        pool = self._pools.setdefault(region, [])
        for owner in pool:
            if sys.getrefcount(owner) <= _UNHELD and owner.nbytes >= nbytes:
                return owner
        owner = _mapped(nbytes)
        if len(pool) < POOL_SIZE:
            pool.append(owner)
        return owner

    def held(self) -> int:
        """How many pooled buffers a caller's view still holds."""
        return sum(sys.getrefcount(owner) > _UNHELD for pool in self._pools.values() for owner in pool)

    def pooled(self) -> int:
        """How many buffers the pools keep."""
        return sum(len(pool) for pool in self._pools.values())


@functools.lru_cache(maxsize=256)
def _c_strides(bound: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-contiguous array of shape ``bound``."""
    out, step = [], itemsize
    for n in reversed(bound):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def handed_view(owner: np.ndarray, dtype: np.dtype, bound: tuple[int, ...],
                shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The caller's array: ``owner`` seen as ``dtype`` at the shape ``bound``, or its leading corner of ``shape``
    (with the bound's strides; its ``base`` is ``owner``, as is every view the caller makes of it). One array
    constructor: a run hands out a view per large output."""
    return np.ndarray(bound if shape is None else shape, dtype, owner, 0, _c_strides(bound, dtype.itemsize))


_helper: ThreadPoolExecutor | None = None
_helper_lock = threading.Lock()


def _forget_helper() -> None:
    """In a forked child the helper thread does not exist: make a new one on first use."""
    global _helper, _helper_lock
    _helper, _helper_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_helper)


def _second_thread() -> ThreadPoolExecutor:
    """The process's one helper thread for feed copies (made on first use)."""
    global _helper
    with _helper_lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glow-feed-copy")
        return _helper


def _halves(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[list, list]:
    """``pairs`` (destination, source) in two lists of about equal bytes; a pair larger than half the total
    is split along its first axis longer than 1."""
    total = sum(src.nbytes for _, src in pairs)
    work: list[tuple[np.ndarray, np.ndarray]] = []
    for dst, src in pairs:
        axis = next((k for k, n in enumerate(src.shape) if n > 1), None)
        if 2 * src.nbytes > total and axis is not None:
            mid = src.shape[axis] // 2
            cut = (slice(None),) * axis
            work += [(dst[cut + (slice(0, mid),)], src[cut + (slice(0, mid),)]),
                     (dst[cut + (slice(mid, None),)], src[cut + (slice(mid, None),)])]
        else:
            work.append((dst, src))
    work.sort(key=lambda p: -p[1].nbytes)
    first: list[tuple[np.ndarray, np.ndarray]] = []
    second: list[tuple[np.ndarray, np.ndarray]] = []
    load = [0, 0]
    for pair in work:  # the larger pieces first, each to the lighter side
        side = 0 if load[0] <= load[1] else 1
        (first, second)[side].append(pair)
        load[side] += pair[1].nbytes
    return first, second


def _copy_all(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    for dst, src in pairs:
        dst[...] = src


def copy_feeds(pairs: Sequence[tuple[np.ndarray, np.ndarray]], threads: int) -> None:
    """``dst[...] = src`` for each pair: by two threads (this one and the helper) when ``threads`` allows it and
    the total is at least :data:`PARALLEL_FEED_BYTES` (numpy releases the GIL while it copies)."""
    if threads < 2 or sum(src.nbytes for _, src in pairs) < PARALLEL_FEED_BYTES:
        _copy_all(pairs)
        return
    first, second = _halves(pairs)
    done = _second_thread().submit(_copy_all, second)
    try:
        _copy_all(first)
    finally:
        done.result()


__all__ = ["HANDED_BYTES", "PARALLEL_FEED_BYTES", "POOL_SIZE", "HandedBuffers", "copy_feeds", "handed_view"]
