"""The interpreter backend: a thin backend over the core's reference kernels (``glow_core.reference``).

Its capability is the reference kernel table; it executes the core-built LIR
on one arena (``lir_exec.py``) or a graph function node by node (``GraphExecutable``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from glow_backend_interpreter import __version__
from glow_core import budget
from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import Category, get_kind, kinds_in
from glow_core.ir.symbolic import SymExpr, actual_shape, bind_symbols
from glow_core.ir.types import ElemKind, TensorType
from glow_core.reference import KERNELS, run_kernel
from glow_core.reference.symbolic_sizes import is_global_pool
from glow_sdk.backend import Backend, CompiledFunction, CompileOptions
from glow_sdk.options import BackendOption


class GraphExecutable(CompiledFunction):
    """Runs the nodes of a function in order, freeing each value after its last use."""

    def __init__(self, function: Function) -> None:
        super().__init__(function)
        self.function = function
        #: the memory budget of the compile, in force for the kernels' temporaries at run time too
        self.limits = budget.current()
        self.nodes = list(function.nodes)
        last: dict[int, int] = {}
        for i, node in enumerate(self.nodes):
            for v in node.inputs:
                if v is not None:
                    last[id(v)] = i
        keep = {id(v) for v in function.output_values()}
        self.free_after: list[list[int]] = [[] for _ in self.nodes]
        for vid, i in last.items():
            if vid not in keep:
                self.free_after[i].append(vid)

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with budget.using(self.limits):
            return self._execute(feeds)

    def _bind(self, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        """The arrays of the inputs and constants, by value id."""
        env: dict[int, np.ndarray] = {id(p): feeds[p.name] for p in self.function.inputs}
        env.update({id(c): c.payload for c in self.function.constants})
        return env

    def _call(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return run_kernel(node.kind.name, node.attrs, inputs, [o.type for o in node.outputs], node.where())

    def _execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        env = self._bind(feeds)

        def get(v: Value | None) -> np.ndarray | None:
            return None if v is None else env[id(v)]

        for i, node in enumerate(self.nodes):
            results = self._call(node, [get(v) for v in node.inputs])
            for o, r in zip(node.outputs, results):
                env[id(o)] = r
            for vid in self.free_after[i]:
                env.pop(vid, None)
        return {name: np.array(env[id(v)], copy=True) for name, v in self.function.outputs}


#: kinds whose attributes name sizes, rewritten for a run of a symbolic function: (attrs, output shape, the
#: symbols' sizes) -> attrs
_RUN_ATTRS: dict[str, Callable[[Mapping[str, Any], tuple[int, ...], Mapping[str, int]], dict[str, Any]]] = {
    "Reshape": lambda attrs, shape, sizes: {**attrs, "shape": list(shape)},
    "Slice": lambda attrs, shape, sizes: {**attrs, "sizes": list(shape)},
    "Resize": lambda attrs, shape, sizes: {**attrs, "sizes": list(shape)},
    "SymbolicValue": lambda attrs, shape, sizes: {
        **attrs, "values": [float(SymExpr.parse(e).evaluate(sizes)) for e in attrs["exprs"]]},
}


class SymbolicGraphExecutable(GraphExecutable):
    """A function compiled for symbolic dims, run node by node at each run's sizes: every value is computed at
    the size its symbolic dims give (``glow_core.ir.symbolic``), constants as their leading corners, so each
    node is exactly its kernel at those sizes (the executable spec of a symbolic compile)."""

    def _bind(self, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        self._sizes = bind_symbols({p.name: p.type for p in self.function.inputs}, feeds)
        env: dict[int, np.ndarray] = {id(p): feeds[p.name] for p in self.function.inputs}
        for c in self.function.constants:
            corner = actual_shape(c.type, self._sizes)
            env[id(c)] = c.payload[tuple(slice(0, n) for n in corner)] if c.type.symbolic else c.payload
        return env

    def _call(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        outs = [o.type.with_shape(actual_shape(o.type, self._sizes)) for o in node.outputs]
        rewrite = _RUN_ATTRS.get(node.kind.name)
        attrs = rewrite(node.attrs, outs[0].shape, self._sizes) if rewrite is not None else node.attrs
        if is_global_pool(node) and inputs[0] is not None:  # its window is the run's spatial extent
            attrs = {**attrs, "kernel_shape": list(inputs[0].shape[2:])}
        return run_kernel(node.kind.name, attrs, inputs, outs, node.where())


class InterpreterBackend(Backend):
    fused_activations = frozenset({"none", "relu", "clip", "hardswish", "hardswish6"})
    name = "interpreter"
    version = __version__

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return {k: get_kind(k).elems for k in KERNELS}

    def supports_node(self, node: Node) -> bool:
        return True

    def symbolic_kinds(self) -> frozenset[str]:
        """Every kind: a symbolic function runs node by node at each run's sizes (``SymbolicGraphExecutable``)."""
        return frozenset(KERNELS)

    def options(self) -> Sequence[BackendOption]:
        """``executor``: "lir" (IRGen -> memory plan, one arena) or "graph" (node by node)."""
        return (BackendOption("executor", str, "lir",
                              "'lir' (planned arena) or 'graph' (node by node); env GLOW_INTERPRETER_EXECUTOR"),)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        missing = sorted({n.kind.name for n in function.nodes if n.kind.name not in KERNELS})
        if missing:
            raise UnsupportedError(f"the interpreter has no kernel for: {', '.join(missing)}")
        # executor "lir" (default): IRGen -> IR optimizer -> memory plan, run on one arena;
        # "graph": node by node on fresh arrays (options={"executor": "graph"} or GLOW_INTERPRETER_EXECUTOR).
        # Debug (or GLOW_LIR_DEBUG=1): verify the LIR after every IR pass and fill the arena with NaN bytes.
        import os

        from glow_backend_interpreter.lir_exec import LIRExecutable
        from glow_core.errors import BackendError

        executor = str(options.extra.get("executor") or os.environ.get("GLOW_INTERPRETER_EXECUTOR") or "lir")
        if any(p.type.symbolic for p in function.inputs):
            return SymbolicGraphExecutable(function)
        if executor == "graph":
            return GraphExecutable(function)
        if executor != "lir":
            raise BackendError(f"unknown interpreter executor {executor!r}; choose 'lir' or 'graph'")
        debug = options.debug or os.environ.get("GLOW_LIR_DEBUG", "") not in ("", "0")
        return LIRExecutable(function, options.build_lir(function, debug=debug), run_kernel, poison=debug)

    def evaluate(self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
                 out_types: Sequence[TensorType]) -> list[np.ndarray]:
        return run_kernel(kind, attrs, inputs, out_types, f"evaluation of {kind}")


class PrimitivesInterpreterBackend(InterpreterBackend):
    """The interpreter restricted to the primitive set: every other kind is lowered for it.

    It shows what a minimal vendor backend sees, and proves that the lowering
    of every high-level kind is complete and exact.
    """

    name = "interpreter-primitives"

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        prims = kinds_in(Category.PRIMITIVE)
        return {k: get_kind(k).elems for k in KERNELS if k in prims}
