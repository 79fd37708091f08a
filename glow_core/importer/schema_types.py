"""The element types an op accepts at the model's opset, from the op's ONNX schema.

The ONNX schema of an op at an opset (``onnx.defs.get_schema(op, opset, domain)``)
lists its formal inputs and outputs and, per type parameter, the types allowed
(``T: tensor(uint32), tensor(int32), ...``). An operand of another type breaks
the op's definition at that opset: int8 arrived in ``Div`` at opset 14, so an
int8 ``Div`` in an opset-13 model is refused (:func:`check_node_types`), naming
the op, the type, the opset and the first opset that allows it. Ops with no
schema in the installed onnx (other domains, model-local functions) are not
checked here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from glow_core.errors import ModelError
from glow_core.importer.context import ONNX_ELEMS
from glow_core.importer.structured import OptValue, SeqValue
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind


@dataclass(frozen=True)
class OpTypes:
    """An op's formal parameters at one opset: the type string of each input and output (the last input
    may be variadic), and the allowed type strings per type parameter."""

    inputs: tuple[str, ...]
    variadic: bool
    outputs: tuple[str, ...]
    allowed: dict[str, frozenset[str]]


@functools.lru_cache(maxsize=1024)
def op_types(op_type: str, opset: int, domain: str = "") -> OpTypes | None:
    """The schema's formal parameters of ``op_type`` at ``opset`` of ``domain``, or None (no schema)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    variadic = bool(schema.inputs) and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    return OpTypes(tuple(p.type_str for p in schema.inputs), variadic, tuple(p.type_str for p in schema.outputs),
                   allowed)


#: glow's element kind -> the ONNX type string of a tensor of it
_TENSOR_STRS: dict[ElemKind, str] = {e: f"tensor({onnx.TensorProto.DataType.Name(code).lower()})"
                                     for code, e in ONNX_ELEMS.items()}


def _elem_str(elem: ElemKind | None) -> str | None:
    return None if elem is None else _TENSOR_STRS.get(elem)


def type_str(v: Any) -> str | None:
    """The ONNX type string of an import-time value (``tensor(int8)``, ``seq(tensor(float))``), or None."""
    if isinstance(v, Value):
        return _elem_str(v.type.elem)
    if isinstance(v, SeqValue):
        inner = _elem_str(v.elem)
        return None if inner is None else f"seq({inner})"
    if isinstance(v, OptValue) and v.value is not None:
        inner = type_str(v.value)
        return None if inner is None else f"optional({inner})"
    return None


def _first_opset_allowing(op_type: str, domain: str, index: int, is_input: bool, wanted: str,
                          after: int) -> int | None:
    for opset in range(after + 1, onnx.defs.onnx_opset_version() + 1) if domain == "" else ():
        t = op_types(op_type, opset, domain)
        params = (t.inputs if is_input else t.outputs) if t is not None else ()
        if t is not None and params:
            param = params[min(index, len(params) - 1)]
            if wanted in t.allowed.get(param, frozenset({param})):
                return opset
    return None


def _refuse(node: onnx.NodeProto, opset: int, domain: str, index: int, is_input: bool, got: str,
            allowed: frozenset[str], where: str) -> ModelError:
    role = "input" if is_input else "output"
    name = (node.input if is_input else node.output)[index]
    since = _first_opset_allowing(node.op_type, domain, index, is_input, got, opset)
    shown = ", ".join(sorted(a[len("tensor("):-1] if a.startswith("tensor(") else a for a in allowed))
    elem = got[len("tensor("):-1] if got.startswith("tensor(") else got
    later = f" ({elem} is allowed from opset {since})" if since is not None else ""
    return ModelError(f"{where}: {role} {index} ('{name}') is {elem}, which {node.op_type} does not accept at "
                      f"opset {opset}{later}; it accepts {shown}",
                      hint=f"convert the model to opset {since} or later" if since is not None else
                      f"cast the {role} to a type {node.op_type} accepts")


def _check(node: onnx.NodeProto, opset: int, domain: str, params: Sequence[str], variadic: bool,
           values: Sequence[Any], is_input: bool, allowed: dict[str, frozenset[str]], where: str,
           only: Callable[[str], bool]) -> None:
    names = node.input if is_input else node.output
    for k, v in enumerate(values):
        if k >= len(params) and not variadic:
            return
        if k >= len(names) or not names[k]:
            continue  # an optional operand the node leaves out (a result glow computes that no one reads)
        param = params[min(k, len(params) - 1)]
        got = type_str(v)
        # a type parameter's allowed types, or (an input) the one type a formal parameter names (axes: int64)
        ok = allowed.get(param, frozenset({param}) if is_input and param.startswith("tensor(") else None)
        if got is None or ok is None or not only(param) or not any(a.startswith(got[:3]) for a in ok):
            continue  # not a type parameter, an unknown value, or a kind of type this check does not model
        if got not in ok:
            raise _refuse(node, opset, domain, k, is_input, got, ok, where)


def check_node_types(node: onnx.NodeProto, opset: int, domain: str, inputs: Sequence[Any], where: str) -> None:
    """Refuse an operand (an import-time value, None where absent) whose type the op's schema at ``opset``
    does not allow (:class:`ModelError`)."""
    t = op_types(node.op_type, opset, domain)
    if t is not None:
        _check(node, opset, domain, t.inputs, t.variadic, inputs, True, t.allowed, where, lambda p: True)


def check_result_types(node: onnx.NodeProto, opset: int, domain: str, outputs: Sequence[Any], where: str) -> None:
    """Refuse a result whose type the schema does not allow, for the type parameters no input binds (the
    type an attribute chooses: ``Cast.to``, ``dtype``, ``output_dtype``)."""
    t = op_types(node.op_type, opset, domain)
    if t is None:
        return
    bound = set(t.inputs)
    _check(node, opset, domain, t.outputs, False, outputs, False, t.allowed, where, lambda p: p not in bound)
