"""IR optimizations of the low-level IR, as named passes, and their pass manager.

A pass is ``fn(lir, ctx) -> bool`` (whether it changed anything), registered
once with :func:`lir_pass` (the style of :mod:`glow_core.passinfra`). The
:class:`LIRPassManager` runs a pipeline (names and :class:`Repeat` groups),
times each pass, verifies the LIR after each pass in debug mode and dumps it
before/after a named pass on request.

Passes here:

- ``dead-store-elim``: drop compute and copy instructions whose results nobody reads;
- ``dead-alloc-elim``: drop activations (alloc + dealloc) and views nobody uses;
- ``hoist-deallocs-sink-allocs``: each alloc right before the first use, each
  dealloc right after the last use (and each tensorview right before its first use);
- ``share-buffers``: an out operand reuses the buffer of a dying in operand where the
  instruction kind allows in-place computation and the sizes match;
- ``eliminate-copies``: a copy whose source dies is removed by making the
  destination and the source the same memory;
- ``concat-in-place``: a Concat whose operands die at it and each fill one contiguous range of its result
  is removed: each operand becomes a view of the result, so its producer writes the result directly;
- ``schedule`` (in :mod:`glow_core.lircompiler.schedule`): reorder independent instructions to
  lower the peak of live bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from glow_core.lir.instructions import ALLOC, COPY, DEALLOC, Dir, Effect, instr_kind
from glow_core.lir.ir import Activation, Instr, LIRFunction, LValue, Operand, View, Weight, tensorview
from glow_core.lir.verify import expand_decls
from glow_core.lircompiler.lifetimes import is_body, last_uses, relayout
from glow_core.passinfra import FixedPoint, PassContext, PassManager, PassRegistry, Step

#: the LIR passes: the graph optimizer's pass machinery over another IR
#: (this module registers its passes on import; the loader adds the scheduler's module)
LIR_PASSES = PassRegistry("LIR pass", ("glow_core.lircompiler.schedule",))
_PASSES = LIR_PASSES.passes
LIRPassContext = PassContext
LIRPassFn = Callable[[LIRFunction, PassContext], bool]
lir_pass = LIR_PASSES.register
get_lir_pass = LIR_PASSES.get
all_lir_passes = LIR_PASSES.all


def Repeat(*steps: Step, limit: int = 4) -> FixedPoint:
    """Run ``steps`` again until none of them changes anything (at most ``limit`` rounds)."""
    return FixedPoint(*steps, limit=limit)


DEFAULT_PIPELINE: tuple[Step, ...] = (
    "dead-store-elim",
    "dead-alloc-elim",
    "schedule",
    "concat-in-place",  # (before share-buffers: a Concat's result then has no reader writing in its place)
    Repeat("share-buffers", "eliminate-copies"),
    "hoist-deallocs-sink-allocs",
)


class LIRPassManager(PassManager):
    """The pass manager over the low-level IR (verifies the input too in debug mode)."""

    registry = LIR_PASSES

    def __init__(self, pipeline: Sequence[Step] = DEFAULT_PIPELINE) -> None:
        super().__init__(pipeline, name="lir")

    def run(self, lir: LIRFunction, ctx: PassContext | None = None) -> bool:  # type: ignore[override]
        ctx = ctx or PassContext()
        if ctx.debug:
            lir.verify()
        return super().run(lir, ctx)


# -- helpers ---------------------------------------------------------------------------------------
def first_uses(instrs: Sequence[Instr]) -> dict[int, int]:
    """id(root) -> index of the first instruction using it (alloc/dealloc excluded)."""
    first: dict[int, int] = {}
    for k, ins in enumerate(instrs):
        if ins.kind in (ALLOC, DEALLOC):
            continue
        for v in ins.values():
            first.setdefault(id(v.root), k)
    return first


def _views_by_base(lir: LIRFunction) -> dict[int, list[View]]:
    out: dict[int, list[View]] = {}
    for v in lir.views:
        out.setdefault(id(v.base), []).append(v)
    return out


# -- dead stores and dead allocations ------------------------------------------------------------------
@lir_pass("dead-store-elim")
def dead_store_elim(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """Remove compute and copy instructions that only write activations nobody reads afterwards."""
    read_later: set[int] = set()
    keep: list[Instr] = []
    changed = False
    for ins in reversed(lir.instrs):
        if is_body(ins):
            outs = [op for op in ins.outs if op.value is not None]
            dead = all(op.dir is Dir.OUT and isinstance(op.value.root, Activation)  # type: ignore[union-attr]
                       and id(op.value.root) not in read_later for op in outs)  # type: ignore[union-attr]
            if dead and outs:
                changed = True
                continue
            for op in ins.operands:
                if op.value is not None and op.dir.reads:
                    read_later.add(id(op.value.root))
        keep.append(ins)
    if changed:
        lir.instrs = keep[::-1]
    return changed


@lir_pass("dead-alloc-elim")
def dead_alloc_elim(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """Remove alloc/dealloc pairs of activations and tensorviews of views that no instruction uses."""
    used: set[int] = set()
    for ins in lir.instrs:
        if is_body(ins):
            for v in ins.values():
                while True:
                    used.add(id(v))
                    if not isinstance(v, View):
                        break
                    v = v.base
    keep = [ins for ins in lir.instrs if is_body(ins) or id(ins.operands[0].value) in used]
    if len(keep) == len(lir.instrs):
        return False
    lir.instrs = keep
    lir.prune_values()
    return True


@lir_pass("hoist-deallocs-sink-allocs")
def hoist_deallocs_sink_allocs(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """Move each dealloc right after the last use and each alloc (and tensorview) right before the first."""
    return relayout(lir)


# -- buffer sharing ----------------------------------------------------------------------------------
def _inplace_candidates(ins: Instr) -> list[tuple[int, list[int]]]:
    """(out operand position, in operand positions it may share a buffer with)."""
    spec = instr_kind(ins.kind)
    if not spec.inplace:
        return []
    decls = expand_decls(spec, ins.n_out, len(ins.operands) - ins.n_out)
    if decls is None:
        return []
    res = []
    for j in range(ins.n_out):
        names = spec.inplace_inputs(decls[j].name)
        if names:
            res.append((j, [p for p in range(ins.n_out, len(ins.operands)) if decls[p].name in names]))
    return res


@lir_pass("share-buffers")
def share_buffers(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """An out operand reuses a dying in operand's buffer where the kind allows in-place computation.

    Conditions: the out operand is a whole activation first written here; the
    in operand lies in an activation with no later reader (through any view);
    it has the out operand's shape and element width; the instruction reads that
    activation through no other region. The out activation disappears: its uses
    read the in operand (or a tensorview of it with the out operand's type).
    """
    instrs = lir.instrs
    last = last_uses(instrs)
    first = first_uses(instrs)
    by_base = _views_by_base(lir)
    subst: dict[int, LValue] = {}
    out: list[Instr] = []
    changed = False
    for k, ins in enumerate(instrs):
        for op in ins.operands:
            if op.value is not None and id(op.value) in subst:
                op.value = subst[id(op.value)]
        if ins.effect is Effect.COMPUTE:
            taken: set[int] = set()
            for j, cands in _inplace_candidates(ins):
                o = ins.operands[j].value
                if not isinstance(o, Activation) or first.get(id(o)) != k or ins.operands[j].dir is not Dir.OUT:
                    continue
                for p in cands:
                    x = ins.operands[p].value
                    if x is None or not _can_share(ins, o, x, k, last, taken):
                        continue
                    r = x.root
                    new: LValue = x
                    if x.type != o.type:
                        new = lir.new_view(o.name, o.type, x, 0)
                        out.append(tensorview(new))
                    subst[id(o)] = new
                    ins.operands[j].value = new
                    for v in by_base.pop(id(o), []):
                        v.base = new
                        by_base.setdefault(id(new), []).append(v)
                    last[id(r)] = last.get(id(o), k)
                    taken.add(id(r))
                    changed = True
                    break
        out.append(ins)
    if not changed:
        return False
    lir.instrs = out
    relayout(lir)
    return True


def _can_share(ins: Instr, o: Activation, x: LValue, k: int, last: dict[int, int], taken: set[int]) -> bool:
    r = x.root
    if not isinstance(r, Activation) or r is o or id(r) in taken or last.get(id(r)) != k:
        return False
    if x.type.shape != o.type.shape or x.type.elem.itemsize != o.type.elem.itemsize:
        return False
    # the instruction must not read or write the dying buffer through another region
    return all(v is x or v.root is not r for v in ins.values())


# -- copy elimination -------------------------------------------------------------------------------
@lir_pass("eliminate-copies")
def eliminate_copies(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """Remove copies whose source dies at the copy by making source and destination one buffer.

    - ``copy %d, %s`` where ``%d`` is a whole activation first written by the copy:
      later uses of ``%d`` use ``%s`` instead;
    - ``copy %out, %s`` where ``%out`` is an output weight not used before and ``%s``
      covers a whole activation ``%a``: ``%a`` becomes a view of ``%out``, so its
      producer writes the caller's memory directly;
    - a copy of a region onto itself.
    """
    return _one_at_a_time(lir, COPY, _eliminate_one)


OneRewrite = Callable[[LIRFunction, int, Instr, dict[int, int], dict[int, int]], bool]


def _one_at_a_time(lir: LIRFunction, kind: str, one: OneRewrite) -> bool:
    """Apply ``one(lir, k, ins, last_uses, first_uses)`` to the instructions of ``kind``, the lifetimes taken
    afresh after each rewrite, until none applies; whether any did."""
    changed = False
    while True:
        instrs = lir.instrs
        last, first = last_uses(instrs), first_uses(instrs)
        if not any(ins.kind == kind and one(lir, k, ins, last, first) for k, ins in enumerate(instrs)):
            return changed
        relayout(lir)
        changed = True


def _eliminate_one(lir: LIRFunction, k: int, ins: Instr, last: dict[int, int], first: dict[int, int]) -> bool:
    dst, src = ins.operands[0].value, ins.operands[1].value
    assert dst is not None and src is not None
    same_region = dst.root is src.root and dst.root_offset == src.root_offset and dst.type == src.type
    if same_region:
        lir.instrs = lir.instrs[:k] + lir.instrs[k + 1:]
        return True
    r = src.root
    if not isinstance(r, Activation) or last.get(id(r)) != k:
        return False
    if isinstance(dst, Activation) and first.get(id(dst)) == k:
        lir.instrs = lir.instrs[:k] + lir.instrs[k + 1:]
        lir.replace_value(dst, src, start=k)
        return True
    whole = src.root_offset == 0 and src.nbytes == r.nbytes
    if isinstance(dst, Weight) and dst.role == Weight.OUTPUT and first.get(id(dst)) == k and whole:
        alias = lir.new_view(r.name, r.type, dst, 0)
        lir.instrs = lir.instrs[:k] + lir.instrs[k + 1:]
        lir.replace_value(r, alias)  # (relayout then places its tensorview and drops r's alloc/dealloc)
        return True
    return False


# -- concat in place -------------------------------------------------------------------------------
@lir_pass("concat-in-place")
def concat_in_place(lir: LIRFunction, ctx: LIRPassContext) -> bool:
    """Remove Concats whose operands can be written where the Concat would copy them.

    ``Concat[axis] %c, %a0, %a1, ...`` when every dim before ``axis`` is 1 (so each operand is one
    contiguous byte range of ``%c``, in order), ``%c`` is a whole activation first written by the Concat,
    and each operand is a distinct whole activation of ``%c``'s element type, scale and offset that dies at
    the Concat: each ``%ai`` becomes a view of ``%c`` at its range (its producer and readers use it there;
    views of ``%ai`` become views of that view) and the Concat goes. Fire modules (SqueezeNet) and
    Inception blocks at batch 1 then write their branches straight into the concatenation, and a dense
    block (DenseNet: each Concat takes every feature so far) its every layer into the block's last Concat.

    A Concat whose operands are already views of one root, back to back (after the rule above: the earlier
    Concats of a dense block, whose operands are a prefix of the last one's), is that range of the root:
    its result becomes a view of it and the Concat goes, unless a later instruction writes the result (a
    reader computing in place, ``share-buffers``): each range of the root is one operand's, written once,
    so the view then holds the Concat's bytes for as long as it is read. Dims that are symbolic are left
    alone (the ranges move with the run's sizes).
    """
    return _one_at_a_time(lir, "Concat", _concat_one)


def _concat_one(lir: LIRFunction, k: int, ins: Instr, last: dict[int, int], first: dict[int, int]) -> bool:
    out = ins.operands[0].value
    parts = [op.value for op in ins.operands[1:]]
    if not isinstance(out, Activation) or first.get(id(out)) != k or out.type.sym is not None:
        return False
    axis = int(ins.attrs["axis"]) % max(out.type.rank, 1)
    if any(d != 1 for d in out.type.shape[:axis]):
        return False
    same = _codes(out)
    if _consecutive_views(parts, out.nbytes) and not _written_after(lir.instrs, k, out) \
            and all(_codes(v) == same for v in parts if v is not None):
        assert isinstance(parts[0], View)  # (already where it would copy them: a prefix of a later Concat)
        lir.instrs = lir.instrs[:k] + lir.instrs[k + 1:]
        lir.replace_value(out, lir.new_view(out.name, out.type, parts[0].root, parts[0].root_offset))
        return True
    placed: list[tuple[Activation, int]] = []
    offset = 0
    for v in parts:
        if not isinstance(v, Activation) or v.type.sym is not None or last.get(id(v)) != k \
                or _codes(v) != same or any(v is p for p, _ in placed):
            return False
        placed.append((v, offset))
        offset += v.nbytes
    if offset != out.nbytes:
        return False
    lir.instrs = lir.instrs[:k] + lir.instrs[k + 1:]
    for v, at in placed:
        lir.replace_value(v, lir.new_view(v.name, v.type, out, at))
    return True


def _codes(v: LValue) -> tuple[object, ...]:
    """What a byte of ``v`` means: its element type, scale and offset (a quantized Concat may rescale)."""
    return v.type.elem, v.type.scale, v.type.offset


def _written_after(instrs: Sequence[Instr], k: int, a: Activation) -> bool:
    """Whether an instruction after ``k`` writes ``a`` or a view of it (share-buffers lets a reader that
    outlives ``a`` write its result in ``a``'s place)."""
    return any(op.dir is not Dir.IN and op.value is not None and op.value.root is a
               for ins in instrs[k + 1:] if is_body(ins) for op in ins.operands)


def _consecutive_views(parts: Sequence[LValue | None], nbytes: int) -> bool:
    """Whether ``parts`` are views of one root, each starting where the one before ends, ``nbytes`` in all."""
    if not parts or not all(isinstance(v, View) for v in parts) or not isinstance(parts[0].root, Activation):  # type: ignore[union-attr]
        return False
    root, at = parts[0].root, parts[0].root_offset  # type: ignore[union-attr]
    for v in parts:
        assert v is not None
        if v.root is not root or v.root_offset != at:
            return False
        at += v.nbytes
    return at - parts[0].root_offset == nbytes  # type: ignore[union-attr]


__all__ = [
    "DEFAULT_PIPELINE",
    "LIR_PASSES",
    "LIRPassContext",
    "LIRPassManager",
    "Operand",
    "Repeat",
    "all_lir_passes",
    "get_lir_pass",
    "lir_pass",
]
