"""``eliminate-concat-slice``: Slices of Concats and Concats of Slices that copy for nothing.

- ``Slice(Concat(a, b, c))`` reading only elements of one operand (say ``b``)
  -> ``b`` itself when it reads all of it in order, else a Slice of ``b``;
- ``Concat(..., Slice(x, s1), Slice(x, s2), ...)`` where the two slices select
  the same elements on every other axis and continue each other along the
  Concat axis (same step, ``s2.start == s1.start + s1.size * step``)
  -> one Slice of ``x`` (or ``x`` itself when it covers all of it); a Concat left
  with one operand is that operand;
- ``Concat[axis](a, Concat[axis](b, c), d)`` -> ``Concat[axis](a, b, c, d)``;
- operands of size 0 along the axis are dropped (when another one remains).

Every rewrite computes the same elements; readers and function outputs are
rewired to the new value. The original Slices / Concats stay while something
else reads them.
"""

from __future__ import annotations

from collections.abc import Callable

from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import KindTable
from glow_core.passes.noop import noop_operand
from glow_core.passes.rewrite import create_before, erase_if_dead, producer, replace_value
from glow_core.passinfra import PassContext, graph_pass


def _slice_value(fn: Function, anchor: Node, x: Value, starts: tuple[int, ...], sizes: tuple[int, ...],
                 steps: tuple[int, ...]) -> Value:
    """``Slice(x, ...)`` before ``anchor``, or ``x`` when that Slice would select all of it in order."""
    s = create_before(fn, anchor, "Slice", [x], {"starts": starts, "sizes": sizes, "steps": steps})
    same = noop_operand(s)
    if same is not None:
        fn.erase_node(s)
        return same
    return s.result


# -- Slice of a Concat --------------------------------------------------------------------------

def _slice_of_concat(fn: Function, node: Node) -> bool:
    cat = producer(node.inputs[0], "Concat")
    if cat is None:
        return False
    axis = int(cat.attrs["axis"])
    starts, sizes, steps = (tuple(node.attrs[k]) for k in ("starts", "sizes", "steps"))
    start, size, step = starts[axis], sizes[axis], steps[axis]
    if size == 0:
        return False
    last = start + (size - 1) * step
    lo, hi = min(start, last), max(start, last)
    offset = 0
    for v in cat.inputs:
        assert v is not None
        dim = v.type.shape[axis]
        if offset <= lo and hi < offset + dim:
            new_starts = starts[:axis] + (start - offset,) + starts[axis + 1:]
            new = _slice_value(fn, node, v, new_starts, sizes, steps)
            replace_value(fn, node.result, new)
            erase_if_dead(fn, node, cat)
            return True
        offset += dim
    return False


# -- Concat of Slices, Concat of Concats ---------------------------------------------------------

def _continues(a: Node, b: Node, axis: int) -> bool:
    """Slices ``a`` then ``b`` of one tensor, equal off ``axis``, contiguous (same step) along it."""
    if a.inputs[0] is not b.inputs[0]:
        return False
    sa, sb = a.attrs, b.attrs
    for k in ("starts", "sizes", "steps"):
        if any(i != axis and x != y for i, (x, y) in enumerate(zip(sa[k], sb[k]))):
            return False
    step = sa["steps"][axis]
    return bool(step == sb["steps"][axis] and sb["starts"][axis] == sa["starts"][axis] + sa["sizes"][axis] * step)


def _merge_slices(fn: Function, node: Node, ops: list[Value], axis: int) -> list[Value]:
    out: list[Value] = []
    run: list[Node] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0].result)
        elif run:
            first = run[0]
            sizes = list(first.attrs["sizes"])
            sizes[axis] = sum(int(s.attrs["sizes"][axis]) for s in run)
            x = first.inputs[0]
            assert x is not None
            out.append(_slice_value(fn, node, x, tuple(first.attrs["starts"]), tuple(sizes),
                                    tuple(first.attrs["steps"])))
        run.clear()

    for v in ops:
        s = producer(v, "Slice")
        if s is not None and run and _continues(run[-1], s, axis):
            run.append(s)
            continue
        flush()
        if s is not None:
            run.append(s)
        else:
            out.append(v)
    flush()
    return out


def _flatten(ops: list[Value], axis: int) -> list[Value]:
    out: list[Value] = []
    for v in ops:
        inner = producer(v, "Concat")
        if inner is not None and int(inner.attrs["axis"]) == axis:
            out.extend(_flatten([u for u in inner.inputs if u is not None], axis))
        else:
            out.append(v)
    return out


def _simplify_concat(fn: Function, node: Node) -> bool:
    axis = int(node.attrs["axis"])
    ops = [v for v in node.inputs if v is not None]
    new_ops = _flatten(ops, axis)
    nonempty = [v for v in new_ops if v.type.shape[axis] != 0]
    if nonempty:
        new_ops = nonempty
    new_ops = _merge_slices(fn, node, new_ops, axis)
    if len(new_ops) == len(ops) and all(a is b for a, b in zip(new_ops, ops)):
        return False
    if len(new_ops) == 1:
        new = new_ops[0]
    else:
        new = create_before(fn, node, "Concat", new_ops, {"axis": axis}).result
    replace_value(fn, node.result, new)
    erase_if_dead(fn, node, *(producer(v) for v in ops))
    return True


RewriteRule = Callable[[Function, Node], bool]
CONCAT_SLICE_RULES = KindTable("concat/slice rules")
CONCAT_SLICE_RULES.add("Slice", _slice_of_concat)
CONCAT_SLICE_RULES.add("Concat", _simplify_concat)


@graph_pass("eliminate-concat-slice")
def eliminate_concat_slice(fn: Function, ctx: PassContext) -> bool:
    """Slice of a Concat operand -> the operand; Concat of adjacent Slices -> one Slice;
    Concat of Concats on one axis -> one Concat."""
    changed = False
    for node in list(fn.nodes):
        if node.function is fn and node.kind.name in CONCAT_SLICE_RULES:
            changed |= bool(CONCAT_SLICE_RULES[node.kind.name](fn, node))
    return changed
