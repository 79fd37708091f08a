"""``lut-islands``: an element-wise float island between a Dequantize and a Quantize becomes one table.

After conversion an activation glow has no quantized kernel for (SiLU as ``x * Sigmoid(x)``, HardSwish,
GELU, Tanh, Sigmoid, ...) stays float, and the int8 island breaks around it::

    q -> Dequantize -> Sigmoid -> Mul(., Dequantize) -> Quantize -> next QConv

When every node between the Dequantize of one 8-bit value ``q`` and a Quantize is element-wise and
reads only ``q``'s dequantized value, other island values and scalar constants, the Quantize's result is a
function of ``q``'s code alone: 256 possible inputs. The pass evaluates the island on those 256 codes with
the reference kernels (the executable spec: Dequantize, each node, Quantize, in the graph's order and
element types) and replaces the Quantize by ``QLookup(q, table)``; the float nodes die when nothing else
reads them. Every backend runs ``QLookup`` (lowered to a Gather of the table by ``qlower``).
"""

from __future__ import annotations

import numpy as np

from glow_core.ir.graph import Constant, Function, Node, NodeOutput, Value
from glow_core.ir.kinds import Category
from glow_core.passinfra import PassContext
from glow_core.quantization.qpasses import QUANT_PASSES
from glow_core.quantization.tables import evaluate_table

#: the most float nodes one table replaces
MAX_ISLAND = 32


class _Island:
    """The element-wise nodes feeding one Quantize from one Dequantize (topological order)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.nodes: list[Node] = []
        self.source: Node | None = None  # the Dequantize

    def take(self, v: Value | None) -> bool:
        """Whether ``v`` can feed the island (adding its producers); False ends the search."""
        if isinstance(v, Constant):
            return v.type.size == 1
        node = v.node if isinstance(v, NodeOutput) else None
        if node is None or v.type.shape != self.shape:  # type: ignore[union-attr]
            return False
        if node.kind.name == "Dequantize":
            if self.source is not None and self.source is not node:
                return False
            q = node.inputs[0]
            self.source = node
            return q is not None and q.type.elem.is_quantized
        if node in self.nodes:
            return True
        if (not node.kind.is_(Category.ELEMENTWISE) or node.kind.is_(Category.QUANTIZATION)
                or len(node.outputs) != 1 or len(self.nodes) >= MAX_ISLAND):
            return False
        if not all(self.take(x) for x in node.inputs):
            return False
        self.nodes.append(node)  # after its operands: topological
        return True


def _table(island: _Island, quantize: Node) -> np.ndarray:
    """The Quantize's result for every code of the source, through the island's nodes."""
    deq = island.source
    assert deq is not None and deq.inputs[0] is not None and quantize.inputs[0] is not None
    return evaluate_table(deq.inputs[0].type, island.nodes, deq.outputs[0], quantize.inputs[0],
                          quantize.outputs[0].type.with_shape((256,)), f"table of {quantize.name}")


@QUANT_PASSES.register("lut-islands")
def lut_islands(fn: Function, ctx: PassContext) -> bool:
    """Quantize(f(Dequantize(q))) -> QLookup(q, table) for an element-wise float island f (module doc)."""
    changed = False
    for node in list(fn.nodes):
        if node.function is not fn or node.kind.name != "Quantize" or node.inputs[0] is None:
            continue
        root = node.inputs[0]
        island = _Island(root.type.shape)
        if not island.take(root) or island.source is None or not island.nodes:
            continue
        table = _table(island, node)
        q = island.source.inputs[0]
        assert q is not None
        const = fn.add_constant(np.ascontiguousarray(table), f"{node.name}.table", type=node.outputs[0].type.with_shape((256,)))
        with fn.inserting_before(node):
            new = fn.create("QLookup", [q, const], {}, name=f"{node.name}.lookup", origin=node.origin).outputs[0]
        fn.replace_all_uses_with(node.outputs[0], new)
        fn.erase_node(node)
        changed = True
    return changed
