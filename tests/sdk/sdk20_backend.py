"""A backend written against SDK API 2.0, before the minor number, as a vendor wrote it then (kept unchanged).

It declares ``sdk_api_version=2`` (an integer), reads an option key it never declares (``tile``), gives
its executable's memory plan as a *method* ``memory()`` and a ``close()``, and sets ``compile_timings`` as a
plain attribute: every one of these must keep working under SDK API 2.1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind
from glow_core.lir.memory import MemoryReport
from glow_core.reference import run_kernel
from glow_sdk import Backend, BackendSpec, CompiledFunction, CompileOptions, hookimpl

SDK_API = 2
F32 = frozenset({ElemKind.FLOAT32})


class Executable(CompiledFunction):
    def __init__(self, function: Function, tile: int) -> None:
        super().__init__(function)
        self.function, self.tile, self.closed = function, tile, False
        self.compile_timings = {"codegen": 0.0}

    def memory(self) -> MemoryReport:  # type: ignore[override]  (2.0 style: a method)
        return MemoryReport(arena_bytes=4096 * self.tile, naive_bytes=4096 * self.tile, lower_bound_bytes=0)

    def close(self) -> None:
        self.closed = True

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[int, Any] = {id(p): feeds[p.name] for p in self.function.inputs}
        for n in self.function.nodes:
            args = [None if v is None else env[id(v)] if id(v) in env else v.payload for v in n.inputs]
            outs = run_kernel(n.kind.name, dict(n.attrs), args, [o.type for o in n.outputs], n.where())
            env.update({id(o): r for o, r in zip(n.outputs, outs)})
        return {name: np.array(env[id(v)]) for name, v in self.function.outputs}


class Sdk20Backend(Backend):
    name = "sdk20"
    version = "2.0.0"
    sdk_api_version = SDK_API

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return {"Add": F32, "Relu": F32, "Max": F32}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        tile = int(options.extra.get("tile", 1))
        if tile < 1:
            raise UnsupportedError("sdk20: tile must be >= 1")
        return Executable(function, tile)


class Plugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [BackendSpec(name="sdk20", factory=Sdk20Backend, sdk_api_version=SDK_API, version="2.0.0")]


plugin = Plugin()
