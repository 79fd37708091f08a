"""Reaching a Ray cluster, placing devices on its nodes, and the weights kept in its object store.

``ray`` is imported here only inside functions (:func:`require_ray`), so the runtime imports
without it; a missing Ray is a :class:`DeviceConfigError` naming the extra to install.

``cluster`` (``HostManager(cluster=...)``):

- ``"auto"`` (or ``None``): the Ray session this process already has; else the cluster at
  ``$RAY_ADDRESS``; else a new local cluster on this machine, bound to the loopback address,
  stopped again when the last host manager using it closes;
- ``"local"``: a new local cluster (as above), unless this process already has a Ray session;
- anything else (``"ray://head:10001"``, ``"head:6379"``): that cluster's address, given to ``ray.init``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from glow_core.runtime.devices import RAY_INSTALL
from glow_core.runtime.errors import DeviceConfigError

#: an environment variable Ray reads at import: "0" makes a local cluster use the loopback address
_LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: the local cluster this process started (if any) and how many Cluster objects use it
_SESSION: dict[str, Any] = {"started": False, "users": 0}
_SESSION_LOCK = threading.Lock()


def require_ray() -> ModuleType:
    """The ``ray`` module, or a DeviceConfigError saying what to install."""
    try:
        import ray
    except ImportError as e:
        raise DeviceConfigError(f"Ray devices need the 'ray' package, which cannot be imported ({e})",
                                hint=f"install it with: {RAY_INSTALL}") from e
    return ray


def start_local_cluster(ray: ModuleType, num_cpus: int | None = None) -> None:
    """A new single-node cluster on this machine, every service on 127.0.0.1."""
    from ray._private import ray_constants

    os.environ[_LOOPBACK_SWITCH] = "0"  # the cluster's own processes read it too
    ray_constants.ENABLE_RAY_CLUSTER = False  # the driver imported ray already
    ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
             log_to_driver=False, _node_ip_address="127.0.0.1", configure_logging=False)


class Cluster:
    """One connection to a Ray cluster (see the module docstring) shared by a host manager's Ray devices."""

    def __init__(self, address: str | None = "auto", num_cpus: int | None = None) -> None:
        self.ray = require_ray()
        self.address = address or "auto"
        self.started_here = False
        self._lock = threading.Lock()
        #: weights in the object store: key -> [object ref, number of partitions using it]
        self._weights: dict[tuple[Any, ...], list[Any]] = {}
        self.puts = 0  # ray.put calls made for weights (a test checks they are not repeated)
        self._classes: dict[type, Any] = {}
        ray = self.ray
        try:
            with _SESSION_LOCK:
                if ray.is_initialized():
                    pass
                elif self.address == "local" or (self.address == "auto" and not os.environ.get("RAY_ADDRESS")):
                    start_local_cluster(ray, num_cpus)
                    _SESSION["started"] = True
                else:
                    address = None if self.address == "auto" else self.address
                    ray.init(address=address, log_to_driver=False, configure_logging=False)
                self.started_here = bool(_SESSION["started"])
                _SESSION["users"] += 1
        except Exception as e:  # noqa: BLE001  (Ray's own errors: unreachable head, version mismatch, ...)
            raise DeviceConfigError(f"cannot reach the Ray cluster '{self.address}': {type(e).__name__}: {e}",
                                    hint="start one with 'ray start --head' and pass its address, "
                                         "or use cluster='local' for a cluster on this machine") from e

    def actor_class(self, cls: type) -> Any:
        """``ray.remote(cls)``, made once per class."""
        with self._lock:
            if cls not in self._classes:
                self._classes[cls] = self.ray.remote(cls)
            return self._classes[cls]

    # -- nodes ---------------------------------------------------------------------------------
    def alive_nodes(self) -> list[str]:
        """Ids of the alive nodes that have CPUs, the head's first, the others in id order."""
        nodes = [n for n in self.ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        head = [n["NodeID"] for n in nodes if "node:__internal_head__" in n.get("Resources", {})]
        return head + sorted(n["NodeID"] for n in nodes if n["NodeID"] not in head)

    def place(self, index: int, prefer: str | None = None, avoid: Sequence[str] = ()) -> str:
        """The node for device number ``index`` (round robin over the alive nodes), ``prefer`` when alive;
        never one of ``avoid`` (nodes an actor could not start on) while another is alive."""
        nodes = [n for n in self.alive_nodes() if n not in avoid] or self.alive_nodes()
        if not nodes:
            raise DeviceConfigError(f"the Ray cluster '{self.address}' has no alive node with CPUs",
                                    hint="start the cluster's nodes ('ray start') or check 'ray status'")
        if prefer in nodes:
            return prefer  # type: ignore[return-value]
        return nodes[index % len(nodes)]

    def resources(self) -> str:
        """'N of M CPUs free' for error messages."""
        try:
            free = self.ray.available_resources().get("CPU", 0)
            total = self.ray.cluster_resources().get("CPU", 0)
            return f"{free:g} of {total:g} CPUs free"
        except Exception:  # noqa: BLE001  # pragma: no cover
            return "resources unknown"

    # -- weights -------------------------------------------------------------------------------
    def put_weights(self, weights: Mapping[str, np.ndarray]) -> tuple[tuple[Any, ...], Any]:
        """(key, object ref) of ``weights`` in the object store; the same arrays are put only once."""
        key = tuple(sorted((name, a.__array_interface__["data"][0], a.nbytes, a.dtype.str, a.shape)
                           for name, a in weights.items()))
        with self._lock:
            entry = self._weights.get(key)
            if entry is None:
                entry = self._weights[key] = [self.ray.put(dict(weights)), 0]
                self.puts += 1
            entry[1] += 1
            return key, entry[0]

    def release_weights(self, key: tuple[Any, ...]) -> None:
        """One partition less uses these weights; the last one lets Ray free them."""
        with self._lock:
            entry = self._weights.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._weights[key]

    def weights_held(self) -> int:
        with self._lock:
            return len(self._weights)

    def close(self) -> None:
        """Forget the weights; stop the cluster if this object started it."""
        with self._lock:
            self._weights.clear()
        with _SESSION_LOCK:
            _SESSION["users"] -= 1
            if self.started_here and _SESSION["started"] and _SESSION["users"] <= 0 and self.ray.is_initialized():
                self.ray.shutdown()
                _SESSION["started"] = False
