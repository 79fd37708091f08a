"""The device API (SDK API 2.2): device memory, buffers, transfers and asynchronous runs.

A backend whose device has its own memory returns a :class:`DeviceMemory` of its own from
``Backend.device_memory(ordinal)`` (one per device of the backend: ``ordinal`` 0, 1, ...) and sets
:attr:`DeviceMemory.resident`; its executables run on :class:`DeviceBuffer` s through
``CompiledFunction.execute_async``, which returns a completion handle (a
``concurrent.futures.Future`` of the output buffers). The runtime then keeps a tensor on the device
between the partitions that run there (no round trip through the host), copies a tensor between two
devices of the backend with :meth:`DeviceMemory.copy_from_device`, and moves tensors on a copy
thread of its own, so that transfers overlap the device's compute across pipelined requests.

The defaults keep every other backend as it was: :class:`HostMemory` (buffers are the host arrays
themselves, copies are free, nothing is freed) and a synchronous ``execute_async`` calling
``execute``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_core.errors import BackendError
from glow_core.ir.types import TensorType


class DeviceBuffer:
    """One tensor in one device's memory: its type, the memory holding it, the backend's own ``handle``.

    ``host`` caches the tensor's host copy once one was made (:meth:`materialize`), so that the tensor
    crosses to the host at most once per request.
    """

    __slots__ = ("memory", "type", "handle", "host", "freed", "__weakref__")

    def __init__(self, memory: DeviceMemory, type: TensorType, handle: Any) -> None:
        self.memory = memory
        self.type = type
        self.handle = handle
        self.host: np.ndarray | None = None
        self.freed = False

    @property
    def nbytes(self) -> int:
        return self.type.nbytes

    def materialize(self) -> np.ndarray:
        """The tensor as a host array (copied out of the device once, then cached)."""
        if self.host is None:
            self.host = self.memory.copy_to_host(self)
        return self.host

    def release(self) -> None:
        """Give the buffer back to its memory (once; later calls do nothing)."""
        if not self.freed:
            self.freed = True
            self.memory.free(self)

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.type}, on {self.memory.name})"


class DeviceMemory:
    """The memory of one device. This base class is host memory (see :class:`HostMemory`); a backend
    with device memory subclasses it, sets ``resident = True`` and overrides the five operations."""

    #: whether buffers live outside host memory: the runtime then keeps tensors on the device between
    #: partitions and runs the backend's executables through ``execute_async`` on buffers
    resident: bool = False

    def __init__(self, backend: str, ordinal: int = 0) -> None:
        self.backend = backend
        self.ordinal = ordinal
        self.name = f"{backend}{ordinal}"

    def allocate(self, type: TensorType) -> DeviceBuffer:
        """A buffer for one tensor of ``type`` (its contents undefined)."""
        return DeviceBuffer(self, type, np.empty(type.shape, type.dtype))

    def copy_from_host(self, array: np.ndarray) -> DeviceBuffer:
        """A new buffer holding ``array`` (host -> device)."""
        return DeviceBuffer(self, TensorType.of(array), array)

    def copy_to_host(self, buffer: DeviceBuffer) -> np.ndarray:
        """The contents of ``buffer`` as a host array (device -> host)."""
        return np.asarray(buffer.handle)

    def copy_from_device(self, buffer: DeviceBuffer) -> DeviceBuffer:
        """A new buffer on this device holding ``buffer``, which lives on another device of the same backend
        (device -> device). Default: through the host."""
        if buffer.memory.backend != self.backend:
            raise BackendError(f"device memory {self.name} cannot copy a buffer of backend "
                               f"'{buffer.memory.backend}' device to device; copy it through the host")
        return self.copy_from_host(buffer.memory.copy_to_host(buffer))

    def free(self, buffer: DeviceBuffer) -> None:
        """Release ``buffer`` (it is not used afterwards). Default: nothing to release."""


class HostMemory(DeviceMemory):
    """Host memory: the default device memory of every backend (buffers wrap host arrays, copies are free)."""


__all__ = ["DeviceBuffer", "DeviceMemory", "HostMemory"]
