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
import onnx

from glow_core.errors import ModelError, RuntimeControlFlowError
from glow_core.importer.context import ONNX_ELEMS, NodeContext, import_rule, placeholders_behind
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


def _static_outputs(body: onnx.GraphProto, first: int) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, itemsize) of the body's outputs from ``first`` on whose type is declared in full."""
    out = []
    for vi in body.output[first:]:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]
        if vi.type.HasField("tensor_type") and tt.elem_type in ONNX_ELEMS and tt.HasField("shape") and \
                None not in dims:
            out.append((vi.name, tuple(int(d) for d in dims), ONNX_ELEMS[tt.elem_type].itemsize))
    return out


def check_accumulation(ctx: NodeContext, steps: int, outputs: list[tuple[str, tuple[int, ...], int]]) -> None:
    """A loop of ``steps`` iterations stacks each scan output ``steps`` times (and holds the steps' values to
    stack them): each within one tensor's limit, all of them within the total, before anything runs."""
    limits = ctx.importer.budget
    total = 0
    for name, shape, itemsize in outputs:
        total += 2 * limits.check_tensor((steps,) + shape, itemsize, ctx.where(),
                                         f"scan output '{name}' over {steps} iterations")
    if outputs:
        limits.check_total(total, ctx.where(), f"its scan outputs over {steps} iterations (stacked)")


def _loop_steps(ctx: NodeContext) -> int | None:
    """The iterations a Loop runs when its trip count is a constant and no condition operand can stop it."""
    trip = ctx.input(0) if len(ctx.node.input) > 0 and ctx.node.input[0] else None
    cond = ctx.node.input[1] if len(ctx.node.input) > 1 else ""
    if not isinstance(trip, Constant) or cond or trip.payload.size != 1:
        return None
    return max(int(trip.payload.reshape(-1)[0]), 0)


def _scan_steps(ctx: NodeContext, n_scan: int) -> int | None:
    """The iterations a Scan (opset 9 on) runs: the length of its scan inputs along their axes."""
    axes = ctx.attr("scan_input_axes") or [0] * n_scan
    lengths = set()
    for k, axis in zip(range(len(ctx.node.input) - n_scan, len(ctx.node.input)), axes):
        x = ctx.input(k)
        if not isinstance(x, Value) or not -len(x.type.shape) <= int(axis) < len(x.type.shape):
            return None
        lengths.add(x.type.shape[int(axis)])
    return lengths.pop() if len(lengths) == 1 else None


@import_rule("Loop", "Scan")
def import_loop(ctx: NodeContext) -> Sequence[Value | None]:
    body = ctx.subgraph("body")
    if ctx.node.op_type == "Loop":
        steps, first = _loop_steps(ctx), 1 + max(0, len(ctx.node.input) - 2)
    else:
        n_scan = ctx.attr("num_scan_inputs")
        ok = ctx.opset >= 9 and isinstance(n_scan, int) and 1 <= n_scan <= len(ctx.node.input)
        steps = _scan_steps(ctx, n_scan) if ok else None
        first = len(ctx.node.input) - n_scan if ok else 0
    if steps is not None:
        check_accumulation(ctx, steps, _static_outputs(body, first))
    raise RuntimeControlFlowError(f"{ctx.where()}: loops run on the host, one compiled body per iteration",
                                  ctx.name, hint=RUN_TIME_HINT)
