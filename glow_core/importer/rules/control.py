"""If, Loop and Scan (docs/control-flow.md).

An If whose condition is a compile-time constant (once input shapes and bound inputs are known,
the importer folds shape computations to constants) is folded: the chosen branch is imported in
place. Every other control-flow node raises :class:`RuntimeControlFlowError`; the control-flow
executor (``glow_core.controlflow``) splits the model there and runs the node on the host between
compiled segments.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from glow_core.errors import ModelError, RuntimeControlFlowError
from glow_core.importer.context import NodeContext, import_rule, placeholders_behind
from glow_core.ir.graph import Constant, Value

RUN_TIME_HINT = ("glow_core.compile, glow run and the ONNX backend run it on the host between compiled segments "
                 "(docs/control-flow.md); glow dump, bundles and --devices cannot (they need one function)")


@import_rule("If")
def import_if(ctx: NodeContext) -> Sequence[Value | None]:
    ctx.check_attrs(["then_branch", "else_branch"])
    cond = ctx.req(0)
    if not isinstance(cond, Constant):
        deps = ", ".join(sorted(placeholders_behind(cond))) or "?"
        raise RuntimeControlFlowError(f"{ctx.where()}: its condition depends on run-time input(s) {deps}",
                                      ctx.name, hint=RUN_TIME_HINT)
    arr = np.asarray(cond.payload)
    if arr.size != 1:
        raise ModelError(f"{ctx.where()}: the condition has {arr.size} elements; it must have exactly one")
    branch = "then_branch" if bool(arr.reshape(-1)[0]) else "else_branch"
    graph = ctx.subgraph(branch)
    if len(graph.output) != ctx.num_outputs:
        raise ModelError(f"{ctx.where()}: {branch} has {len(graph.output)} outputs, the node {ctx.num_outputs}")
    try:
        return ctx.importer.import_subgraph(graph, f"{ctx.where()} {branch}")
    except RuntimeControlFlowError as e:  # a nested node runs at run time: so does this If (constant condition)
        raise RuntimeControlFlowError(f"{ctx.where()}: its {branch} holds run-time control flow ({e})",
                                      ctx.name, hint=RUN_TIME_HINT) from None


@import_rule("Loop", "Scan")
def import_loop(ctx: NodeContext) -> Sequence[Value | None]:
    raise RuntimeControlFlowError(f"{ctx.where()}: loops run on the host, one compiled body per iteration",
                                  ctx.name, hint=RUN_TIME_HINT)
