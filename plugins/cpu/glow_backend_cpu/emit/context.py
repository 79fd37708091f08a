"""The contract between the CPU code generator and its kernel emitters.

The generated entry point runs SPMD: every worker thread calls it with its own
thread id, and each instruction's emitter partitions its work by ``ctx.tid`` /
``ctx.nthreads``; the driver puts a barrier between dependent instructions.

An emitter is ``fn(ctx: EmitContext, instr: Instr) -> None`` registered in
:data:`EMITTERS` (a KindTable keyed by node kind name). It emits LLVM IR at
``ctx.builder``'s position for one instruction. Shapes, strides and attributes
are compile-time constants: specialize on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from llvmlite import ir

from glow_core.ir.graph import Node
from glow_core.ir.kinds import KindTable
from glow_core.ir.types import ElemKind, TensorType


@dataclass(frozen=True)
class CpuTarget:
    """What the code generator knows of the host."""

    triple: str
    cpu_name: str
    features: str
    #: float32 lanes of the widest profitable vector (16 with AVX-512, 8 with AVX2, 4 otherwise)
    vector_lanes: int
    has_fma: bool
    cache_l1: int = 32 * 1024
    cache_l2: int = 1024 * 1024


@dataclass
class Operand:
    """One operand of an instruction as the emitter sees it."""

    #: pointer to the first element, typed as a pointer to the element type
    ptr: ir.Value
    type: TensorType
    #: known byte alignment of ``ptr`` (64 for buffers placed by the memory plan)
    align: int = 64
    #: the payload when the operand is a constant weight (for compile-time packing), else None
    const_value: np.ndarray | None = None
    #: in a function compiled for symbolic dims (``glow_backend_cpu/symbolic.py``): per axis, how many
    #: entries a run holds -- the size (an int) or an i64 computed from the run's symbols; None when every
    #: axis is fixed. The layout (strides) is always that of ``type.shape``; entries past ``valid`` are padding
    valid: tuple[int | ir.Value, ...] | None = None

    def extent(self, axis: int) -> int | ir.Value:
        """How many entries of ``axis`` a run holds (the size when the axis is fixed)."""
        return self.type.shape[axis] if self.valid is None else self.valid[axis]


@dataclass
class Instr:
    """A compute instruction: node kind, attributes, out operands, in operands."""

    kind: str
    attrs: Mapping[str, Any]
    outs: Sequence[Operand]
    ins: Sequence[Operand | None]
    name: str = ""


@dataclass
class EmitContext:
    module: ir.Module
    builder: ir.IRBuilder
    target: CpuTarget
    #: i64 values: this thread's id and the number of threads
    tid: ir.Value
    nthreads: ir.Value
    #: the entry function being built (emitters may append basic blocks to it)
    function: ir.Function
    #: add a compile-time array to the packed-constants region; returns a typed pointer to it
    add_constant: Callable[[np.ndarray, str], ir.Value] = field(repr=False, default=None)  # type: ignore[assignment]
    #: per-thread scratch memory of at least ``nbytes`` (64-byte aligned), as an i8*
    scratch: Callable[[int], ir.Value] = field(repr=False, default=None)  # type: ignore[assignment]
    #: the code an index check of this kernel stores in the error flag (``sync.set_error``): the step's number + 1
    error_code: int = 1
    #: set by an emitter that checks indices (``indexing.load_index``): the runtime maps the code to the node
    checks_indices: bool = False
    #: in a function compiled for symbolic dims: the run's symbol values (``symbolic.SymbolValues``: ``expr(e)``
    #: gives an i64 in the kernel's entry block), else None
    symbols: Any = None


Emitter = Callable[[EmitContext, Instr], None]

#: node kind -> emitter
EMITTERS = KindTable("cpu emitters")


# -- capability declarations (extension: what each emitter accepts) --------------------------------
#
# The backend's capability is the set of keys of EMITTERS. An emitter may narrow
# what it accepts with the two tables below (both keyed by node kind); a kind
# missing from EMITTER_ELEMS accepts float32 only, one missing from
# EMITTER_PREDICATES accepts every shape and attribute combination. Nodes an
# emitter does not accept are lowered (or reported unsupported at compile time).

#: node kind -> element kinds its emitter accepts (of every operand and result)
EMITTER_ELEMS: dict[str, frozenset[ElemKind]] = {}

NodePredicate = Callable[[Node], bool]

#: node kind -> (predicate on the graph node, what it requires in words)
EMITTER_PREDICATES: dict[str, tuple[NodePredicate, str]] = {}

#: node kinds whose emitter reads ``Operand.valid`` (``register_emitter(..., symbolic=True)``): they may
#: reduce over a symbolic axis; the others compute over the whole bound shape
SYMBOLIC_EMITTERS: set[str] = set()


def register_emitter(*kinds: str, elems: frozenset[ElemKind] | None = None, when: NodePredicate | None = None,
                     why: str = "", symbolic: bool = False) -> Callable[[Emitter], Emitter]:
    """Register ``fn`` as the emitter of ``kinds`` (each once), with the element kinds and predicate it accepts;
    ``symbolic=True``: it reads ``Operand.valid`` (see :data:`SYMBOLIC_EMITTERS`)."""

    def deco(fn: Emitter) -> Emitter:
        for k in kinds:
            EMITTERS.add(k, fn)
            if symbolic:
                SYMBOLIC_EMITTERS.add(k)
            if elems is not None:
                EMITTER_ELEMS[k] = frozenset(elems)
            if when is not None:
                EMITTER_PREDICATES[k] = (when, why)
        return fn

    return deco
