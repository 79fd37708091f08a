"""A compiled network (feeds checked before the backend sees them) and where its compile time went."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.errors import ExecutionError, IndexRangeError, InputError
from glow_core.ir.graph import Function
from glow_core.ir.types import TensorType
from glow_core.pipeline.guard import guard_backend
from glow_sdk.backend import Backend, CompiledFunction
from glow_sdk.diagnostics import index_error_message, node_in_message


@dataclass
class CompileStats:
    """Where compile time went (seconds) and the node kinds of the prepared function."""

    import_s: float = 0.0
    optimize_s: float = 0.0
    backend_compile_s: float = 0.0
    #: seconds per graph pass (summed over fixed-point rounds); ``optimize_s`` includes them all
    pass_s: dict[str, float] = field(default_factory=dict)
    #: the backend's own stage timings (the cpu backend: cache key, LIR, IR generation, LLVM stages, load)
    backend_s: dict[str, Any] = field(default_factory=dict)
    nodes_by_kind: dict[str, int] = field(default_factory=dict)
    #: what quantization converted (a glow_core.quantization.convert.Conversion), when it ran
    quantized: Any = None


def _fits(shape: tuple[int, ...], t: TensorType) -> bool:
    """Does ``shape`` fit a type with symbolic dims (fixed axes equal, symbolic ones within the bound)? The
    executable checks that the sizes agree with each other (``glow_backend_cpu/symbolic.py``)."""
    if t.sym is None or len(shape) != t.rank:
        return False
    return all(n == d if e is None else n <= d for n, d, e in zip(shape, t.shape, t.sym))


class CompiledNetwork:
    """A model compiled for one backend. ``run`` checks feeds before executing."""

    def __init__(self, function: Function, executable: CompiledFunction, backend: Backend, stats: CompileStats) -> None:
        self.function = function
        self.executable = executable
        self.backend = backend
        self.stats = stats
        self.input_types: dict[str, TensorType] = {p.name: p.type for p in function.inputs}
        self.output_names: list[str] = [n for n, _ in function.outputs]
        self._lock = threading.Lock()
        #: the executable takes feeds of any strides (SDK 2.6): a non-contiguous array is passed as it is
        self._strided = bool(getattr(executable, "strided_feeds", False))  # (None: a runtime-run network)
        #: (the input_types dict it was made from, ((name, dtype, shape, type), ...)): see :meth:`_fast_feeds`
        self._expected: tuple[dict[str, TensorType], tuple[tuple[str, np.dtype, tuple[int, ...], TensorType], ...]] \
            | None = None

    def _fast_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The feeds when they are exactly the inputs as arrays of the right dtype and shape, contiguous unless
        the executable takes any strides (what a caller running the same network again passes); None: check
        them one by one."""
        exp = self._expected
        if exp is None or exp[0] is not self.input_types:
            exp = self._expected = (self.input_types, tuple((n, np.dtype(t.dtype), tuple(t.shape), t)
                                                            for n, t in self.input_types.items()))
        if type(feeds) is not dict or len(feeds) != len(exp[1]):
            return None
        out: dict[str, np.ndarray] = {}
        strided = self._strided
        for name, dtype, shape, t in exp[1]:
            a = feeds.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype or not (strided or a.flags.c_contiguous) or \
                    (a.shape != shape and not _fits(a.shape, t)):
                return None
            out[name] = a
        return out

    def describe_inputs(self) -> str:
        """``name: type, ...`` of the inputs, for messages."""
        return ", ".join(f"{n}: {t}" for n, t in self.input_types.items()) or "(no inputs)"

    def check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check names, dtypes and shapes of ``feeds``; return them as arrays (contiguous unless the executable
        takes any strides).

        Python scalars and (nested) lists are converted when they convert
        exactly; numpy arrays must already have the input's dtype and shape.
        """
        fast = self._fast_feeds(feeds)
        if fast is not None:
            return fast
        if not isinstance(feeds, Mapping):
            raise InputError(
                f"run() takes a dict of input name -> numpy array, got {type(feeds).__name__}",
                hint=f"the network takes {self.describe_inputs()}",
            )
        bad_keys = [k for k in feeds if not isinstance(k, str)]
        if bad_keys:
            raise InputError(f"input names must be strings, got {', '.join(repr(k) for k in bad_keys[:3])}",
                             hint=f"the network takes {self.describe_inputs()}")
        missing = [n for n in self.input_types if n not in feeds]
        unknown = [n for n in feeds if n not in self.input_types]
        if missing or unknown:
            what = []
            if missing:
                what.append("missing input(s) " + ", ".join(f"'{n}'" for n in missing))
            if unknown:
                what.append("unknown input(s) " + ", ".join(f"'{n}'" for n in unknown))
            raise InputError("; ".join(what) + f"; the network takes {self.describe_inputs()}")
        return {name: self._check_one(name, t, feeds[name], self._strided) for name, t in self.input_types.items()}

    @staticmethod
    def _check_one(name: str, t: TensorType, value: Any, strided: bool = False) -> np.ndarray:
        if isinstance(value, np.ndarray):
            a = value
        elif isinstance(value, (bool, int, float, complex, np.generic, list, tuple)):
            try:
                a = np.asarray(value)
            except (ValueError, TypeError) as e:
                raise InputError(f"input '{name}' cannot be converted to an array: {e}",
                                 hint=f"pass a numpy array of type {t}") from None
            if a.dtype != t.dtype and a.dtype.kind in "biuf":
                with np.errstate(all="ignore"):
                    converted = a.astype(t.dtype)
                    exact = np.array_equal(converted.astype(a.dtype), a, equal_nan=a.dtype.kind == "f")
                if exact:
                    a = converted
        else:
            raise InputError(f"input '{name}' must be a numpy array, got {type(value).__name__}",
                             hint=f"pass a numpy array of type {t}")
        if a.dtype != t.dtype:
            raise InputError(f"input '{name}' has dtype {a.dtype}, expected {t.dtype} ({t})",
                             hint=f"convert it with .astype(numpy.{t.dtype})")
        if tuple(a.shape) != t.shape and not _fits(tuple(a.shape), t):
            raise InputError(f"input '{name}' has shape {list(a.shape)}, expected {list(t.shape)} ({t})",
                             hint="recompile with input_shapes={...} for another shape")
        if strided and type(a) is np.ndarray:
            return a
        return np.asarray(a, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check ``feeds`` (names, dtypes, shapes), run once, return outputs by name."""
        checked = self.check_feeds(feeds)
        try:
            with guard_backend(self.backend.name, "while running", ExecutionError, activity="running the network",
                               memory_hint="free memory, or compile a smaller model or batch"):
                return self.executable.execute(checked)
        except IndexRangeError as e:
            node = e.node or node_in_message(self.function, str(e))
            named = index_error_message(self.function, node, checked)
            if named is None:
                raise
            raise IndexRangeError(named[0], node, hint=named[1]) from e
