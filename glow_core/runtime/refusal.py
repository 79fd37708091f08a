"""Partitions a backend refuses at compile time go to the next device of the list.

A backend's ``compile()`` may raise ``UnsupportedError`` for a partition it will not take ("too
small to offload", a shape its compiler rejects). :func:`settle` compiles the partitions of a plan
in order (:class:`PartitionCompiler`, which keeps every executable so that nothing is compiled
twice); on a refusal it excludes that partition's nodes from that backend, partitions again (the
nodes go to the next backend of the device list that claims them) and goes on, until every
partition compiles (a refused node no later backend claims is lowered for it,
:func:`glow_core.runtime.assign.fall_back`). The plan records each refusal with the backend's
message (``glow partition`` prints them). A refusal no later backend can take over is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function
from glow_core.pipeline import compile_options, guard_backend, prepare_function
from glow_core.plugin_host import get_backend
from glow_core.runtime.assign import Claims, Exclusions, fall_back
from glow_core.runtime.devices import DeviceConfig
from glow_core.runtime.errors import PartitionError
from glow_core.runtime.graphcut import extract
from glow_core.runtime.partitioner import Partition, PartitionPlan, Refusal, partition
from glow_sdk.backend import Backend, CompiledFunction
from glow_sdk.options import BackendOptionError, option_table

#: what identifies a compiled partition: backend, node names, input names, output names
Key = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def options_for(backend: Backend, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options ``backend`` takes from a dictionary meant for every backend of a device list."""
    if not options or not backend.checks_options():
        return dict(options or {})
    known = option_table(backend.options())
    return {k: v for k, v in options.items() if k in known}


def check_device_options(backends: Sequence[Backend], options: Mapping[str, Any] | None) -> None:
    """Refuse option keys that no backend of the device list (nor the core) declares, listing the known ones."""
    if not options or any(not b.checks_options() for b in backends):
        return
    known: set[str] = set()
    for b in backends:
        known |= set(option_table(b.options()))
    unknown = sorted(set(options) - known)
    if unknown:
        names = ", ".join(b.name for b in backends)
        raise BackendOptionError(f"no backend of the device list ({names}) has the option(s) "
                                 f"{', '.join(map(repr, unknown))}; choose from: {', '.join(sorted(known))}",
                                 hint="'glow sdk options NAME' lists a backend's options")


@dataclass
class PartitionCompiler:
    """Compiles partitions for their backends, once per (backend, nodes, boundary); see the module docstring.

    ``skip`` names backends whose partitions are not compiled here (remote devices compile their own;
    ``glow partition`` does not compile for the last backend of the list, the final fallback).
    ``prepared_for`` is the backend whose fusions the whole function got (the first of the list): a
    partition of another backend is optimized and fused again for its own backend once extracted, so
    that its fusions (FusedMatMul, FusedAttention, ...) survive the cut.
    """

    network: str
    threads: int | None = None
    options: Mapping[str, Any] | None = None
    skip: frozenset[str] = frozenset()
    #: device ids whose partitions are not compiled here (remote devices)
    skip_devices: frozenset[str] = frozenset()
    prepared_for: str = ""
    done: dict[Key, tuple[Function, CompiledFunction]] = field(default_factory=dict)

    def probes(self, p: Partition) -> bool:
        return p.backend not in self.skip and p.device not in self.skip_devices

    def extract(self, plan: PartitionPlan, p: Partition) -> tuple[Key, Function]:
        sub = extract(plan.function, p.nodes, f"{self.network}.{p.name}")
        if self.prepared_for and p.backend != self.prepared_for:
            sub = prepare_function(sub, get_backend(p.backend))
        key = (p.backend, tuple(n.name for n in p.nodes), tuple(v.name for v in sub.inputs),
               tuple(n for n, _ in sub.outputs))
        return key, sub

    def compile(self, plan: PartitionPlan, p: Partition) -> tuple[Function, CompiledFunction]:
        """The sub-function and executable of ``p`` (compiled at most once); UnsupportedError is a refusal."""
        key, sub = self.extract(plan, p)
        if key not in self.done:
            backend = get_backend(p.backend)
            with guard_backend(p.backend, f"to compile partition {p.name} of {self.network}",
                               activity=f"compiling partition {p.name} of {self.network}"):
                exe = backend.compile(sub, compile_options(threads=self.threads,
                                                           extra=options_for(backend, self.options)))
            self.done[key] = (sub, exe)
        return self.done[key]

    def release(self, keep: Sequence[CompiledFunction] = ()) -> None:
        """Close the executables not in ``keep`` (those of partitions a refusal re-made) and forget them all."""
        kept = {id(e) for e in keep}
        for _, exe in self.done.values():
            if id(exe) not in kept:
                exe.close()
        self.done.clear()


def _first_refusal(plan: PartitionPlan, compiler: PartitionCompiler) -> tuple[Partition, UnsupportedError] | None:
    for p in plan.partitions:
        if not compiler.probes(p):
            continue
        try:
            compiler.compile(plan, p)
        except UnsupportedError as e:
            return p, e
    return None


def settle(function: Function, devices: Sequence[DeviceConfig], backends: Sequence[Backend], claims: Claims,
           compiler: PartitionCompiler) -> PartitionPlan:
    """Partition, compile, and send every refused partition to the next device (module docstring)."""
    excluded = Exclusions()
    refusals: list[Refusal] = []
    while True:
        plan = partition(function, devices, backends, claims, excluded, refusals)
        found = _first_refusal(plan, compiler)
        if found is None:
            return plan
        p, err = found
        if not fall_back(function, p.nodes, p.backend, backends, claims, excluded):
            raise PartitionError(f"backend '{p.backend}' refused partition {p.name} ({len(p.nodes)} node(s)) and no "
                                 f"later device of the list runs all of its nodes: {err.one_line()}",
                                 hint="add a device whose backend runs them (cpu runs every kind)") from err
        refusals.append(Refusal(p.backend, len(p.nodes), err.one_line(), p.name))
