"""The node-kind table: every graph node kind is declared here, once.

A kind is an identity plus its declaration: operands, attributes (with types
and defaults), a type rule (input types + attributes -> output types), an
optional verifier and the category sets it belongs to. Interpretations
(interpreter kernels, lowering, codegen) keep their own tables keyed by kind
name and validate their keys against this table.

Kinds are declared in ``glow_core.ir.defs`` (one module per family) with
:func:`define_kind`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

from glow_core.errors import GlowError, GlowTypeError
from glow_core.ir.types import ALL_KINDS, ElemKind, TensorType


class AttrType(enum.Enum):
    INT = "int"
    FLOAT = "float"
    INTS = "ints"
    FLOATS = "floats"
    STRING = "string"
    STRINGS = "strings"
    BOOL = "bool"
    ELEM = "elem"  # an ElemKind
    TENSOR = "tensor"  # a small numpy array (e.g. a fill value)


class Category(enum.Enum):
    """Category sets of kinds (tinygrad-style) that passes and backends query."""

    ELEMENTWISE = "elementwise"  # output element i depends only on input element i (after broadcast)
    UNARY = "unary"
    BINARY = "binary"
    COMMUTATIVE = "commutative"
    COMPARISON = "comparison"
    LOGICAL = "logical"
    ACTIVATION = "activation"
    REDUCTION = "reduction"
    DATA_MOVEMENT = "data_movement"
    LINEAR_ALGEBRA = "linear_algebra"
    CONVOLUTION = "convolution"
    POOLING = "pooling"
    NORMALIZATION = "normalization"
    QUANTIZATION = "quantization"
    PRIMITIVE = "primitive"  # member of the primitive set every backend implements
    NO_OP = "no_op"  # identity at inference (Dropout, Identity)


_REQUIRED: Any = object()


@dataclass(frozen=True)
class AttrSpec:
    name: str
    type: AttrType
    default: Any = _REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True)
class OperandSpec:
    name: str
    optional: bool = False
    variadic: bool = False  # only the last operand may be variadic (one or more values)


def attr(name: str, type: AttrType, default: Any = _REQUIRED, doc: str = "") -> AttrSpec:
    return AttrSpec(name, type, default, doc)


def operands(*names: str) -> tuple[OperandSpec, ...]:
    """``operands("X", "W", "B?", "rest*")``: ``?`` optional, ``*`` variadic."""
    out = []
    for n in names:
        if n.endswith("?"):
            out.append(OperandSpec(n[:-1], optional=True))
        elif n.endswith("*"):
            out.append(OperandSpec(n[:-1], variadic=True))
        else:
            out.append(OperandSpec(n))
    return tuple(out)


#: A type rule: (input types, None for an omitted optional operand; attributes)
#: -> output types. Raise GlowTypeError with a message naming the problem.
TypeRule = Callable[[Sequence[TensorType | None], Mapping[str, Any]], Sequence[TensorType]]
Verifier = Callable[[Sequence[TensorType | None], Mapping[str, Any], Sequence[TensorType]], None]


@dataclass(frozen=True)
class NodeKind:
    name: str
    inputs: tuple[OperandSpec, ...]
    outputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...]
    infer: TypeRule
    verify: Verifier | None = None
    categories: frozenset[Category] = frozenset()
    #: element kinds the kind is defined for (of its first operand, by default)
    elems: frozenset[ElemKind] = ALL_KINDS
    #: outputs vary in number (Split); ``outputs`` then names the family
    variadic_outputs: bool = False
    doc: str = ""
    attr_index: Mapping[str, AttrSpec] = field(default_factory=dict, compare=False)

    def is_(self, category: Category) -> bool:
        return category in self.categories

    def normalize_attrs(self, given: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Check names and types, fill defaults, freeze lists into tuples."""
        unknown = set(given) - set(self.attr_index)
        if unknown:
            raise GlowTypeError(
                f"{where}: {self.name} has no attribute(s) {sorted(unknown)}; "
                f"it takes {sorted(self.attr_index) or 'none'}"
            )
        out: dict[str, Any] = {}
        for spec in self.attrs:
            if spec.name in given and given[spec.name] is not None:
                out[spec.name] = _coerce(spec, given[spec.name], where, self.name)
            elif spec.required:
                raise GlowTypeError(f"{where}: {self.name} needs attribute '{spec.name}' ({spec.type.value})")
            else:
                out[spec.name] = spec.default
        return out

    def check_arity(self, n_inputs: int, where: str) -> None:
        fixed = [o for o in self.inputs if not o.variadic]
        required = sum(1 for o in fixed if not o.optional)
        variadic = bool(self.inputs) and self.inputs[-1].variadic
        if n_inputs < required + (1 if variadic else 0) or (not variadic and n_inputs > len(fixed)):
            names = ", ".join(o.name + ("?" if o.optional else "*" if o.variadic else "") for o in self.inputs)
            raise GlowTypeError(f"{where}: {self.name} takes operands ({names}), got {n_inputs}")


def _coerce(spec: AttrSpec, value: Any, where: str, kind: str) -> Any:
    try:
        t = spec.type
        if t is AttrType.INT:
            return int(value)
        if t is AttrType.FLOAT:
            return float(value)
        if t is AttrType.BOOL:
            return bool(value)
        if t is AttrType.INTS:
            return tuple(int(v) for v in value)
        if t is AttrType.FLOATS:
            return tuple(float(v) for v in value)
        if t is AttrType.STRING:
            return value.decode() if isinstance(value, bytes) else str(value)
        if t is AttrType.STRINGS:
            return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in value)
        if t is AttrType.ELEM:
            if not isinstance(value, ElemKind):
                raise TypeError("not an ElemKind")
            return value
        if t is AttrType.TENSOR:
            import numpy as np

            arr = np.array(value)
            arr.setflags(write=False)
            return arr
    except (TypeError, ValueError) as e:
        raise GlowTypeError(f"{where}: {kind} attribute '{spec.name}' must be {spec.type.value}: {e}") from None
    raise GlowError(f"unhandled attribute type {spec.type}")  # pragma: no cover


_KINDS: dict[str, NodeKind] = {}

#: Read-only view of the table, keyed by kind name.
KINDS: Mapping[str, NodeKind] = MappingProxyType(_KINDS)


def define_kind(
    name: str,
    *,
    inputs: Sequence[str],
    outputs: Sequence[str] = ("Result",),
    attrs: Sequence[AttrSpec] = (),
    infer: TypeRule,
    verify: Verifier | None = None,
    categories: Sequence[Category] = (),
    elems: frozenset[ElemKind] | None = None,
    variadic_outputs: bool = False,
    doc: str = "",
) -> NodeKind:
    """Declare a node kind. Each name may be declared once."""
    if name in _KINDS:
        raise GlowError(f"node kind {name!r} is declared twice")
    ins = operands(*inputs)
    if any(o.variadic for o in ins[:-1]):
        raise GlowError(f"node kind {name!r}: only the last operand may be variadic")
    spec = NodeKind(
        name=name,
        inputs=ins,
        outputs=tuple(outputs),
        attrs=tuple(attrs),
        infer=infer,
        verify=verify,
        categories=frozenset(categories),
        elems=elems if elems is not None else ALL_KINDS,
        variadic_outputs=variadic_outputs,
        doc=doc,
        attr_index={a.name: a for a in attrs},
    )
    _KINDS[name] = spec
    return spec


def get_kind(name: str) -> NodeKind:
    _ensure_loaded()
    try:
        return _KINDS[name]
    except KeyError:
        raise GlowError(f"unknown node kind {name!r}") from None


def all_kinds() -> Mapping[str, NodeKind]:
    _ensure_loaded()
    return KINDS


def kinds_in(category: Category) -> frozenset[str]:
    _ensure_loaded()
    return frozenset(k.name for k in _KINDS.values() if category in k.categories)


def _ensure_loaded() -> None:
    import glow_core.ir.defs  # noqa: F401  (declares every kind on first import)


class KindTable(dict):  # type: ignore[type-arg]
    """A per-interpretation table keyed by kind name (kernels, lowerings, ...).

    ``register`` validates that the kind exists and is not registered twice.
    """

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def register(self, *kinds: str) -> Callable[[Any], Any]:
        def deco(fn: Any) -> Any:
            for k in kinds:
                self.add(k, fn)
            return fn

        return deco

    def add(self, kind: str, value: Any) -> None:
        get_kind(kind)  # raises for an unknown kind
        if kind in self:
            raise GlowError(f"{self.what}: kind {kind!r} registered twice")
        self[kind] = value
