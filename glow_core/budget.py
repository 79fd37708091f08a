"""The memory budget: no tensor glow allocates for a model may exceed it.

A model file is untrusted input: a 1 KB model can ask for a 1 GiB constant and
fold it eight times, a window of 2**31 - 1 samples, or a 32768 x 32768
activation. Every tensor is checked *before* it is allocated:

- each initializer and each folded constant, and their running total,
- each activation (every node output the importer types),
- the regions a backend allocates for a run (the cpu backend's arena).

Two limits, each an integer number of bytes (a K, M, G or T suffix is accepted):

=========================  ==========================  ==========
what                       environment variable        default
=========================  ==========================  ==========
one tensor                 ``GLOW_MAX_TENSOR_BYTES``   2 GiB
all constants; one arena   ``GLOW_MAX_TOTAL_BYTES``    8 GiB
=========================  ==========================  ==========

``glow_core.compile(..., options={"max_tensor_bytes": N, "max_total_bytes": N})``
overrides them for one compile. Exceeding one raises :class:`~glow_core.errors.BudgetError`
naming the node, the tensor's type and its size.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import math
import os
import weakref
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

from glow_core.errors import BudgetError, ModelError

__all__ = ["Budget", "BudgetError", "Tally", "check_function", "current", "using"]

GiB = 1 << 30
DEFAULT_TENSOR_BYTES = 2 * GiB
DEFAULT_TOTAL_BYTES = 8 * GiB
ENV_TENSOR = "GLOW_MAX_TENSOR_BYTES"
ENV_TOTAL = "GLOW_MAX_TOTAL_BYTES"
OPTION_TENSOR = "max_tensor_bytes"
OPTION_TOTAL = "max_total_bytes"
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: Any, what: str) -> int:
    """``"1500000"``, ``"512M"``, ``"4G"`` or an int -> bytes (> 0)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = str(text).strip().upper().removesuffix("IB").removesuffix("B")
        unit = s[-1:] if s[-1:] in _SUFFIX and s[-1:] else ""
        try:
            value = int(float(s[:len(s) - len(unit)]) * _SUFFIX[unit])
        except ValueError:
            raise BudgetError(f"{what} = {text!r} is not a byte count", hint="give bytes, e.g. 4G or 500000000") from None
    if value <= 0:
        raise BudgetError(f"{what} = {text!r} must be positive")
    return value


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Budget:
    tensor_bytes: int = DEFAULT_TENSOR_BYTES
    total_bytes: int = DEFAULT_TOTAL_BYTES

    @classmethod
    def from_env(cls) -> "Budget":
        b = cls()
        if os.environ.get(ENV_TENSOR):
            b = replace(b, tensor_bytes=parse_bytes(os.environ[ENV_TENSOR], ENV_TENSOR))
        if os.environ.get(ENV_TOTAL):
            b = replace(b, total_bytes=parse_bytes(os.environ[ENV_TOTAL], ENV_TOTAL))
        return b

    def with_options(self, options: Mapping[str, Any] | None) -> "Budget":
        b = self
        for key, attr in ((OPTION_TENSOR, "tensor_bytes"), (OPTION_TOTAL, "total_bytes")):
            if options and options.get(key) is not None:
                b = replace(b, **{attr: parse_bytes(options[key], f"options['{key}']")})
        return b

    def check_tensor(self, shape: Any, itemsize: int, where: str, what: str = "a tensor") -> int:
        """The tensor's byte size; BudgetError when it is over the one-tensor limit (or a dim is negative)."""
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise ModelError(f"{where}: {what} has a negative dimension {dims}", hint="the model file is corrupt")
        nbytes = math.prod(dims) * int(itemsize)  # Python ints: no wrap-around
        if nbytes > self.tensor_bytes:
            raise BudgetError(
                f"{where}: {what} of shape {dims[:8]}{' ...' if len(dims) > 8 else ''} needs {format_bytes(nbytes)}, "
                f"over the {format_bytes(self.tensor_bytes)} limit for one tensor",
                hint=f"raise it with {ENV_TENSOR} or options={{'{OPTION_TENSOR}': N}} if the model is meant to be "
                     "this large",
            )
        return nbytes

    def check_total(self, total: int, where: str, what: str = "the model's constants") -> None:
        if total > self.total_bytes:
            raise BudgetError(
                f"{where}: {what} reach {format_bytes(total)}, over the {format_bytes(self.total_bytes)} limit",
                hint=f"raise it with {ENV_TOTAL} or options={{'{OPTION_TOTAL}': N}} if the model is meant to be "
                     "this large",
            )


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("glow_budget", default=None)


_LIBC: Any = None
#: what drops the pages of memory-mapped model files (``importer/mapped.py``), weakly held
#: the mappings of model files whose pages :func:`release_pages` drops (``importer/mapped.py``), held weakly
_MAPPED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def on_release_pages(owner: Any) -> None:
    """Register an object whose ``release()`` drops the resident pages of a mapped model file (while it lives)."""
    _MAPPED.add(owner)


def release_pages() -> None:
    """Drop the resident pages of every mapped model file (they are read again from the file when touched). A
    backend that copies weights into a form of its own (packed panels) calls this every few dozen MB it copied,
    so the weights' file pages do not pile up beside the copies."""
    for owner in list(_MAPPED):
        owner.release()


def trim_heap() -> None:
    """Return the C heap's free memory to the system (glibc's ``malloc_trim``; nothing elsewhere). After a
    large import and compile, the freed protobuf and packing buffers otherwise stay resident."""
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else False
        except OSError:
            lib = False
        _LIBC = lib if lib and hasattr(lib, "malloc_trim") else False
    if _LIBC:
        _LIBC.malloc_trim(0)


def current() -> Budget:
    """The budget in force: the one set by :func:`using`, else the environment's."""
    b = _CURRENT.get()
    return b if b is not None else Budget.from_env()


@contextlib.contextmanager
def using(budget: Budget) -> Iterator[Budget]:
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


class Tally:
    """A running total of bytes allocated for one import, checked at each addition."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.total = 0

    def add(self, shape: Any, itemsize: int, where: str, what: str = "a constant") -> None:
        self.total += self.budget.check_tensor(shape, itemsize, where, what)
        self.budget.check_total(self.total, where)


def check_function(fn: Any, budget: Budget | None = None) -> None:
    """Every value of a prepared graph function within the budget (before a backend allocates for it):
    what lowering made, not only what the importer typed."""
    b = budget or current()
    total = 0
    for c in fn.constants:
        total += b.check_tensor(c.type.shape, c.type.elem.itemsize, f"constant '{c.name}'", "constant")
    b.check_total(total, f"function '{fn.name}'", "the constants")
    for node in fn.nodes:
        for out in node.outputs:
            b.check_tensor(out.type.shape, out.type.elem.itemsize,
                           f"{node.kind.name} '{node.name}' (from ONNX node '{node.origin}')", "output")
