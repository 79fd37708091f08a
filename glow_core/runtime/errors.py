"""Errors of the runtime (device list, partitioning, device managers, the host manager's queue).

All are :class:`glow_core.errors.GlowError` subclasses, so the CLI prints them as one line with a hint.
"""

from __future__ import annotations

from glow_core.errors import BackendError, ExecutionError, GlowError


class DeviceConfigError(GlowError):
    """A device list that does not parse, names an unknown backend or an impossible memory size."""


class PartitionError(GlowError):
    """No partitioning fits the devices (a node no device runs, a partition no device holds, a bad assignment)."""


class DeviceMemoryError(BackendError):
    """A device manager refused to load a partition that does not fit its remaining memory."""


class DeviceExecutionError(ExecutionError):
    """A partition failed while running on one device (the message names the device)."""


class QueueFullError(GlowError):
    """The host manager's bounds on in-flight and queued requests were reached; the request was rejected."""


class RequestTimeoutError(ExecutionError):
    """A request did not finish within its timeout."""


class NetworkError(GlowError):
    """An unknown network name, a name added twice, or a network removed while requests were queued."""
