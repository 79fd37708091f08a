"""Data structures of the low-level IR (LIR).

The LIR is address-only: it has no SSA values and no control flow, only
*memory regions* and a flat list of *instructions* reading and writing them.

Memory regions (:class:`LValue`):

- :class:`Weight`: memory outside the arena. ``constant`` weights are the
  function's constants (read-only); the *mutable weights* are the function's
  ``input`` and ``output`` tensors, i.e. caller memory.
- :class:`Activation`: arena memory, created by an ``alloc`` instruction and
  released by a ``dealloc`` instruction; the memory plan gives it an offset.
- :class:`View`: an alias of another region (its *base*) with its own type at
  a byte offset, defined by a ``tensorview`` instruction. Its *root* is the
  weight or activation it finally refers to.

An :class:`Instr` has a kind (a row of :mod:`glow_core.lir.instructions`),
operands (value + direction; out operands first) and attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glow_core.errors import GlowError
from glow_core.ir.types import TensorType
from glow_core.lir.instructions import ALLOC, DEALLOC, TENSORVIEW, Dir, Effect, InstrKind, instr_kind

if TYPE_CHECKING:
    from glow_core.lir.memory import MemoryPlan

#: every activation starts at a multiple of this many bytes
ALIGNMENT = 64


def align(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


class LValue:
    """A typed memory region that instructions read and write."""

    __slots__ = ("__weakref__", "name", "type")

    def __init__(self, name: str, type: TensorType) -> None:
        self.name = name
        self.type = type

    @property
    def nbytes(self) -> int:
        return self.type.nbytes

    @property
    def root(self) -> LValue:
        """The weight or activation this region is part of (itself unless a view)."""
        return self

    @property
    def root_offset(self) -> int:
        """Byte offset of this region inside :attr:`root`."""
        return 0

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Weight(LValue):
    """Memory outside the arena: a constant, or a function input or output (caller memory)."""

    CONSTANT, INPUT, OUTPUT = "constant", "input", "output"
    __slots__ = ("io_name", "payload", "role")

    def __init__(self, name: str, type: TensorType, role: str,
                 payload: np.ndarray | None = None, io_name: str | None = None) -> None:
        super().__init__(name, type)
        if role not in (Weight.CONSTANT, Weight.INPUT, Weight.OUTPUT):
            raise GlowError(f"weight {name}: unknown role {role!r}")
        self.role = role
        self.payload = payload
        #: the input or output name the caller uses (may differ from ``name``)
        self.io_name = io_name if io_name is not None else name

    @property
    def mutable(self) -> bool:
        return self.role != Weight.CONSTANT


class Activation(LValue):
    """Arena memory with a lifetime from its ``alloc`` to its ``dealloc``."""

    __slots__ = ()


class View(LValue):
    """An alias of ``base``'s bytes from ``offset``, with its own type."""

    __slots__ = ("base", "offset")

    def __init__(self, name: str, type: TensorType, base: LValue, offset: int = 0) -> None:
        super().__init__(name, type)
        self.base = base
        self.offset = int(offset)

    @property
    def root(self) -> LValue:
        v: LValue = self
        while isinstance(v, View):
            v = v.base
        return v

    @property
    def root_offset(self) -> int:
        off: int = 0
        v: LValue = self
        while isinstance(v, View):
            off += v.offset
            v = v.base
        return off


@dataclass(eq=False)
class Operand:
    value: LValue | None  # None: an omitted optional operand of a compute instruction
    dir: Dir


class Instr:
    """One instruction: ``kind`` names its row in the instruction table."""

    __slots__ = ("attrs", "kind", "n_out", "name", "operands", "origin")

    def __init__(self, kind: str, operands: Sequence[Operand], attrs: Mapping[str, Any] | None = None,
                 *, n_out: int = 1, name: str = "", origin: str = "") -> None:
        self.kind = kind
        self.operands = list(operands)
        self.attrs: Mapping[str, Any] = attrs or {}
        #: the first ``n_out`` operands are the out (or inout) operands
        self.n_out = n_out
        self.name = name or kind
        #: the graph node it came from, for messages
        self.origin = origin

    @property
    def spec(self) -> InstrKind:
        return instr_kind(self.kind)

    @property
    def effect(self) -> Effect:
        return instr_kind(self.kind).effect

    @property
    def outs(self) -> list[Operand]:
        return self.operands[: self.n_out]

    @property
    def ins(self) -> list[Operand]:
        return self.operands[self.n_out:]

    def values(self) -> Iterator[LValue]:
        """Every operand value (omitted optionals skipped)."""
        for op in self.operands:
            if op.value is not None:
                yield op.value

    def where(self) -> str:
        origin = f" (from graph node '{self.origin}')" if self.origin and self.origin != self.name else ""
        return f"{self.kind} '{self.name}'{origin}"

    def __repr__(self) -> str:
        ops = ", ".join(f"@{o.dir.value} %{o.value.name}" if o.value is not None else "-" for o in self.operands)
        return f"<{self.kind} {ops}>"


def alloc(act: Activation) -> Instr:
    return Instr(ALLOC, [Operand(act, Dir.OUT)], name=f"alloc.{act.name}")


def dealloc(act: Activation) -> Instr:
    return Instr(DEALLOC, [Operand(act, Dir.IN)], n_out=0, name=f"dealloc.{act.name}")


def tensorview(view: View) -> Instr:
    return Instr(TENSORVIEW, [Operand(view, Dir.OUT), Operand(view.base, Dir.IN)],
                 {"offset": view.offset}, name=view.name)


@dataclass
class LIRFunction:
    """A function of the low-level IR."""

    name: str
    weights: list[Weight] = field(default_factory=list)
    activations: list[Activation] = field(default_factory=list)
    views: list[View] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)
    #: set by the memory planner
    plan: MemoryPlan | None = None
    _names: set[str] = field(default_factory=set, repr=False)

    # -- construction --------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """``base``, or ``base_N`` with the smallest free N: amortized O(1) (a per-base counter)."""
        base = base or "v"
        # base -> the next suffix to try (names are never released, so the ones below are taken); an
        # instance attribute, not a dataclass field: the class's fields are part of the recorded SDK surface
        next_suffix: dict[str, int] = self.__dict__.setdefault("_next_suffix", {})
        name, i = base, next_suffix.get(base, 1)
        while name in self._names:
            name = f"{base}_{i}"
            i += 1
        self._names.add(name)
        if name != base:
            next_suffix[base] = i
        return name

    def add_weight(self, name: str, type: TensorType, role: str, payload: np.ndarray | None = None) -> Weight:
        w = Weight(self.unique_name(name), type, role, payload, io_name=name)
        self.weights.append(w)
        return w

    def new_activation(self, name: str, type: TensorType) -> Activation:
        a = Activation(self.unique_name(name), type)
        self.activations.append(a)
        return a

    def new_view(self, name: str, type: TensorType, base: LValue, offset: int = 0) -> View:
        v = View(self.unique_name(name), type, base, offset)
        self.views.append(v)
        return v

    # -- queries -------------------------------------------------------------------------------
    @property
    def inputs(self) -> list[Weight]:
        return [w for w in self.weights if w.role == Weight.INPUT]

    @property
    def outputs(self) -> list[Weight]:
        return [w for w in self.weights if w.role == Weight.OUTPUT]

    @property
    def constants(self) -> list[Weight]:
        return [w for w in self.weights if w.role == Weight.CONSTANT]

    def count_by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for i in self.instrs:
            counts[i.kind] = counts.get(i.kind, 0) + 1
        return dict(sorted(counts.items()))

    def replace_value(self, old: LValue, new: LValue, start: int = 0) -> int:
        """Make every operand from instruction ``start`` on, and every view based on ``old``, use ``new``."""
        count = 0
        for ins in self.instrs[start:]:
            for op in ins.operands:
                if op.value is old:
                    op.value = new
                    count += 1
        for v in self.views:
            if v.base is old and v is not new:
                v.base = new
        return count

    def prune_values(self) -> None:
        """Forget activations and views that no instruction mentions any more."""
        used = {id(v) for ins in self.instrs for v in ins.values()}
        self.activations = [a for a in self.activations if id(a) in used]
        self.views = [v for v in self.views if id(v) in used]

    def verify(self) -> None:
        from glow_core.lir.verify import verify_lir

        verify_lir(self)

    def dump(self) -> str:
        from glow_core.lir.printer import format_lir

        return format_lir(self)

    def __repr__(self) -> str:
        return f"<LIRFunction {self.name}: {len(self.instrs)} instructions>"


def is_lifetime(ins: Instr) -> bool:
    """alloc or dealloc."""
    return ins.kind in (ALLOC, DEALLOC)
