"""The inputs and outputs of a function compiled for symbolic dims, moved with as few copies as they allow.

Such a function keeps every input and output at its bound shape (``symbolic.py``), so a feed of a smaller
shape has other strides than the buffer the kernels read: it is copied into the leading corner of that
buffer. A GPT-2 decode step at 512 cached positions feeds 24 KV tensors (36 MB) and returns 24 (38 MB),
and both copies took 6.8 ms of a 33.7 ms step. Two things make them cheaper:

- **Large outputs are handed over, not copied out.** Each large output is written by the kernels into a
  buffer of its own (``HandedBuffers``: page-aligned anonymous mappings, so only the pages a run writes
  become resident) and returned as the view of its leading corner. The buffer goes back to its pool only
  when no view of it is left (its reference count), so a returned array never changes under its holder.
  The arrays are views with the bound shape's strides: not C-contiguous when an inner axis is symbolic.
- **Large feeds are copied by two threads** (numpy releases the GIL while it copies): ``copy_feeds``.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

#: outputs at least this large (bytes, at the bound shape) are handed over rather than copied out
HANDED_BYTES = 256 * 1024
#: feeds copied by two threads once they hold this many bytes together
PARALLEL_COPY_BYTES = 2 * 1024 * 1024
#: buffers kept per output for reuse (more in use at once are made, and freed when their views go)
POOL_SIZE = 3

_helper: ThreadPoolExecutor | None = None


def _mapped(nbytes: int) -> np.ndarray:
    """A page-aligned byte array over an anonymous private mapping (zeros until written)."""
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8)


def _baseline() -> int:
    """The reference count of a pooled buffer that no view holds, seen as ``HandedBuffers`` sees it: from a
    loop over its pool (the same code shape, so the same references)."""
    pool = [_mapped(1)]
    for owner in pool:
        return sys.getrefcount(owner)
    raise AssertionError("unreachable")


_BASELINE = _baseline()


class HandedBuffers:
    """Per large output of one executable: a small pool of bound-shaped buffers the kernels write and the
    caller receives views of."""

    def __init__(self) -> None:
        self._pools: dict[int, list[np.ndarray]] = {}

    def take(self, region: int, nbytes: int) -> np.ndarray:
        """A byte buffer of ``nbytes`` for ``region`` that no handed-out view refers to."""
        pool = self._pools.setdefault(region, [])
        for owner in pool:
            if sys.getrefcount(owner) <= _BASELINE:  # the views handed out hold it as their base
                return owner
        owner = _mapped(nbytes)
        if len(pool) < POOL_SIZE:
            pool.append(owner)
        return owner

    def pooled(self) -> int:
        """How many buffers the pools keep (tests)."""
        return sum(len(pool) for pool in self._pools.values())

    def held(self) -> int:
        """How many pooled buffers a caller's view still holds (tests)."""
        held = 0
        for pool in self._pools.values():
            for owner in pool:
                held += sys.getrefcount(owner) > _BASELINE
        return held


def handed_view(owner: np.ndarray, dtype: np.dtype, bound: tuple[int, ...], corner: tuple[slice, ...]) -> np.ndarray:
    """The caller's array: the leading corner of ``owner`` seen at the bound shape (its ``base`` is ``owner``)."""
    nbytes = int(np.prod(bound, dtype=np.int64)) * dtype.itemsize
    return owner[:nbytes].view(dtype).reshape(bound)[corner]


def _copy_all(pairs: Sequence[tuple[np.ndarray, tuple[slice, ...], np.ndarray]]) -> None:
    for buf, corner, a in pairs:
        buf[corner] = a


def copy_feeds(pairs: Sequence[tuple[np.ndarray, tuple[slice, ...], np.ndarray]], parallel: bool) -> None:
    """``buf[corner] = a`` for each (buf, corner, a); split by bytes over this thread and a helper thread
    when ``parallel`` and the feeds are large together."""
    total = sum(a.nbytes for _, _, a in pairs)
    if not parallel or total < PARALLEL_COPY_BYTES or len(pairs) < 2:
        _copy_all(pairs)
        return
    global _helper
    if _helper is None:
        _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glow-cpu-copy")
    mine: list[tuple[np.ndarray, tuple[slice, ...], np.ndarray]] = []
    theirs: list[tuple[np.ndarray, tuple[slice, ...], np.ndarray]] = []
    mine_bytes = 0
    for p in sorted(pairs, key=lambda p: -p[2].nbytes):  # the largest first, to this thread until half
        if mine_bytes < total / 2:
            mine.append(p)
            mine_bytes += p[2].nbytes
        else:
            theirs.append(p)
    done: Future[None] = _helper.submit(_copy_all, theirs)
    try:
        _copy_all(mine)
    finally:
        done.result()


__all__ = ["HANDED_BYTES", "HandedBuffers", "copy_feeds", "handed_view"]
