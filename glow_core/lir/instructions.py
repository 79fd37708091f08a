"""The instruction-kind table of the low-level IR: every instruction kind, declared once.

An instruction kind declares its operands (name and direction: ``in``, ``out``
or ``inout``; out operands come first), whether it is *data-parallel* (output
element i depends only on input element i, so a device may split it freely)
and which in operands an out operand may share its buffer with (*in place*).

There are two families:

- **special kinds**, declared explicitly below: ``alloc`` and ``dealloc``
  (the lifetime of an activation), ``tensorview`` (an alias of a buffer with
  another type at a byte offset: no code, no copy) and ``copy``;
- **compute kinds**, one per graph node kind, derived from the node-kind table
  (:mod:`glow_core.ir.kinds`): out operands are the node's results, in operands
  its operands, data-parallel means the ELEMENTWISE category, and an
  element-wise kind may be computed in place on any operand of the result's
  shape and element width. :data:`COMPUTE_OVERRIDES` adjusts single entries
  (BatchNormalization is per-channel affine: in place on its Input; ...).

Graph kinds that are pure re-interpretations of memory become ``tensorview``
instructions instead of compute instructions; :data:`VIEW_RULES` says which,
and at what byte offset (Reshape, BitCast, Identity, Dropout, contiguous
Slice).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from glow_core.errors import GlowError
from glow_core.ir.kinds import Category, get_kind

if TYPE_CHECKING:
    from glow_core.ir.graph import Node


class Dir(enum.Enum):
    """The direction of an instruction operand."""

    IN = "in"
    OUT = "out"
    INOUT = "inout"

    @property
    def reads(self) -> bool:
        return self is not Dir.OUT

    @property
    def writes(self) -> bool:
        return self is not Dir.IN


class Effect(enum.Enum):
    """What an instruction kind does, for passes that treat the special kinds apart."""

    ALLOC = "alloc"  # starts the lifetime of its activation
    DEALLOC = "dealloc"  # ends it
    VIEW = "view"  # defines an alias; reads and writes nothing
    COPY = "copy"  # dest := src
    COMPUTE = "compute"  # runs the kernel of a node kind


@dataclass(frozen=True)
class OperandDecl:
    name: str
    dir: Dir
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class InstrKind:
    """One row of the instruction table."""

    name: str
    #: out operands first, then in operands (a variadic decl stands for one or more operands)
    operands: tuple[OperandDecl, ...]
    effect: Effect
    data_parallel: bool = False
    #: (out operand name, in operand names) pairs: that out may reuse one of those ins' buffers
    inplace: tuple[tuple[str, tuple[str, ...]], ...] = ()
    doc: str = ""

    @property
    def outs(self) -> tuple[OperandDecl, ...]:
        return tuple(o for o in self.operands if o.dir is not Dir.IN)

    @property
    def ins(self) -> tuple[OperandDecl, ...]:
        return tuple(o for o in self.operands if o.dir is Dir.IN)

    @property
    def is_special(self) -> bool:
        return self.effect is not Effect.COMPUTE

    def inplace_inputs(self, out_name: str) -> tuple[str, ...]:
        for out, ins in self.inplace:
            if out == out_name:
                return ins
        return ()


ALLOC, DEALLOC, TENSORVIEW, COPY = "alloc", "dealloc", "tensorview", "copy"

_SPECIAL: dict[str, InstrKind] = {
    ALLOC: InstrKind(ALLOC, (OperandDecl("Dest", Dir.OUT),), Effect.ALLOC,
                     doc="Start the lifetime of an activation (its arena bytes become reserved)."),
    DEALLOC: InstrKind(DEALLOC, (OperandDecl("Src", Dir.IN),), Effect.DEALLOC,
                       doc="End the lifetime of an activation (its bytes may be reused)."),
    TENSORVIEW: InstrKind(TENSORVIEW, (OperandDecl("Dest", Dir.OUT), OperandDecl("Src", Dir.IN)), Effect.VIEW,
                          doc="Dest is an alias of Src's bytes from `offset`, with Dest's own type. No code."),
    COPY: InstrKind(COPY, (OperandDecl("Dest", Dir.OUT), OperandDecl("Src", Dir.IN)), Effect.COPY,
                    data_parallel=True, doc="Dest := Src (same type)."),
}

#: Field overrides of derived compute entries, keyed by node kind.
COMPUTE_OVERRIDES: Mapping[str, Mapping[str, object]] = MappingProxyType({
    # per-channel affine map: element i of Result depends on element i of Input only
    "BatchNormalization": {"data_parallel": False, "inplace": (("Result", ("Input",)),)},
    # the result starts as a copy of Data, then some elements are overwritten
    "ScatterND": {"inplace": (("Result", ("Data",)),)},
    "ScatterElements": {"inplace": (("Result", ("Data",)),)},
})


def _derive(name: str) -> InstrKind:
    nk = get_kind(name)
    outs = tuple(OperandDecl(o, Dir.OUT, variadic=nk.variadic_outputs) for o in nk.outputs)
    ins = tuple(OperandDecl(o.name, Dir.IN, optional=o.optional, variadic=o.variadic) for o in nk.inputs)
    elementwise = nk.is_(Category.ELEMENTWISE) and len(outs) == 1
    fields: dict[str, object] = {
        "data_parallel": elementwise,
        "inplace": ((outs[0].name, tuple(o.name for o in ins)),) if elementwise else (),
        "doc": nk.doc,
    }
    fields.update(COMPUTE_OVERRIDES.get(name, {}))
    return InstrKind(name, outs + ins, Effect.COMPUTE, **fields)  # type: ignore[arg-type]


@functools.cache
def instr_kind(name: str) -> InstrKind:
    """The table row of an instruction kind (a special kind or a node kind's compute kind)."""
    if name in _SPECIAL:
        return _SPECIAL[name]
    try:
        return _derive(name)
    except GlowError:
        raise GlowError(f"unknown instruction kind {name!r}") from None


def special_kinds() -> Mapping[str, InstrKind]:
    return MappingProxyType(_SPECIAL)


# -- graph kinds that become views -------------------------------------------------------------
#: node -> byte offset of the result inside its operand, or None when the node is not a view
ViewRule = Callable[["Node"], "int | None"]


def _whole(node: Node) -> int | None:
    return 0


def _contiguous_slice(node: Node) -> int | None:
    """A Slice with unit steps whose elements are one contiguous run of its operand."""
    x = node.inputs[0]
    if x is None:
        return None
    shape, starts, sizes, steps = x.type.shape, node.attrs["starts"], node.attrs["sizes"], node.attrs["steps"]
    if len(starts) != len(shape) or any(s != 1 for s in steps) or any(n <= 0 for n in sizes):
        return None
    # leading axes cut to one index, then one partial axis, then whole trailing axes
    axis = 0
    while axis < len(shape) - 1 and sizes[axis] == 1:
        axis += 1
    rest = range(axis + 1, len(shape))
    if any(starts[a] != 0 or sizes[a] != shape[a] for a in rest):
        return None
    flat, stride = 0, 1
    for a in reversed(range(len(shape))):
        if not 0 <= starts[a] <= shape[a] - sizes[a]:
            return None
        flat += starts[a] * stride
        stride *= shape[a]
    return flat * x.type.elem.itemsize


VIEW_RULES: Mapping[str, ViewRule] = MappingProxyType({
    "Reshape": _whole,
    "BitCast": _whole,
    "Identity": _whole,
    "Dropout": _whole,
    "Slice": _contiguous_slice,
})


def view_offset(node: Node) -> int | None:
    """Byte offset if ``node`` becomes a tensorview of its first operand, else None."""
    rule = VIEW_RULES.get(node.kind.name)
    if rule is None or len(node.outputs) != 1 or node.inputs[0] is None:
        return None
    if node.outputs[0].type.nbytes > node.inputs[0].type.nbytes:
        return None
    return rule(node)
