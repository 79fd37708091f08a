"""Quantization-specific graph passes, run after conversion (``quantization_pipeline``).

- ``sink-dequantize``: data movement (Reshape, Transpose, Slice, ...) of a
  ``Dequantize`` runs on the integers instead: ``D(Dequantize(q)) -> Dequantize(D(q))``;
- ``hoist-quantize``: ``Quantize(D(x)) -> D(Quantize(x))`` (and the same for ``Rescale``) for
  data movement ``D``, so a quantized island reaches back to the producer of ``x``;
- ``fold-dequantize-quantize``: ``Quantize(Dequantize(q))`` becomes ``q`` when the
  types agree, else ``Rescale(q)``;
- ``fold-rescale``: a ``Rescale`` whose operand is only read by it is folded into
  the operand's producer (which then produces the rescaled type directly; a
  ``QLookup``'s table is rescaled entry by entry, the same codes); a
  Rescale to its own type vanishes; ``Rescale(Rescale(x))`` becomes one Rescale;
- ``fold-qclip``: a ``QClip`` that saturation already implies (Relu into a range
  starting at 0) vanishes;
- ``lut-islands`` (``glow_core.quantization.lut``): an element-wise float island
  between the Dequantize of one 8-bit value and a Quantize (SiLU, HardSwish, GELU,
  ...) becomes a 256-entry ``QLookup``.

Concat operands are brought to one scale by conversion (every operand is quantized to
the Concat's type); the passes above then fold those rescales into the producers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from glow_core.ir.defs.quant import params_of, qbounds
import numpy as np

from glow_core.ir.graph import Constant, Function, Node, NodeOutput, Value
from glow_core.ir.types import TensorType
from glow_core.passinfra import FixedPoint, PassContext, PassManager, PassRegistry, Step, get_pass
from glow_core.reference import run_kernel

QUANT_PASSES = PassRegistry("quantization pass")

#: data-movement kinds that commute with (de)quantization element by element
MOVEMENT = frozenset({"Reshape", "Transpose", "Slice", "Broadcast", "Tile", "DepthToSpace", "SpaceToDepth",
                      "Identity"})
#: kinds whose result type is chosen by the ``elem`` / ``scale`` / ``offset`` attributes
RETYPABLE = frozenset({"Quantize", "Rescale", "QConv", "QMatMul", "QAdd", "QMul", "QAvgPool"})


def _producer(v: Value | None) -> Node | None:
    return v.node if isinstance(v, NodeOutput) else None


def _only_user(fn: Function, v: Value) -> bool:
    return len(v.users) == 1 and not fn.is_output(v)


def _recreate(fn: Function, node: Node, inputs: list[Value | None], attrs: Mapping[str, object],
              before: Node) -> Value:
    with fn.inserting_before(before):
        n = fn.create(node.kind.name, inputs, dict(attrs), name=node.name, origin=node.origin)
    return n.outputs[0]


def _replace(fn: Function, old: Value, new: Value) -> None:
    fn.replace_all_uses_with(old, new)
    node = _producer(old)
    if node is not None and not node.has_users():
        fn.erase_node(node)


@QUANT_PASSES.register("sink-dequantize")
def sink_dequantize(fn: Function, ctx: PassContext) -> bool:
    """Data movement of a Dequantize runs on the integers: D(Dequantize(q)) -> Dequantize(D(q))."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn or node.kind.name not in MOVEMENT or len(node.outputs) != 1:
            continue
        deq = _producer(node.inputs[0])
        if deq is None or deq.kind.name != "Dequantize":
            continue
        q = deq.inputs[0]
        moved = _recreate(fn, node, [q], node.attrs, node)
        with fn.inserting_before(node):
            d = fn.create("Dequantize", [moved], {"in_params": params_of(moved.type)}, name=f"{node.name}.dequantize",
                          origin=node.origin).outputs[0]
        _replace(fn, node.outputs[0], d)
        if not deq.has_users() and not fn.is_output(deq.outputs[0]):
            fn.erase_node(deq)
        changed = True
    return changed


@QUANT_PASSES.register("hoist-quantize")
def hoist_quantize(fn: Function, ctx: PassContext) -> bool:
    """Quantize(D(x)) -> D(Quantize(x)) and Rescale(D(x)) -> D(Rescale(x)) for data movement D read only by them."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn or node.kind.name not in ("Quantize", "Rescale"):
            continue
        mover = _producer(node.inputs[0])
        if mover is None or mover.kind.name not in MOVEMENT or not _only_user(fn, mover.outputs[0]):
            continue
        x = mover.inputs[0]
        assert x is not None
        t = node.outputs[0].type
        attrs = {"in_params": params_of(x.type)} if node.kind.name == "Rescale" else {}
        with fn.inserting_before(node):
            q = fn.create(node.kind.name, [x], {**attrs, "elem": t.elem, "scale": t.scale, "offset": t.offset},
                          name=node.name, origin=node.origin).outputs[0]
        moved = _recreate(fn, mover, [q], mover.attrs, node)
        _replace(fn, node.outputs[0], moved)
        if not mover.has_users():
            fn.erase_node(mover)
        changed = True
    return changed


def _out(t: TensorType) -> dict[str, object]:
    return {"elem": t.elem, "scale": t.scale, "offset": t.offset}


@QUANT_PASSES.register("fold-dequantize-quantize")
def fold_dequantize_quantize(fn: Function, ctx: PassContext) -> bool:
    """Quantize(Dequantize(q)) -> q (same type) or Rescale(q)."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn or node.kind.name != "Quantize":
            continue
        deq = _producer(node.inputs[0])
        if deq is None or deq.kind.name != "Dequantize":
            continue
        q, t = deq.inputs[0], node.outputs[0].type
        assert q is not None
        if q.type == t:
            new = q
        else:
            with fn.inserting_before(node):
                new = fn.create("Rescale", [q], {"in_params": params_of(q.type), **_out(t)}, name=f"{node.name}.rescale",
                                origin=node.origin).outputs[0]
        _replace(fn, node.outputs[0], new)
        if not deq.has_users() and not fn.is_output(deq.outputs[0]):
            fn.erase_node(deq)
        changed = True
    return changed


@QUANT_PASSES.register("fold-rescale")
def fold_rescale(fn: Function, ctx: PassContext) -> bool:
    """A Rescale folds into its operand's producer (read only by it); a Rescale to its own type vanishes."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn or node.kind.name != "Rescale":
            continue
        x, t = node.inputs[0], node.outputs[0].type
        assert x is not None
        if x.type == t:
            _replace(fn, node.outputs[0], x)
            changed = True
            continue
        prod = _producer(x)
        if prod is not None and prod.kind.name == "QLookup" and isinstance(prod.inputs[1], Constant) \
                and _only_user(fn, x):
            _fold_into_table(fn, node, prod)
            changed = True
            continue
        if prod is None or prod.kind.name not in RETYPABLE or not _only_user(fn, x):
            continue
        attrs = dict(prod.attrs)
        attrs.update(_out(t))
        if prod.kind.name == "Rescale":  # Rescale(Rescale(y)) -> Rescale(y)
            y = prod.inputs[0]
            assert y is not None
            if y.type == t:
                _replace(fn, node.outputs[0], y)
                fn.erase_node(prod)
                changed = True
                continue
        new = _recreate(fn, prod, list(prod.inputs), attrs, node)
        _replace(fn, node.outputs[0], new)
        fn.erase_node(prod)
        changed = True
    return changed


def _fold_into_table(fn: Function, rescale: Node, lookup: Node) -> None:
    """Rescale(QLookup(q, T)) -> QLookup(q, Rescale(T)): the same codes, one pass over the tensor fewer."""
    table = lookup.inputs[1]
    assert isinstance(table, Constant)  # (the caller checked)
    t = rescale.outputs[0].type.with_shape((256,))
    data = run_kernel("Rescale", rescale.attrs, [np.asarray(table.payload)], [t], f"table of {rescale.name}")[0]
    new_table = fn.add_constant(np.ascontiguousarray(data), f"{rescale.name}.table", type=t)
    new = _recreate(fn, lookup, [lookup.inputs[0], new_table], lookup.attrs, rescale)
    _replace(fn, rescale.outputs[0], new)
    fn.erase_node(lookup)


@QUANT_PASSES.register("fold-qclip")
def fold_qclip(fn: Function, ctx: PassContext) -> bool:
    """A QClip whose bounds the element kind's saturation already implies vanishes."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn or node.kind.name != "QClip":
            continue
        lo, hi = qbounds(node.outputs[0].type.elem)
        if node.attrs["lo"] <= lo and node.attrs["hi"] >= hi:
            _replace(fn, node.outputs[0], node.inputs[0])  # type: ignore[arg-type]
            changed = True
    return changed


def _core(name: str) -> Callable[[Function, PassContext], bool]:
    def run(fn: Function, ctx: PassContext) -> bool:
        return bool(get_pass(name).fn(fn, ctx))

    run.__doc__ = f"The graph pass '{name}'."
    return run


for _name in ("dce", "cse"):
    QUANT_PASSES.register(_name)(_core(_name))


def quantization_pipeline() -> list[Step]:
    """The passes run after conversion, to a fixed point."""
    return [FixedPoint("sink-dequantize", "hoist-quantize", "lut-islands", "fold-dequantize-quantize", "fold-rescale",
                       "fold-qclip", "cse", "dce")]


def optimize_quantized(fn: Function, ctx: PassContext | None = None) -> bool:
    """Run :func:`quantization_pipeline` on ``fn``."""
    return PassManager(quantization_pipeline(), "quantization", registry=QUANT_PASSES).run(fn, ctx)
