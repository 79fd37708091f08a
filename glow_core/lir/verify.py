"""``verify_lir``: the invariants of the low-level IR.

- operands match the instruction table (count, direction, omitted only where optional);
- every use of an activation lies inside its lifetime (after its alloc, before its
  dealloc), every use of a view after its tensorview and inside its root's lifetime;
- every activation is allocated once and deallocated once, and written before it is read;
- nothing writes a constant weight or an input weight (directly or through a view);
- views lie within their base; operand types match (compute: the kind's type rule; copy: equal);
- every output weight is written;
- with a memory plan: offsets are aligned and live activations never overlap.
"""

from __future__ import annotations

from glow_core.errors import GlowError, GlowVerifyError
from glow_core.ir.graph import infer_types
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import TensorType
from glow_core.lir.instructions import ALLOC, COPY, DEALLOC, TENSORVIEW, InstrKind, OperandDecl, instr_kind
from glow_core.lir.ir import Activation, Instr, LIRFunction, LValue, View, Weight

MAX_PROBLEMS = 25


def verify_lir(lir: LIRFunction) -> None:
    """Raise a GlowVerifyError listing every broken invariant (at most MAX_PROBLEMS)."""
    problems = _Checker(lir).run()
    if lir.plan is not None:
        from glow_core.lir.memory import check_plan

        problems += check_plan(lir, lir.plan)
    if problems:
        more = f"\n  ... and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise GlowVerifyError(f"low-level IR of function {lir.name} is invalid:\n  "
                              + "\n  ".join(problems[:MAX_PROBLEMS]) + more)


def expand_decls(spec: InstrKind, n_out: int, n_in: int) -> list[OperandDecl] | None:
    """The declaration of each operand position, or None when the counts cannot match."""
    outs, ins = list(spec.outs), list(spec.ins)
    res: list[OperandDecl] = []
    for decls, n in ((outs, n_out), (ins, n_in)):
        fixed = [d for d in decls if not d.variadic]
        variadic = [d for d in decls if d.variadic]
        required = sum(1 for d in fixed if not d.optional)
        if variadic:
            if n < len(fixed) + 1:
                return None
            res += fixed + variadic * (n - len(fixed))
        else:
            if not required <= n <= len(fixed):
                return None
            res += fixed[:n]
    return res


class _Checker:
    def __init__(self, lir: LIRFunction) -> None:
        self.lir = lir
        self.problems: list[str] = []
        self.weights = {id(w) for w in lir.weights}
        self.alive: set[int] = set()  # allocated activations
        self.dead: set[int] = set()  # deallocated activations
        self.views: set[int] = set()  # defined views
        self.written: set[int] = set()  # roots written so far

    def err(self, ins: Instr | None, msg: str, index: int = -1) -> None:
        where = f"[{index}] {ins.where()}: " if ins is not None else ""
        self.problems.append(where + msg)

    def run(self) -> list[str]:
        lir = self.lir
        names: dict[str, str] = {}
        for what, vals in (("weight", lir.weights), ("activation", lir.activations), ("view", lir.views)):
            for v in vals:
                if v.name in names:
                    self.err(None, f"name %{v.name} is used by a {names[v.name]} and a {what}")
                names[v.name] = what
        for k, ins in enumerate(lir.instrs):
            self.check(k, ins)
        known = {id(a) for a in lir.activations}
        for a in lir.activations:
            if id(a) in self.alive:
                self.err(None, f"activation %{a.name} is never deallocated")
            elif id(a) not in self.dead:
                self.err(None, f"activation %{a.name} is listed but never allocated")
        for aid in (self.alive | self.dead) - known:
            self.err(None, "an allocated activation is missing from the function's activation list")
        for w in lir.outputs:
            if id(w) not in self.written:
                self.err(None, f"output weight %{w.name} is never written")
        return self.problems

    # -- one instruction ------------------------------------------------------------------------
    def check(self, k: int, ins: Instr) -> None:
        try:
            spec = instr_kind(ins.kind)
        except GlowError as e:
            self.err(ins, str(e), k)
            return
        decls = expand_decls(spec, ins.n_out, len(ins.operands) - ins.n_out)
        if decls is None:
            self.err(ins, f"{ins.n_out} out and {len(ins.operands) - ins.n_out} in operands do not match "
                     f"the table ({', '.join(d.name + ':' + d.dir.value for d in spec.operands)})", k)
            return
        for pos, (op, decl) in enumerate(zip(ins.operands, decls)):
            if op.dir is not decl.dir:
                self.err(ins, f"operand {pos} ({decl.name}) is @{op.dir.value}, the table says @{decl.dir.value}", k)
            if op.value is None and not decl.optional:
                self.err(ins, f"operand {pos} ({decl.name}) is required", k)
        if ins.kind == ALLOC:
            self.check_alloc(k, ins)
        elif ins.kind == DEALLOC:
            self.check_dealloc(k, ins)
        elif ins.kind == TENSORVIEW:
            self.check_view(k, ins)
        else:
            reads = [op.value for op in ins.operands if op.value is not None and op.dir.reads]
            for pos, op in enumerate(ins.operands):
                if op.value is not None:
                    self.check_use(k, ins, op.value, pos)
            for v in reads:
                r = v.root
                if isinstance(r, Activation) and id(r) not in self.written:
                    self.err(ins, f"reads %{v.name} before anything writes activation %{r.name}", k)
            for op in ins.operands:
                if op.value is not None and op.dir.writes:
                    self.check_write(k, ins, op.value)
            self.check_types(k, ins)

    def check_alloc(self, k: int, ins: Instr) -> None:
        a = ins.operands[0].value
        if not isinstance(a, Activation):
            self.err(ins, f"alloc of %{getattr(a, 'name', '?')}, which is not an activation", k)
        elif id(a) in self.alive or id(a) in self.dead:
            self.err(ins, f"activation %{a.name} is allocated twice", k)
        else:
            self.alive.add(id(a))

    def check_dealloc(self, k: int, ins: Instr) -> None:
        a = ins.operands[0].value
        if not isinstance(a, Activation):
            self.err(ins, f"dealloc of %{getattr(a, 'name', '?')}, which is not an activation", k)
        elif id(a) in self.dead:
            self.err(ins, f"activation %{a.name} is deallocated twice", k)
        elif id(a) not in self.alive:
            self.err(ins, f"activation %{a.name} is deallocated before it is allocated", k)
        else:
            self.alive.discard(id(a))
            self.dead.add(id(a))

    def check_view(self, k: int, ins: Instr) -> None:
        v, base = ins.operands[0].value, ins.operands[1].value
        if not isinstance(v, View) or base is None:
            self.err(ins, "tensorview must define a view from a base", k)
            return
        if v.base is not base:
            self.err(ins, f"view %{v.name} is based on %{v.base.name}, the instruction names %{base.name}", k)
        if int(ins.attrs.get("offset", -1)) != v.offset:
            self.err(ins, f"offset attribute {ins.attrs.get('offset')} differs from the view's {v.offset}", k)
        if id(v) in self.views:
            self.err(ins, f"view %{v.name} is defined twice", k)
        self.check_use(k, ins, base, 1)
        if v.offset < 0 or v.offset + v.nbytes > base.nbytes:
            self.err(ins, f"view %{v.name} ({v.nbytes} bytes at offset {v.offset}) "
                     f"exceeds its base %{base.name} ({base.nbytes} bytes)", k)
        self.views.add(id(v))

    def check_use(self, k: int, ins: Instr, v: LValue, pos: int) -> None:
        if isinstance(v, View):
            if id(v) not in self.views:
                self.err(ins, f"operand {pos} uses view %{v.name} before its tensorview", k)
            v = v.root
        if isinstance(v, Weight):
            if id(v) not in self.weights:
                self.err(ins, f"operand {pos}: weight %{v.name} is not a weight of this function", k)
        elif isinstance(v, Activation):
            if id(v) in self.dead:
                self.err(ins, f"operand {pos} uses activation %{v.name} after its dealloc", k)
            elif id(v) not in self.alive:
                self.err(ins, f"operand {pos} uses activation %{v.name} before its alloc", k)
        else:
            self.err(ins, f"operand {pos}: %{v.name} is not a weight, activation or view", k)

    def check_write(self, k: int, ins: Instr, v: LValue) -> None:
        r = v.root
        if isinstance(r, Weight) and r.role == Weight.CONSTANT:
            self.err(ins, f"writes constant weight %{r.name}" + (f" through view %{v.name}" if v is not r else ""), k)
        elif isinstance(r, Weight) and r.role == Weight.INPUT:
            self.err(ins, f"writes input weight %{r.name}" + (f" through view %{v.name}" if v is not r else ""), k)
        self.written.add(id(r))

    def check_types(self, k: int, ins: Instr) -> None:
        outs = [op.value.type if op.value is not None else None for op in ins.outs]
        ins_t: list[TensorType | None] = [op.value.type if op.value is not None else None for op in ins.ins]
        if ins.kind == COPY:
            if outs[0] != ins_t[0]:
                self.err(ins, f"copy from {ins_t[0]} to {outs[0]}: types differ", k)
            return
        try:
            expected = infer_types(get_kind(ins.kind), ins_t, ins.attrs, ins.where())
        except GlowError as e:
            self.err(ins, f"type rule fails: {e}", k)
            return
        if list(expected) != outs:
            self.err(ins, "out operand types " + ", ".join(map(str, outs))
                     + " differ from the type rule's " + ", ".join(map(str, expected)), k)
