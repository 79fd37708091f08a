"""One compile cache for everything that compiles per input signature and binds inputs that decide
shapes: the ONNX backend interface's prepared model (``glow_core.onnx_backend``) and each program of
a model split at run-time control flow (:mod:`.program`).

A :class:`BindingCache` keeps an LRU of compiled results keyed by (input signature, values of the
bound inputs). On a miss it calls ``build(bound)``; a :class:`~glow_core.errors.DynamicValueError`
names the inputs that decide shapes, which are bound (compile-time constants from the values passed)
and the build is tried again. The bound set only grows and is shared by every thread: it is read and
changed under the lock, and a retry that another thread made needless (it bound the same input
meanwhile) is not an error.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, Mapping, TypeVar

import numpy as np

from glow_core.errors import DynamicValueError

T = TypeVar("T")


def digest(a: np.ndarray) -> str:
    """A key for the value of a bound input (its bytes, dtype and shape)."""
    return hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest() + str(a.dtype) + str(a.shape)


def signature_key(feeds: Mapping[str, np.ndarray], signatures: Mapping[str, object]) -> Hashable:
    """The cache key of a compile for ``feeds``: each array's shape and dtype, and each input's signature (a
    shape, or a sequence / optional input's structure)."""
    return (tuple((n, tuple(a.shape), str(a.dtype)) for n, a in sorted(feeds.items())),
            tuple(sorted((n, repr(s)) for n, s in signatures.items())))


class BindingCache(Generic[T]):
    """An LRU of ``size`` compiled results; binds shape-deciding inputs and builds again (thread-safe)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._bound: set[str] = set()
        self._entries: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def bound(self) -> set[str]:
        """The inputs found to decide shapes so far."""
        with self._lock:
            return set(self._bound)

    def bind(self, names: set[str] | list[str]) -> None:
        with self._lock:
            self._bound.update(names)

    def entries(self) -> list[T]:
        """The compiled results kept, oldest first."""
        with self._lock:
            return list(self._entries.values())

    def get(self, signature: Hashable, values: Mapping[str, np.ndarray], build: Callable[[list[str]], T]) -> T:
        """The result for ``signature`` and the values of the bound inputs among ``values``; on a miss
        ``build(bound input names)`` compiles it."""
        while True:
            with self._lock:  # other threads add to _bound while this one compiles
                bound = sorted(n for n in self._bound if n in values)
            key = (signature, tuple((n, digest(values[n])) for n in bound))
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    self._entries.move_to_end(key)
                    return hit
            try:
                result = build(bound)
            except DynamicValueError as e:
                # new relative to what this attempt bound (another thread may have bound them meanwhile);
                # each retry binds strictly more, so the loop ends
                new = [p for p in e.placeholders if p in values and p not in bound]
                if not new:
                    raise
                self.bind(new)
                continue
            with self._lock:
                self._entries[key] = result
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
            return result
