"""Pass infrastructure: passes, registries and the pass manager.

Shared by the graph optimizer (``glow_core.passes``), lowering
(``glow_core.lowering``, the ``lower`` pass) and the LIR optimizer
(``glow_core.lircompiler``). It sits below all three and imports none of them:
the modules whose registrations fill a registry are named in explicit lists
(:data:`GRAPH_PASS_MODULES`) and imported by the registry's loader on first use.

A pass is a named unit ``fn(function, ctx) -> bool`` (whether it changed
anything), registered once with :func:`graph_pass`. Pipelines are explicit
lists of pass names and :class:`FixedPoint` groups (repeat until nothing
changes). The manager times every pass, verifies the graph after each pass in
debug mode, dumps the graph before/after a named pass on request and names the
failing pass in any error.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from glow_core.errors import GlowError, PassError

if TYPE_CHECKING:
    from glow_sdk.backend import Backend


@dataclass
class PassContext:
    """What passes may consult: the target backend, options, and the manager's records."""

    backend: Backend | None = None
    debug: bool = False
    dump_before: frozenset[str] = frozenset()
    dump_after: frozenset[str] = frozenset()
    dumps: list[tuple[str, str]] = field(default_factory=list)  # (label, text)
    timings: dict[str, float] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    #: passes that lower kinds consult this (None: lower what the backend does not support)
    options: dict[str, object] = field(default_factory=dict)


PassFn = Callable[[Any, PassContext], bool]


@dataclass(frozen=True)
class Pass:
    name: str
    fn: PassFn
    doc: str = ""


class PassRegistry:
    """Named passes over one kind of IR (the graph IR here; the low-level IR reuses it).

    ``what`` names the passes in messages ("pass", "LIR pass"); ``modules`` names
    the modules whose registrations fill the registry (imported on first lookup).
    """

    def __init__(self, what: str, modules: Sequence[str] = ()) -> None:
        self.what = what
        self.passes: dict[str, Pass] = {}
        self.modules = tuple(modules)

    def register(self, name: str) -> Callable[[PassFn], PassFn]:
        """Register a pass under a unique name; its docstring documents it."""

        def deco(fn: PassFn) -> PassFn:
            if name in self.passes:
                raise GlowError(f"{self.what} {name!r} registered twice")
            self.passes[name] = Pass(name, fn, (fn.__doc__ or "").strip())
            return fn

        return deco

    def _load(self) -> None:
        for module in self.modules:  # each import registers that module's passes (once)
            importlib.import_module(module)

    def get(self, name: str) -> Pass:
        self._load()
        try:
            return self.passes[name]
        except KeyError:
            raise PassError(f"unknown {self.what} '{name}'; choose one of: {', '.join(sorted(self.passes))}") from None

    def all(self) -> dict[str, Pass]:
        self._load()
        return dict(self.passes)


#: the modules that register graph passes (by name: the pass infrastructure imports no pass module)
GRAPH_PASS_MODULES = (
    "glow_core.passes.basic",
    "glow_core.lowering.table",  # the 'lower' pass
    "glow_core.passes.arith",
    "glow_core.passes.batchnorm",
    "glow_core.passes.compressed",
    "glow_core.passes.concat",
    "glow_core.passes.fusion",
    "glow_core.passes.matmul_batch",
    "glow_core.passes.noop",
    "glow_core.passes.reshape",
    "glow_core.passes.transpose",
)

#: the graph-IR passes
GRAPH_PASSES = PassRegistry("pass", GRAPH_PASS_MODULES)
_PASSES = GRAPH_PASSES.passes


def graph_pass(name: str) -> Callable[[PassFn], PassFn]:
    """Register a graph pass under a unique name; its docstring documents it."""
    return GRAPH_PASSES.register(name)


def get_pass(name: str) -> Pass:
    return GRAPH_PASSES.get(name)


def all_passes() -> dict[str, Pass]:
    return GRAPH_PASSES.all()


@dataclass(frozen=True)
class FixedPoint:
    """Run ``steps`` repeatedly until none of them changes anything (at most ``limit`` rounds)."""

    steps: tuple[Step, ...]
    limit: int = 8

    def __init__(self, *steps: Step, limit: int = 8) -> None:
        object.__setattr__(self, "steps", tuple(steps))
        object.__setattr__(self, "limit", limit)


Step = Union[str, FixedPoint]


class PassManager:
    """Runs a pipeline of passes from ``registry`` over an IR object with ``verify()`` and ``dump()``."""

    registry: PassRegistry = GRAPH_PASSES

    def __init__(self, pipeline: Sequence[Step], name: str = "pipeline", registry: PassRegistry | None = None) -> None:
        self.pipeline = tuple(pipeline)
        self.name = name
        if registry is not None:
            self.registry = registry
        for step in self._flatten(self.pipeline):
            self.registry.get(step)  # unknown names fail early

    def _flatten(self, steps: Sequence[Step]) -> list[str]:
        out: list[str] = []
        for s in steps:
            out.extend(self._flatten(s.steps) if isinstance(s, FixedPoint) else [s])
        return out

    def run(self, fn: Any, ctx: PassContext | None = None) -> bool:
        ctx = ctx or PassContext()
        return self._run_steps(self.pipeline, fn, ctx)

    def _run_steps(self, steps: Sequence[Step], fn: Any, ctx: PassContext) -> bool:
        changed = False
        for step in steps:
            if isinstance(step, FixedPoint):
                for _ in range(step.limit):
                    if not self._run_steps(step.steps, fn, ctx):
                        break
                    changed = True
            else:
                changed |= self.run_pass(step, fn, ctx)
        return changed

    def run_pass(self, name: str, fn: Any, ctx: PassContext) -> bool:
        p = self.registry.get(name)
        what = self.registry.what
        if name in ctx.dump_before:
            ctx.dumps.append((f"before {name}", fn.dump()))
        t0 = time.perf_counter()
        try:
            changed = bool(p.fn(fn, ctx))
        except PassError:
            raise  # names its pass already
        except GlowError as e:
            _add_pass_context(e, what, name)
            raise
        except Exception as e:
            raise PassError(f"{what} '{name}' failed on function {fn.name}: {type(e).__name__}: {e}") from e
        finally:
            ctx.timings[name] = ctx.timings.get(name, 0.0) + time.perf_counter() - t0
            ctx.runs[name] = ctx.runs.get(name, 0) + 1
        if changed:
            ctx.changes[name] = ctx.changes.get(name, 0) + 1
        if ctx.debug:
            try:
                fn.verify()
            except GlowError as e:
                raise PassError(f"{what} '{name}' left function {fn.name} invalid: {e}") from e
        if name in ctx.dump_after:
            ctx.dumps.append((f"after {name}", fn.dump()))
        return changed


def _add_pass_context(error: GlowError, what: str, name: str) -> None:
    """Name the failing pass on ``error`` itself, keeping its type and fields (``placeholders``, ``hint``, ...).

    The innermost pass wins (``pass_name`` is set once); the message gains the
    prefix "in pass 'NAME'" (see ``GlowError.add_context``) instead of the error
    being rebuilt.
    """
    if error.pass_name is not None:
        return
    error.pass_name = name
    error.add_context(f"in {what} '{name}'")
