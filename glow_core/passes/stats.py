"""What the optimizer did to a function: node counts by kind before/after, time per pass.

``glow dump MODEL --stats`` prints :func:`format_stats` of
:func:`optimize_with_stats`; code can use the :class:`OptimizationStats`
record directly::

    stats = optimize_with_stats(fn, backend)     # optimizes fn in place
    print(format_stats(stats))
    stats.removed("BatchNormalization")           # -> 53 for the light ResNet-50
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from glow_core.ir.graph import Function
from glow_core.passinfra import PassContext, PassManager, Step

if TYPE_CHECKING:
    from glow_sdk.backend import Backend


@dataclass
class OptimizationStats:
    """Node counts by kind before and after a pipeline, and per-pass records (in first-run order)."""

    before: dict[str, int]
    after: dict[str, int]
    #: pass name -> total seconds over all its runs
    pass_seconds: dict[str, float] = field(default_factory=dict)
    #: pass name -> how many times it ran (FixedPoint groups repeat passes)
    pass_runs: dict[str, int] = field(default_factory=dict)
    #: pass name -> how many of its runs changed the function
    pass_changes: dict[str, int] = field(default_factory=dict)
    total_seconds: float = 0.0

    def removed(self, kind: str) -> int:
        """How many nodes of ``kind`` the pipeline removed (negative: added)."""
        return self.before.get(kind, 0) - self.after.get(kind, 0)

    @staticmethod
    def from_context(before: dict[str, int], fn: Function, ctx: PassContext, seconds: float) -> OptimizationStats:
        return OptimizationStats(before=dict(before), after=fn.count_by_kind(), pass_seconds=dict(ctx.timings),
                                 pass_runs=dict(ctx.runs), pass_changes=dict(ctx.changes), total_seconds=seconds)


def optimize_with_stats(fn: Function, backend: Backend | None, *, debug: bool = False,
                        pipeline: Sequence[Step] | None = None, ctx: PassContext | None = None) -> OptimizationStats:
    """Run ``pipeline`` (default: the one ``glow_core.compile`` runs) on ``fn`` in place, with records."""
    from glow_core.passes.pipelines import default_pipeline

    ctx = ctx or PassContext(backend=backend, debug=debug)
    ctx.backend = backend
    before = fn.count_by_kind()
    t0 = time.perf_counter()
    PassManager(list(pipeline) if pipeline is not None else default_pipeline()).run(fn, ctx)
    if debug:
        fn.verify()
    return OptimizationStats.from_context(before, fn, ctx, time.perf_counter() - t0)


def format_stats(stats: OptimizationStats) -> str:
    """Two tables: node counts by kind (before, after, change) and the passes (runs, changed, time)."""
    kinds = sorted(set(stats.before) | set(stats.after))
    width = max([len(k) for k in kinds] + [len("pass"), len("total")] + [len(p) for p in stats.pass_seconds])
    lines = [f"{'node kind':<{width + 2}} {'before':>8} {'after':>8} {'change':>8}"]
    for k in kinds:
        b, a = stats.before.get(k, 0), stats.after.get(k, 0)
        lines.append(f"  {k:<{width}} {b:>8} {a:>8} {_signed(a - b):>8}")
    tb, ta = sum(stats.before.values()), sum(stats.after.values())
    lines.append(f"  {'total':<{width}} {tb:>8} {ta:>8} {_signed(ta - tb):>8}")
    lines.append("")
    lines.append(f"{'pass':<{width + 2}} {'runs':>8} {'changed':>8} {'ms':>10}")
    for name, sec in stats.pass_seconds.items():
        lines.append(f"  {name:<{width}} {stats.pass_runs.get(name, 0):>8} {stats.pass_changes.get(name, 0):>8} "
                     f"{sec * 1e3:>10.2f}")
    lines.append(f"  {'total':<{width}} {sum(stats.pass_runs.values()):>8} {sum(stats.pass_changes.values()):>8} "
                 f"{stats.total_seconds * 1e3:>10.2f}")
    return "\n".join(lines)


def _signed(n: int) -> str:
    return f"{n:+d}" if n else "0"
