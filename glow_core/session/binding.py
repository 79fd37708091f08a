"""Caller-owned inputs and outputs: ``OrtValue`` and ``IOBinding``, as onnxruntime has them.

An output bound to an array of the caller's (``bind_ortvalue_output(name, OrtValue.ortvalue_from_numpy(y))``)
is written in place by every ``run_with_iobinding``: the same memory is reused across runs, and only the
bound outputs are computed. An output bound by name only (``bind_output(name)``) gets a fresh array per
run. Everything lives in host memory: glow's backends take host arrays (``device_type`` "cpu").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from glow_core.errors import InputError, UnsupportedError

#: numpy dtype name -> onnxruntime's element type name (``OrtValue.data_type()``)
_ORT_NAMES = {"float32": "float", "float64": "double", "bool": "bool"}


def _host_only(device_type: str, buffer_ptr: Any = None) -> None:
    if str(device_type).lower() != "cpu":
        raise UnsupportedError(f"device_type '{device_type}': glow's sessions bind host memory only",
                               hint="bind numpy arrays (device_type 'cpu')")
    if buffer_ptr is not None:
        raise UnsupportedError("binding a raw buffer pointer is not supported",
                               hint="bind a numpy array: bind_ortvalue_output(name, OrtValue.ortvalue_from_numpy(a))")


class OrtValue:
    """A host array (``numpy()`` returns it, not a copy)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(array: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """Wrap ``array`` (no copy: an output bound to it is written into it)."""
        _host_only(device_type)
        if not isinstance(array, np.ndarray):
            raise InputError(f"ortvalue_from_numpy takes a numpy array, got {type(array).__name__}")
        return OrtValue(array)

    def numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def data_type(self) -> str:
        """``tensor(float)``, ``tensor(int64)``, ..."""
        return f"tensor({_ORT_NAMES.get(self._array.dtype.name, self._array.dtype.name)})"

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, shape={self.shape()})"


class IOBinding:
    """Inputs and outputs bound ahead of ``InferenceSession.run_with_iobinding`` (``session.io_binding()``)."""

    def __init__(self) -> None:
        self.inputs: dict[str, np.ndarray] = {}
        #: output name -> the caller's array to write, or None (a fresh array each run)
        self.outputs: dict[str, np.ndarray | None] = {}
        self.results: dict[str, np.ndarray] = {}

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self.inputs[name] = array

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: Any = None) -> None:
        """Compute output ``name`` into a fresh host array each run (``copy_outputs_to_cpu`` returns them)."""
        _host_only(device_type, buffer_ptr)
        self.outputs[name] = None

    def bind_ortvalue_output(self, name: str, value: OrtValue) -> None:
        """Compute output ``name`` into ``value``'s array, in place, on every run."""
        self.outputs[name] = value.numpy()

    def clear_binding_outputs(self) -> None:
        self.outputs.clear()
        self.results.clear()

    def get_outputs(self) -> list[OrtValue]:
        """The bound outputs of the last run, in binding order."""
        return [OrtValue(self.results[n]) for n in self.outputs if n in self.results]

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        """Copies of the bound outputs of the last run, in binding order."""
        return [self.results[n].copy() for n in self.outputs if n in self.results]

    def store(self, results: dict[str, np.ndarray]) -> None:
        """Write a run's results into the bound arrays (checked: same dtype and shape) and keep them."""
        for name, value in results.items():
            target = self.outputs.get(name)
            if target is not None:
                if target.dtype != value.dtype or target.shape != value.shape:
                    raise InputError(f"output '{name}' is bound to a {target.dtype} array of shape "
                                     f"{list(target.shape)}; this run makes {value.dtype} {list(value.shape)}",
                                     hint="bind an array of the output's dtype and shape for these inputs")
                np.copyto(target, value)
                value = target
            self.results[name] = value


__all__ = ["IOBinding", "OrtValue"]
