"""Import rules for element-wise ONNX operators."""

from __future__ import annotations

from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value


@import_rule("Add")
def _add(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return ctx.emit("Add", [ctx.req(0), ctx.req(1)])


@import_rule("Relu")
def _relu(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs([])
    return ctx.emit("Relu", [ctx.req(0)])
