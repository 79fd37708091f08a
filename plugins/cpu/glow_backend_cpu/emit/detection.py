"""Data-dependent kinds: NonMaxSuppression and Unique (``glow_core.ir.defs.detection``).

Thread 0 runs the greedy selection per batch and class: repeatedly take the
best unprocessed candidate (highest score; the lowest box index on ties, as a
scan in index order with a strict ``>`` gives), keep it unless its IoU with a
kept box exceeds the threshold, until max_per_class boxes are kept or no
candidate is left. The IoU is computed in the boxes' compute kind with the
reference's operation order (``kernels/detection.py``), so a box exactly at the
threshold is decided the same way. Rows past the count are -1.

Unique (thread 0): an insertion sort of the slice indices (lexicographic over
each slice's elements; NaN sorts last and equals NaN, as numpy.unique; stable,
so a group's first member is its first occurrence), then one pass grouping
equal neighbours; unsorted output ranks the groups by first occurrence. As in
numpy.unique (the interpreter's kernel), the NaNs of a flattened input are one
value, but along an axis a slice holding a NaN equals no other slice (numpy
compares the slices with ``!=``).
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import UNSIGNED, compute_type, is_float, to_compute
from glow_backend_cpu.helpers import I8, I64, elem_ptr, for_range, i64
from glow_core.ir.graph import Node
from glow_core.ir.types import FLOAT_KINDS, NUMERIC_KINDS, ElemKind


class _Nms:
    """The emitter's state: operands, static sizes and stack slots."""

    def __init__(self, ctx: EmitContext, instr: Instr) -> None:
        self.ctx, self.b = ctx, ctx.builder
        boxes, scores, iou, score = (list(instr.ins) + [None, None])[:4]
        assert boxes is not None and scores is not None
        self.boxes, self.scores, self.iou_op, self.score_op = boxes, scores, iou, score
        self.sel, self.count = instr.outs
        self.elem: ElemKind = boxes.type.elem
        self.ct = compute_type(self.elem)
        self.nb, self.nc, self.n = scores.type.shape
        self.k = int(instr.attrs["max_per_class"])
        self.center = int(instr.attrs["center_point_box"])
        b = self.b
        self.done = b.bitcast(ctx.scratch(max(self.n, 1)), I8.as_pointer())
        self.kept = b.bitcast(ctx.scratch(8 * max(self.k, 1)), I64.as_pointer())
        with b.goto_entry_block():
            self.rows_p, self.kc_p, self.best_p, self.sup_p = (b.alloca(I64) for _ in range(4))

    def load(self, op: Operand, index: ir.Value) -> ir.Value:
        return to_compute(self.b, self.b.load(elem_ptr(self.b, op.ptr, index)), self.elem)

    def corners(self, batch: ir.Value, box: ir.Value) -> list[ir.Value]:
        """(y_min, x_min, y_max, x_max) of one box."""
        b = self.b
        base = b.mul(b.add(b.mul(batch, i64(self.n)), box), i64(4))
        v = [self.load(self.boxes, b.add(base, i64(j))) for j in range(4)]
        if self.center:
            hw, hh = b.fdiv(v[2], ir.Constant(self.ct, 2.0)), b.fdiv(v[3], ir.Constant(self.ct, 2.0))
            return [b.fsub(v[1], hh), b.fsub(v[0], hw), b.fadd(v[1], hh), b.fadd(v[0], hw)]
        lo = [b.select(b.fcmp_ordered("<=", v[j], v[j + 2]), v[j], v[j + 2]) for j in (0, 1)]
        hi = [b.select(b.fcmp_ordered("<=", v[j], v[j + 2]), v[j + 2], v[j]) for j in (0, 1)]
        return [lo[0], lo[1], hi[0], hi[1]]

    def suppresses(self, cand: list[ir.Value], kept: list[ir.Value], thr: ir.Value) -> ir.Value:
        """IoU(candidate, kept box) > thr (false for no overlap or degenerate boxes), as an i1."""
        b = self.b

        def fmax(x: ir.Value, y: ir.Value) -> ir.Value:
            return b.select(b.fcmp_ordered(">=", x, y), x, y)

        def fmin(x: ir.Value, y: ir.Value) -> ir.Value:
            return b.select(b.fcmp_ordered("<=", x, y), x, y)

        zero = ir.Constant(self.ct, 0.0)
        ix_min, ix_max = fmax(cand[1], kept[1]), fmin(cand[3], kept[3])
        iy_min, iy_max = fmax(cand[0], kept[0]), fmin(cand[2], kept[2])
        overlap = b.and_(b.fcmp_ordered(">", ix_max, ix_min), b.fcmp_ordered(">", iy_max, iy_min))
        inter = b.fmul(b.fsub(ix_max, ix_min), b.fsub(iy_max, iy_min))
        area1 = b.fmul(b.fsub(cand[3], cand[1]), b.fsub(cand[2], cand[0]))
        area2 = b.fmul(b.fsub(kept[3], kept[1]), b.fsub(kept[2], kept[0]))
        union = b.fsub(b.fadd(area1, area2), inter)
        ok = b.and_(overlap, b.fcmp_ordered(">", inter, zero))
        ok = b.and_(ok, b.and_(b.fcmp_ordered(">", area1, zero), b.fcmp_ordered(">", area2, zero)))
        ok = b.and_(ok, b.fcmp_ordered(">", union, zero))
        safe = b.select(ok, union, ir.Constant(self.ct, 1.0))
        return b.and_(ok, b.fcmp_ordered(">", b.fdiv(inter, safe), thr))

    def pick_best(self, batch: ir.Value, cls: ir.Value, score_thr: ir.Value | None) -> None:
        """best_p <- the best unprocessed candidate of (batch, cls), or -1."""
        b = self.b
        b.store(i64(-1), self.best_p)
        sbase = b.mul(b.add(b.mul(batch, i64(self.nc)), cls), i64(self.n))
        with for_range(b, 0, self.n, name="cand") as i:
            s = self.load(self.scores, b.add(sbase, i))
            alive = b.icmp_unsigned("==", b.load(elem_ptr(b, self.done, i)), ir.Constant(I8, 0))
            if score_thr is not None:
                alive = b.and_(alive, b.fcmp_ordered(">", s, score_thr))
            best = b.load(self.best_p)
            none = b.icmp_signed("<", best, i64(0))
            bs = self.load(self.scores, b.add(sbase, b.select(none, i64(0), best)))
            better = b.or_(none, b.fcmp_ordered(">", s, bs))
            with b.if_then(b.and_(alive, better)):
                b.store(i, self.best_p)

    def one_class(self, batch: ir.Value, cls: ir.Value, iou_thr: ir.Value, score_thr: ir.Value | None) -> None:
        b = self.b
        with for_range(b, 0, self.n, name="z") as i:
            b.store(ir.Constant(I8, 0), elem_ptr(b, self.done, i))
        b.store(i64(0), self.kc_p)
        with for_range(b, 0, self.n, name="round") as _:
            kc = b.load(self.kc_p)
            with b.if_then(b.icmp_signed("<", kc, i64(self.k))):
                self.pick_best(batch, cls, score_thr)
                best = b.load(self.best_p)
                with b.if_then(b.icmp_signed(">=", best, i64(0))):
                    b.store(ir.Constant(I8, 1), elem_ptr(b, self.done, best))
                    cand = self.corners(batch, best)
                    b.store(i64(0), self.sup_p)
                    with for_range(b, 0, b.load(self.kc_p), name="kept") as j:
                        other = self.corners(batch, b.load(elem_ptr(b, self.kept, j)))
                        with b.if_then(self.suppresses(cand, other, iou_thr)):
                            b.store(i64(1), self.sup_p)
                    with b.if_then(b.icmp_signed("==", b.load(self.sup_p), i64(0))):
                        kc2 = b.load(self.kc_p)
                        b.store(best, elem_ptr(b, self.kept, kc2))
                        b.store(b.add(kc2, i64(1)), self.kc_p)
                        row = b.load(self.rows_p)
                        for j, v in enumerate((batch, cls, best)):
                            b.store(v, elem_ptr(b, self.sel.ptr, b.add(b.mul(row, i64(3)), i64(j))))
                        b.store(b.add(row, i64(1)), self.rows_p)

    def emit(self) -> None:
        b = self.b
        total = self.sel.type.shape[0]
        with b.if_then(b.icmp_signed("==", self.ctx.tid, i64(0))):
            b.store(i64(0), self.rows_p)
            iou_thr = self.load(self.iou_op, i64(0)) if self.iou_op is not None else ir.Constant(self.ct, 0.0)
            score_thr = self.load(self.score_op, i64(0)) if self.score_op is not None else None
            if self.k > 0:
                with for_range(b, 0, self.nb, name="batch") as batch:
                    with for_range(b, 0, self.nc, name="cls") as cls:
                        self.one_class(batch, cls, iou_thr, score_thr)
            rows = b.load(self.rows_p)
            with for_range(b, b.mul(rows, i64(3)), i64(3 * total), name="pad") as p:
                b.store(i64(-1), elem_ptr(b, self.sel.ptr, p))
            b.store(rows, self.count.ptr)


#: most elementary steps (quadratic in the boxes / slices) a native kernel may take; larger problems are left to
#: the lowering or refused, never a kernel that runs for minutes
MAX_STEPS = 1 << 30


def _nms_ok(node: Node) -> bool:
    b, c, n = node.inputs[1].type.shape  # type: ignore[union-attr]
    return b * c * n * n <= MAX_STEPS


def _unique_ok(node: Node) -> bool:
    x = node.inputs[0]
    n = node.outputs[1].type.shape[0]
    return n * n * max(x.type.size // max(n, 1), 1) <= MAX_STEPS  # type: ignore[union-attr]


@register_emitter("NonMaxSuppression", elems=FLOAT_KINDS | {ElemKind.INT64}, when=_nms_ok,
                  why=f"batches x classes x boxes^2 <= {MAX_STEPS}")
def _nms(ctx: EmitContext, instr: Instr) -> None:
    _Nms(ctx, instr).emit()


class _Unique:
    def __init__(self, ctx: EmitContext, instr: Instr) -> None:
        self.ctx, self.b = ctx, ctx.builder
        x = instr.ins[0]
        assert x is not None
        self.x = x
        self.values, self.first, self.inverse, self.counts, self.count = instr.outs
        self.elem = x.type.elem
        axis = int(instr.attrs["axis"])
        shape = x.type.shape
        if axis == -1:
            self.outer, self.n, self.inner = 1, x.type.size, 1
        else:
            self.outer = 1
            for d in shape[:axis]:
                self.outer *= d
            self.n, self.inner = shape[axis], 1
            for d in shape[axis + 1:]:
                self.inner *= d
        self.sorted = bool(int(instr.attrs["sorted"]))
        #: along an axis, a float slice holding a NaN is a group of its own
        self.nan_alone = axis != -1 and is_float(self.elem)
        b = self.b
        n = max(self.n, 1)
        self.order, self.gfirst, self.gcount, self.rank = (
            b.bitcast(ctx.scratch(8 * n), I64.as_pointer()) for _ in range(4))
        with b.goto_entry_block():
            self.cmp_p, self.groups_p, self.pos_p = (b.alloca(I64) for _ in range(3))

    def at(self, slice_i: ir.Value, e: ir.Value) -> ir.Value:
        """Element ``e`` (in (outer, inner) order) of slice ``slice_i``, as an element offset."""
        b = self.b
        o, i = b.udiv(e, i64(self.inner)), b.urem(e, i64(self.inner))
        return b.add(b.add(b.mul(o, i64(self.n * self.inner)), b.mul(slice_i, i64(self.inner))), i)

    def less(self, u: ir.Value, v: ir.Value) -> ir.Value:
        b = self.b
        if is_float(self.elem):
            un, vn = b.fcmp_unordered("uno", u, u), b.fcmp_unordered("uno", v, v)
            return b.or_(b.and_(b.not_(un), vn), b.fcmp_ordered("<", u, v))
        if self.elem in UNSIGNED or self.elem is ElemKind.BOOL:
            return b.icmp_unsigned("<", u, v)
        return b.icmp_signed("<", u, v)

    def compare(self, s1: ir.Value, s2: ir.Value) -> ir.Value:
        """-1, 0 or 1: slice s1 against slice s2, lexicographically."""
        b = self.b
        b.store(i64(0), self.cmp_p)
        with for_range(b, 0, self.outer * self.inner, name="lex") as e:
            with b.if_then(b.icmp_signed("==", b.load(self.cmp_p), i64(0))):
                u = self.load(self.at(s1, e))
                v = self.load(self.at(s2, e))
                b.store(b.select(self.less(u, v), i64(-1), b.select(self.less(v, u), i64(1), i64(0))), self.cmp_p)
        return b.load(self.cmp_p)

    def has_nan(self, s1: ir.Value) -> ir.Value:
        """Does slice s1 hold a NaN?"""
        b = self.b
        b.store(i64(0), self.cmp_p)
        with for_range(b, 0, self.outer * self.inner, name="nan") as e:
            u = self.load(self.at(s1, e))
            with b.if_then(b.fcmp_unordered("uno", u, u)):
                b.store(i64(1), self.cmp_p)
        return b.icmp_signed("!=", b.load(self.cmp_p), i64(0))

    def load(self, off: ir.Value) -> ir.Value:
        return to_compute(self.b, self.b.load(elem_ptr(self.b, self.x.ptr, off)), self.elem)

    def sort(self) -> None:
        """Stable insertion sort of the slice indices."""
        b = self.b
        with for_range(b, 0, self.n, name="init") as i:
            b.store(i, elem_ptr(b, self.order, i))
        with for_range(b, 1, self.n, name="ins") as i:
            cur = b.load(elem_ptr(b, self.order, i))
            b.store(i, self.pos_p)
            shift = b.append_basic_block("u.shift")
            move = b.append_basic_block("u.move")
            place = b.append_basic_block("u.place")
            b.branch(shift)
            b.position_at_end(shift)
            p = b.load(self.pos_p)
            has_prev = b.icmp_signed(">", p, i64(0))
            prev_i = b.select(has_prev, b.sub(p, i64(1)), i64(0))
            prev = b.load(elem_ptr(b, self.order, prev_i))
            go = b.and_(has_prev, b.icmp_signed(">", self.compare(prev, cur), i64(0)))
            b.cbranch(go, move, place)
            b.position_at_end(move)
            b.store(prev, elem_ptr(b, self.order, p))
            b.store(prev_i, self.pos_p)
            b.branch(shift)
            b.position_at_end(place)
            b.store(cur, elem_ptr(b, self.order, b.load(self.pos_p)))

    def group(self) -> None:
        b = self.b
        b.store(i64(0), self.groups_p)
        with for_range(b, 0, self.n, name="grp") as k:
            cur = b.load(elem_ptr(b, self.order, k))
            is_new = b.icmp_signed("==", k, i64(0))
            prev = b.load(elem_ptr(b, self.order, b.select(is_new, i64(0), b.sub(k, i64(1)))))
            is_new = b.or_(is_new, b.icmp_signed("!=", self.compare(prev, cur), i64(0)))
            if self.nan_alone:
                is_new = b.or_(is_new, self.has_nan(cur))
            with b.if_then(is_new):
                g = b.load(self.groups_p)
                b.store(cur, elem_ptr(b, self.gfirst, g))
                b.store(i64(0), elem_ptr(b, self.gcount, g))
                b.store(b.add(g, i64(1)), self.groups_p)
            g = b.sub(b.load(self.groups_p), i64(1))
            cnt = elem_ptr(b, self.gcount, g)
            b.store(b.add(b.load(cnt), i64(1)), cnt)
            b.store(g, elem_ptr(b, self.inverse.ptr, cur))

    def ranks(self) -> None:
        """rank[g]: the output position of group g (its own index, or its first-occurrence rank)."""
        b = self.b
        groups = b.load(self.groups_p)
        with for_range(b, 0, groups, name="rk") as g:
            if self.sorted:
                b.store(g, elem_ptr(b, self.rank, g))
            else:
                self._rank_of(g, groups)

    def _rank_of(self, g: ir.Value, groups: ir.Value) -> None:
        """rank[g] = the number of groups whose first occurrence comes before g's."""
        b = self.b
        b.store(i64(0), self.pos_p)
        fg = b.load(elem_ptr(b, self.gfirst, g))
        with for_range(b, 0, groups, name="rk2") as h:
            with b.if_then(b.icmp_signed("<", b.load(elem_ptr(b, self.gfirst, h)), fg)):
                b.store(b.add(b.load(self.pos_p), i64(1)), self.pos_p)
        b.store(b.load(self.pos_p), elem_ptr(b, self.rank, g))

    def write(self) -> None:
        b = self.b
        groups = b.load(self.groups_p)
        with for_range(b, 0, self.n, name="pad") as p:
            b.store(i64(-1), elem_ptr(b, self.first.ptr, p))
            b.store(i64(0), elem_ptr(b, self.counts.ptr, p))
        zero = ir.Constant(self.values.ptr.type.pointee, None)
        with for_range(b, 0, self.values.type.size, name="vz") as p:
            b.store(zero, elem_ptr(b, self.values.ptr, p))
        with for_range(b, 0, groups, name="out") as g:
            p = b.load(elem_ptr(b, self.rank, g))
            src = b.load(elem_ptr(b, self.gfirst, g))
            b.store(src, elem_ptr(b, self.first.ptr, p))
            b.store(b.load(elem_ptr(b, self.gcount, g)), elem_ptr(b, self.counts.ptr, p))
            with for_range(b, 0, self.outer * self.inner, name="cp") as e:
                v = b.load(elem_ptr(b, self.x.ptr, self.at(src, e)))
                b.store(v, elem_ptr(b, self.values.ptr, self.at(p, e)))
        with for_range(b, 0, self.n, name="inv") as i:
            ptr = elem_ptr(b, self.inverse.ptr, i)
            b.store(b.load(elem_ptr(b, self.rank, b.load(ptr))), ptr)
        b.store(groups, self.count.ptr)

    def emit(self) -> None:
        b = self.b
        with b.if_then(b.icmp_signed("==", self.ctx.tid, i64(0))):
            self.sort()
            self.group()
            self.ranks()
            self.write()


@register_emitter("Unique", elems=NUMERIC_KINDS | {ElemKind.BOOL, ElemKind.INT64}, when=_unique_ok,
                  why=f"elements^2 (slices^2 x slice size) <= {MAX_STEPS}")
def _unique(ctx: EmitContext, instr: Instr) -> None:
    _Unique(ctx, instr).emit()
