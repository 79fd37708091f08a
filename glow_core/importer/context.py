"""What an import rule sees: one ONNX node, its operands and a way to emit nodes.

Import rules are registered per ONNX op type in ``glow_core.importer.rules``
with :func:`import_rule`. A rule reads attributes with ``ctx.attr``, operands
with ``ctx.input`` (a graph value) or ``ctx.const`` (a compile-time numpy
value, for operands that decide shapes), emits graph nodes with ``ctx.emit``
and returns one value per ONNX output.

``ctx.emit`` folds a node whose operands are all constants right away, with
the reference backend's kernels (reached through the plugin registry), so
shape subgraphs (Shape -> Gather -> Concat -> Reshape) become constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from glow_core import budget
from glow_core.errors import BudgetError, DynamicValueError, GlowError, GlowTypeError, ModelError, UnsupportedError
from glow_core.importer.structured import RaggedValue
from glow_core.ir.graph import Constant, Function, NodeOutput, Placeholder, Value
from glow_core.ir.interning import intern
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import ElemKind, TensorType
from glow_core.reference import run_kernel

#: Largest constant (in elements) the importer folds eagerly.
FOLD_LIMIT = 256 * 1024 * 1024  # elements: a model's largest weights (VGG-19 fc6: 103M) still fold


@dataclass(frozen=True)
class ImportRule:
    op_type: str
    fn: Callable[["NodeContext"], Sequence[Value | None]]
    domain: str = ""
    #: ONNX output count accepted beyond the first (e.g. Dropout's mask), or None for any
    since: int = 1


_RULES: dict[tuple[str, str], ImportRule] = {}


def import_rule(*op_types: str, domain: str = "") -> Callable[[Any], Any]:
    """Register an import rule for one or more ONNX op types."""

    def deco(fn: Callable[["NodeContext"], Sequence[Value | None]]) -> Any:
        for op in op_types:
            key = (domain, op)
            if key in _RULES:
                raise GlowError(f"import rule for ONNX op {op!r} registered twice")
            _RULES[key] = ImportRule(op, fn, domain)
        return fn

    return deco


def import_rules() -> Mapping[tuple[str, str], ImportRule]:
    import glow_core.importer.rules  # noqa: F401  (registers every rule)

    return _RULES


# ONNX TensorProto data type -> element kind
ONNX_ELEMS: dict[int, ElemKind] = {
    onnx.TensorProto.FLOAT: ElemKind.FLOAT32,
    onnx.TensorProto.FLOAT16: ElemKind.FLOAT16,
    onnx.TensorProto.BFLOAT16: ElemKind.BFLOAT16,
    onnx.TensorProto.DOUBLE: ElemKind.FLOAT64,
    onnx.TensorProto.INT8: ElemKind.INT8,
    onnx.TensorProto.UINT8: ElemKind.UINT8,
    onnx.TensorProto.INT16: ElemKind.INT16,
    onnx.TensorProto.UINT16: ElemKind.UINT16,
    onnx.TensorProto.INT32: ElemKind.INT32,
    onnx.TensorProto.UINT32: ElemKind.UINT32,
    onnx.TensorProto.INT64: ElemKind.INT64,
    onnx.TensorProto.UINT64: ElemKind.UINT64,
    onnx.TensorProto.BOOL: ElemKind.BOOL,
    onnx.TensorProto.FLOAT8E4M3FN: ElemKind.FLOAT8E4M3FN,
    onnx.TensorProto.FLOAT8E4M3FNUZ: ElemKind.FLOAT8E4M3FNUZ,
    onnx.TensorProto.FLOAT8E5M2: ElemKind.FLOAT8E5M2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: ElemKind.FLOAT8E5M2FNUZ,
    onnx.TensorProto.FLOAT4E2M1: ElemKind.FLOAT4E2M1,
    onnx.TensorProto.FLOAT8E8M0: ElemKind.FLOAT8E8M0,
    onnx.TensorProto.INT4: ElemKind.INT4,
    onnx.TensorProto.UINT4: ElemKind.UINT4,
    onnx.TensorProto.INT2: ElemKind.INT2,
    onnx.TensorProto.UINT2: ElemKind.UINT2,
}


def onnx_elem(data_type: int, where: str) -> ElemKind:
    try:
        return ONNX_ELEMS[data_type]
    except KeyError:
        if data_type not in onnx.TensorProto.DataType.values():
            raise ModelError(f"{where}: element type {data_type} is not an ONNX TensorProto data type",
                             hint="the model file is corrupt") from None
        name = onnx.TensorProto.DataType.Name(data_type)
        why = (" (string tensors have no element kind: glow's backends run on fixed-width memory)"
               if data_type == onnx.TensorProto.STRING else "")
        raise UnsupportedError(f"{where}: element type {name} is not supported{why}") from None


def tensor_array(t: onnx.TensorProto, where: str) -> np.ndarray:
    """The value of a tensor held in the model (an attribute's), checked before numpy reads it.

    Its dims are checked against the memory budget first (negative or huge dims are
    refused), and data that does not fit the dims (a raw_data of the wrong length, ...)
    is a ModelError naming the tensor, never a ValueError from numpy.
    """
    elem = onnx_elem(t.data_type, where)
    budget.current().check_tensor(tuple(t.dims), elem.itemsize, where, f"tensor '{t.name}'")
    try:
        return np.asarray(numpy_helper.to_array(t)).astype(elem.dtype)
    except MemoryError:
        raise BudgetError(f"{where}: out of memory reading tensor '{t.name}'") from None
    except Exception as e:  # noqa: BLE001  (numpy and onnx raise assorted errors on corrupt data)
        raise ModelError(f"{where}: tensor '{t.name}' of shape {list(t.dims)} cannot be read: {e}",
                         hint="the model file is corrupt") from None


def _decode(name: str, v: bytes, where: str) -> str:
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelError(f"{where}: attribute '{name}' = {v[:40]!r} is not valid UTF-8",
                         hint="the model file is corrupt") from None


class NodeContext:
    """The view an import rule has of one ONNX node."""

    def __init__(self, importer: "Any", node: onnx.NodeProto, opset: int) -> None:
        self.importer = importer
        self.node = node
        self.opset = opset
        self.fn: Function = importer.fn
        self.name = node.name or (node.output[0] if node.output else node.op_type)
        self._attrs = {a.name: a for a in node.attribute}

    # -- description ---------------------------------------------------------
    @property
    def op_type(self) -> str:
        return self.node.op_type

    def where(self) -> str:
        return f"ONNX node '{self.name}' ({self.node.op_type}, opset {self.opset})"

    def unsupported(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where()}: {what}")

    # -- operands ------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.node.input)

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def input(self, i: int) -> Value | None:
        v = self.operand(i)
        if isinstance(v, RaggedValue):
            raise UnsupportedError(
                f"{self.where()}: operand {i} ('{self.node.input[i]}') is a result of data-dependent size (of "
                f"{v.producer}); glow supports such a result only as a model output",
                hint="glow compiles for static shapes; the caller trims that output to its count")
        if v is not None and not isinstance(v, Value):
            raise GlowTypeError(f"{self.where()}: operand {i} ('{self.node.input[i]}') is a sequence or optional "
                                "value; this operator takes a tensor there",
                                hint="take the tensor out first (SequenceAt, OptionalGetElement)")
        return v

    def operand(self, i: int) -> Any:
        """Operand ``i`` as imported: a tensor value, a sequence or optional (importer/structured.py), or None."""
        if not self.has_input(i):
            return None
        return self.importer.value(self.node.input[i], self.where())

    def req(self, i: int) -> Value:
        v = self.input(i)
        if v is None:
            raise GlowTypeError(f"{self.where()}: operand {i} is required")
        return v

    def inputs(self) -> list[Value | None]:
        return [self.input(i) for i in range(self.num_inputs)]

    def type(self, i: int) -> TensorType:
        return self.req(i).type

    def const(self, i: int, what: str = "") -> np.ndarray | None:
        """The compile-time value of operand ``i`` (None when omitted).

        Raises DynamicValueError naming the model inputs it depends on when the
        value is only known at run time.
        """
        v = self.input(i)
        if v is None:
            return None
        if isinstance(v, Constant):
            return v.payload
        deps = tuple(sorted(self.importer.placeholders_behind(v)))
        label = what or f"operand {i} ('{self.node.input[i]}')"
        raise DynamicValueError(
            f"{self.where()}: {label} decides shapes and must be known at compile time, "
            f"but it depends on run-time input(s) {', '.join(deps) or '?'}",
            deps,
            hint="fix it in the model (make it an initializer) or bind the input as a constant",
        )

    def const_ints(self, i: int, what: str = "") -> tuple[int, ...] | None:
        c = self.const(i, what)
        return None if c is None else tuple(int(x) for x in np.asarray(c).reshape(-1))

    # -- attributes ----------------------------------------------------------
    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr(self, name: str, default: Any = None) -> Any:
        a = self._attrs.get(name)
        if a is None:
            return default
        if a.type == onnx.AttributeProto.GRAPH or a.type == onnx.AttributeProto.GRAPHS:
            raise self.unsupported(f"attribute '{name}' holds a subgraph; control flow is not supported")
        if a.type == onnx.AttributeProto.TENSOR:
            return tensor_array(a.t, self.where())
        if a.ref_attr_name:
            raise self.unsupported(f"attribute '{name}' refers to a function attribute")
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return _decode(name, v, self.where())
        if isinstance(v, list):
            return [_decode(name, x, self.where()) if isinstance(x, bytes) else x for x in v]
        return v

    def subgraph(self, name: str) -> onnx.GraphProto:
        """The subgraph held by attribute ``name`` (If branches, Loop and Scan bodies)."""
        a = self._attrs.get(name)
        if a is None or a.type != onnx.AttributeProto.GRAPH:
            raise self.unsupported(f"attribute '{name}' (a subgraph) is missing")
        return a.g

    def check_attrs(self, known: Sequence[str]) -> None:
        """Refuse attributes this rule does not understand (never silently ignore one)."""
        extra = set(self._attrs) - set(known)
        if extra:
            raise self.unsupported(f"attribute(s) {sorted(extra)} are not supported")

    # -- emitting ------------------------------------------------------------
    def emit(self, kind: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any] | None = None,
             name: str | None = None) -> list[Value]:
        """Create a node of ``kind`` (folded to constants when every operand is constant)."""
        return self.importer.emit(kind, inputs, attrs or {}, name or self.name, self.name)

    def emit1(self, kind: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any] | None = None,
              name: str | None = None) -> Value:
        return self.emit(kind, inputs, attrs, name)[0]

    def reserve(self, shape: Sequence[int], elem: ElemKind, what: str = "generated constant") -> None:
        """Count a constant this rule is about to compute against the memory budget (before allocating it)."""
        self.importer.tally.add(shape, elem.itemsize, self.where(), what)

    def constant(self, array: np.ndarray | Any, dtype: Any = None, name: str | None = None) -> Constant:
        arr = np.asarray(array, dtype=dtype)
        return self.fn.add_constant(arr, name or f"{self.name}_const")


def placeholders_behind(v: Value) -> set[str]:
    """Names of the inputs a value depends on."""
    out: set[str] = set()
    stack: list[Value] = [v]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Placeholder):
            out.add(x.name)
        elif isinstance(x, NodeOutput):
            stack.extend(i for i in x.node.inputs if i is not None)
    return out


#: a Cast of an 8-bit integer matrix of at least this many elements to float32 is left unfolded: a weight
#: that ships compressed, which ``keep-compressed-weights`` keeps compressed (or constant folding folds later)
DEFERRED_CAST_MIN = 4096
_COMPRESSED = frozenset({ElemKind.INT8, ElemKind.UINT8})


def deferred_cast(kind: str, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> bool:
    """Is this all-constant node a weight's dequantizing Cast, left for the optimizer (see above)?"""
    if kind != "Cast" or len(inputs) != 1 or attrs.get("to") is not ElemKind.FLOAT32:
        return False
    t = inputs[0].type
    return t.elem in _COMPRESSED and t.rank == 2 and t.size >= DEFERRED_CAST_MIN


def fold_node(fn: Function, kind: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any],
              out_types: Sequence[TensorType], name: str) -> list[Value] | None:
    """Evaluate a node with all-constant operands with the reference kernels (no backend involved)."""
    get_kind(kind)
    if sum(t.size for t in out_types) > FOLD_LIMIT:
        return None
    arrays = [v.payload if isinstance(v, Constant) else None for v in inputs]
    try:
        results = run_kernel(kind, attrs, arrays, out_types, f"constant folding of {kind} ({name})")
    except MemoryError:
        raise BudgetError(f"{kind} node '{name}': out of memory while folding it to a constant "
                          f"({', '.join(str(t) for t in out_types)})",
                          hint="lower GLOW_MAX_TOTAL_BYTES below the memory this machine has") from None
    # (interned: a large folded constant, such as a transposed weight, is held once however many imports fold it)
    return [fn.add_constant(intern(np.asarray(r)), name, t) for r, t in zip(results, out_types)]
