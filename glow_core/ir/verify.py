"""``Function.verify()``: the invariants of the graph IR."""

from __future__ import annotations

from glow_core.errors import GlowTypeError, GlowVerifyError
from glow_core.ir.graph import Constant, Function, NodeOutput, Placeholder, Value, infer_types


def verify_function(fn: Function) -> None:
    problems: list[str] = []
    defined: set[int] = {id(p) for p in fn.inputs} | {id(c) for c in fn.constants}
    names: dict[str, str] = {}

    def claim(name: str, what: str) -> None:
        if name in names:
            problems.append(f"name '{name}' is used by both {names[name]} and {what}")
        names[name] = what

    for p in fn.inputs:
        claim(p.name, "an input")
    for c in fn.constants:
        claim(c.name, "a constant")
        if not c.type.matches(c.payload):
            problems.append(f"constant %{c.name}: payload does not match {c.type}")
    seen_nodes: set[int] = set()
    for node in fn.nodes:
        where = node.where()
        if node.function is not fn:
            problems.append(f"{where} is listed in {fn.name} but owned by another function")
        if id(node) in seen_nodes:
            problems.append(f"{where} is listed twice")
        seen_nodes.add(id(node))
        claim(node.name, where)
        for i, v in enumerate(node.inputs):
            if v is None:
                continue
            if id(v) not in defined:
                problems.append(f"{where}: operand {i} %{v.name} is not defined before it (order or ownership)")
            if (node, i) not in v.users:
                problems.append(f"{where}: operand {i} %{v.name} does not list it as a user")
        try:
            types = infer_types(node.kind, node.input_types(), node.attrs, where)
            if types != [o.type for o in node.outputs]:
                problems.append(
                    f"{where}: result types {[str(o.type) for o in node.outputs]} differ from its type rule {[str(t) for t in types]}"
                )
        except GlowTypeError as e:
            problems.append(str(e))
        for o in node.outputs:
            if not isinstance(o, NodeOutput) or o.node is not node:
                problems.append(f"{where}: result %{o.name} does not point back at it")
            defined.add(id(o))
            _check_users(o, fn, problems)
    for name, v in fn.outputs:
        if id(v) not in defined:
            problems.append(f"output '{name}' reads %{v.name}, which is not defined in {fn.name}")
    _check_leaf_users(fn.inputs, fn, problems)
    _check_leaf_users(fn.constants, fn, problems)
    if problems:
        raise GlowVerifyError(f"function {fn.name} is invalid:\n  " + "\n  ".join(problems))


def _check_leaf_users(values: list[Placeholder] | list[Constant], fn: Function, problems: list[str]) -> None:
    for v in values:
        _check_users(v, fn, problems)


def _check_users(v: Value, fn: Function, problems: list[str]) -> None:
    for user, idx in v.users:
        if user.function is not fn or idx >= len(user.inputs) or user.inputs[idx] is not v:
            problems.append(f"%{v.name} lists a stale user {user.where()}")
