"""What runs inside a Ray actor: one remote device's partitions, compiled there and run on request.

The actor receives each partition as the flat description of :mod:`.wire` plus its weights (Ray
resolves the object reference to the arrays of the node's object store, shared with every other
actor of the node, without a copy), rebuilds the sub-function and compiles it with the device's
backend -- the same ``Backend.compile`` a local device uses, so every backend works remotely and
nothing machine-specific (object code for another CPU, a C toolchain for bundles) has to match
between the driver and the node. Answers are plain tuples ``("ok", value)`` / ``("error", text)``,
so a failing partition reaches the host manager as one line, never as a pickled exception.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.pipeline import compile_options, guard_backend
from glow_core.errors import GlowError
from glow_core.plugin_host import get_backend
from glow_core.runtime.cluster.wire import decode_function
from glow_core.runtime.device_manager import compiled_memory
from glow_core.runtime.graphcut import MemoryEstimate
from glow_sdk.backend import CompiledFunction

Answer = tuple[str, Any]


def _one_line(e: BaseException) -> str:
    return e.one_line() if isinstance(e, GlowError) else f"{type(e).__name__}: {e}"


class PartitionHost:
    """The body of a remote device's actor (made a Ray actor class by :mod:`.remote_device`)."""

    def __init__(self, device: str, backend: str) -> None:
        self.device = device
        self.backend = backend
        self.executables: dict[str, CompiledFunction] = {}

    def ready(self) -> dict[str, Any]:
        """Where the actor runs (called once: the actor has started when this answers)."""
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def load(self, key: str, description: bytes, weights: Mapping[str, np.ndarray], threads: int | None,
             options: Mapping[str, Any] | None, estimate: tuple[int, int, int]) -> Answer:
        """Rebuild and compile one partition; answer its memory (constants, activations, inputs/outputs)."""
        try:
            fn = decode_function(description, weights)
            with guard_backend(self.backend, f"to compile partition {key}", activity=f"compiling partition {key}"):
                exe = get_backend(self.backend).compile(fn, compile_options(threads=threads, extra=options))
            memory = compiled_memory(exe, MemoryEstimate(*estimate))
        except Exception as e:  # noqa: BLE001  (reported to the driver as one line)
            return "error", _one_line(e)
        self.executables[key] = exe
        return "ok", (memory.constant_bytes, memory.activation_bytes, memory.io_bytes)

    def unload(self, key: str) -> bool:
        exe = self.executables.pop(key, None)
        if exe is not None:
            exe.close()
        return exe is not None

    def run(self, key: str, feeds: Mapping[str, np.ndarray], picks: Sequence[tuple[str, int]],
            *bundles: Mapping[str, np.ndarray]) -> Answer:
        """Run partition ``key``; answer its outputs by name.

        ``feeds`` are arrays; ``picks`` name the feeds to take from ``bundles``, the outputs of other
        remote runs (Ray fetched them from the nodes that computed them).
        """
        exe = self.executables.get(key)
        if exe is None:
            return "error", f"partition {key} is not loaded on this actor"
        full = dict(feeds)
        for name, i in picks:
            full[name] = bundles[i][name]
        try:
            return "ok", exe.execute(full)
        except Exception as e:  # noqa: BLE001
            return "error", _one_line(e)

    def run_keep(self, key: str, feeds: Mapping[str, np.ndarray], picks: Sequence[tuple[str, int]],
                 *bundles: Mapping[str, np.ndarray]) -> tuple[Answer, Mapping[str, np.ndarray] | None]:
        """As :meth:`run`, in two answers (called with ``num_returns=2``): the status, and the outputs, which
        stay in this node's object store until a remote consumer or the host manager fetches them."""
        status, value = self.run(key, feeds, picks, *bundles)
        return ((status, None), value) if status == "ok" else ((status, value), None)
