"""Test backends for the runtime, delegating to the interpreter through the plugin host.

- ``narrow``: runs only Conv, MatMul, Gemm, Relu and Add (float32) -- a deliberately narrow
  accelerator; every other node must fall back to the next device of the list.
- ``narrowmin``: ``narrow`` with a minimum partition size (:data:`NARROW_MIN` nodes): smaller runs are
  not offloaded.
- ``picky``: ``narrow`` whose ``compile()`` refuses (``UnsupportedError``) a partition of fewer than
  :data:`PICKY_MIN` nodes, as an accelerator that does not offload tiny partitions does.
- ``convrelu``: claims (``Backend.claim``) only Conv nodes followed by a Relu, with that Relu.
- ``gemmhl``: claims at the high level (before lowering): only the Gemm nodes of the imported model.
- ``costed``: ``narrow`` with a cost hook (10x below the default estimate of every node) and a device
  behind a link of :data:`COSTED_BANDWIDTH` bytes/s and :data:`COSTED_LATENCY` s per transfer.
- ``flaky``: the interpreter, except that a run whose first input starts with ``FAULT`` raises.
- ``hang``: the interpreter, except that a run whose first input starts with ``FAULT`` blocks until
  :data:`RELEASE` is set (a hung device).

Registered in-process by ``tests/runtime/conftest.py`` and, for ``glow`` subprocesses, through an
entry point written by :func:`write_dist_info`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function, Node
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import get_backend
from glow_core.runtime.cost import DEFAULT_SECONDS_PER_COST
from glow_core.runtime.graphcut import node_cost
from glow_sdk import Backend, BackendSpec, CompiledFunction, CompileOptions, DeviceInfo, hookimpl

NARROW_KINDS = ("Conv", "MatMul", "Gemm", "Relu", "Add")
#: ``narrowmin``'s minimum partition size and the size under which ``picky`` refuses a partition
NARROW_MIN = 2
PICKY_MIN = 3
#: ``costed``: its speed-up over the default estimate, and its link
COSTED_SPEEDUP = 10.0
COSTED_BANDWIDTH = 2e9
COSTED_LATENCY = 20e-6
#: the first input value that makes ``flaky`` raise and ``hang`` block
FAULT = -12345.0
RELEASE = threading.Event()
F32 = frozenset({ElemKind.FLOAT32})


class NarrowBackend(Backend):
    name = "narrow"

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return dict.fromkeys(NARROW_KINDS, F32)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        bad = sorted({n.kind.name for n in function.nodes if not self.supports(n)})
        assert not bad, f"narrow was asked to compile {bad}"
        return get_backend("interpreter").compile(function, options)


class NarrowMinBackend(NarrowBackend):
    name = "narrowmin"
    min_partition_nodes = NARROW_MIN


class PickyBackend(NarrowBackend):
    name = "picky"

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        if len(function.nodes) < PICKY_MIN:
            raise UnsupportedError(f"partition of {len(function.nodes)} node(s) is too small to offload")
        return super().compile(function, options)


class ConvReluBackend(NarrowBackend):
    """Takes only Conv -> Relu pairs (a pattern it would fuse), though it supports every narrow kind."""

    name = "convrelu"

    def claim(self, function: Function) -> list[list[Node]]:
        groups = []
        for n in function.nodes:
            users = n.outputs[0].user_nodes() if n.kind.name == "Conv" else []
            if len(users) == 1 and users[0].kind.name == "Relu":
                groups.append([n, users[0]])
        return groups


class GemmHighLevelBackend(NarrowBackend):
    """Claims on the imported function, before lowering: its Gemm nodes only."""

    name = "gemmhl"
    claim_level = "high-level"

    def claim(self, function: Function) -> list[list[Node]]:
        return [[n] for n in function.nodes if n.kind.name == "Gemm"]


class CostedBackend(NarrowBackend):
    name = "costed"

    def estimate_cost(self, node: Node) -> float | None:
        return node_cost(node) * DEFAULT_SECONDS_PER_COST / COSTED_SPEEDUP

    def create_device(self) -> DeviceInfo:
        return DeviceInfo("costed", 8 << 30, bandwidth_bytes_per_s=COSTED_BANDWIDTH, latency_s=COSTED_LATENCY)


class _Faulty(CompiledFunction):
    def __init__(self, function: Function, inner: CompiledFunction, mode: str) -> None:
        super().__init__(function)
        self.inner, self.mode = inner, mode
        self.first = function.inputs[0].name if function.inputs else ""

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feeds.get(self.first)
        if x is not None and x.size and float(x.flat[0]) == FAULT:
            if self.mode == "flaky":
                raise RuntimeError("injected device fault")
            RELEASE.wait(60)
        return self.inner.execute(feeds)


class _FaultyBackend(Backend):
    mode = ""

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return get_backend("interpreter").supported_kinds()

    def supports_node(self, node: Node) -> bool:
        return True

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return _Faulty(function, get_backend("interpreter").compile(function, options), self.mode)


class FlakyBackend(_FaultyBackend):
    name = mode = "flaky"


class HangBackend(_FaultyBackend):
    name = mode = "hang"


class RuntimeTestPlugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [BackendSpec(name=b.name, factory=b, sdk_api_version=1, version="0.1")
                for b in (NarrowBackend, NarrowMinBackend, PickyBackend, ConvReluBackend, GemmHighLevelBackend, CostedBackend,
                          FlakyBackend, HangBackend)]


plugin = RuntimeTestPlugin()


def write_dist_info(root: Path) -> Path:
    """A minimal installed distribution under ``root`` whose entry points name this module's plugin and
    tests/runtime/device_plugin.py's."""
    info = root / "glow_backend_runtime_test-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: glow-backend-runtime-test\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(("[glow.backends]\nruntime-test = tests.runtime.narrow_plugin:plugin\n"
                                            "runtime-device = tests.runtime.device_plugin:plugin\n"))
    return root
