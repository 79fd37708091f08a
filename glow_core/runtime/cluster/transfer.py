"""Tensors that stay in Ray's object store between the partitions of a pipeline.

A remote device's run answers twice: a small status (fetched by the host manager) and the outputs
(a dict of arrays left in the object store of the node that computed them). The executor passes
the outputs on as :class:`RemoteTensor` values: a partition on another Ray device receives the
object reference and Ray moves the arrays from node to node directly; only a local device or the
request's final outputs fetch them into the host manager's process (:meth:`RemoteTensor.materialize`,
once per run, with a timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_core.runtime.errors import DeviceExecutionError
from glow_sdk.device import DeviceBuffer


class OutputBundle:
    """The outputs of one run of a partition, in the object store (fetched at most once)."""

    def __init__(self, ray: Any, ref: Any, where: str, timeout: float) -> None:
        self.ray, self.ref, self.where, self.timeout = ray, ref, where, timeout
        self._lock = threading.Lock()
        self._arrays: Mapping[str, np.ndarray] | None = None

    def fetch(self) -> Mapping[str, np.ndarray]:
        with self._lock:
            if self._arrays is None:
                try:
                    self._arrays = self.ray.get(self.ref, timeout=self.timeout)
                except Exception as e:  # noqa: BLE001  (the node lost, a timeout)
                    raise DeviceExecutionError(f"the outputs of {self.where} could not be fetched: "
                                               f"{type(e).__name__}: {str(e).strip()[:200]}") from e
            return self._arrays


class RemoteTensor:
    """One output of a remote run: its bundle and its name."""

    __slots__ = ("bundle", "name")

    def __init__(self, bundle: OutputBundle, name: str) -> None:
        self.bundle, self.name = bundle, name

    def materialize(self) -> np.ndarray:
        return self.bundle.fetch()[self.name]


def split_feeds(feeds: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, int]], list[Any]]:
    """(arrays, [(feed name, bundle number)], bundle references) of feeds mixing arrays and RemoteTensors."""
    plain: dict[str, Any] = {}
    picks: list[tuple[str, int]] = []
    refs: list[Any] = []
    index: dict[int, int] = {}
    for name, v in feeds.items():
        if isinstance(v, RemoteTensor):
            i = index.setdefault(id(v.bundle), len(refs))
            if i == len(refs):
                refs.append(v.bundle.ref)
            picks.append((name, i))
        else:  # a device buffer (SDK API 2.2) goes as its host copy
            plain[name] = v.materialize() if isinstance(v, DeviceBuffer) else v
    return plain, picks, refs
