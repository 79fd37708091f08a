"""Constants the import no longer needs are freed as it goes, and their bytes leave the budget's tally.

The importer folds every node whose operands are constants, so a chain of folds
(``ConstantOfShape``, then eight ``Add``\\ s of 1 GiB each) makes one constant per
node. Once the last node reading a value has been imported, a constant that no
graph node uses, that no graph output is and that no other ONNX name (an alias
made by Identity, a sequence holding it) still reaches is dead: it leaves the
function, its bytes leave the running total (:class:`glow_core.budget.Tally`),
and its ONNX name keeps only its type (a :class:`Value` without payload, for the
checks that read ranks and types after the import).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import onnx

from glow_core import budget
from glow_core.importer.structured import OptValue, RaggedValue, SeqValue
from glow_core.importer.subgraphs import node_uses
from glow_core.ir.graph import Constant, Function, Value


def _held(v: Any) -> Iterable[Any]:
    """The values a structured import-time value holds."""
    if isinstance(v, SeqValue):
        return v.items
    if isinstance(v, OptValue):
        return [v.value, *_held(v.value)] if v.value is not None else []
    if isinstance(v, RaggedValue):
        return [v.padded, v.count]
    return []


class Liveness:
    """Frees the constants of a graph's names after their last reader (see the module doc)."""

    def __init__(self, graph: onnx.GraphProto, values: Mapping[str, Any], fn: Function,
                 tally: budget.Tally) -> None:
        self.fn, self.tally = fn, tally
        outputs = {o.name for o in graph.output}
        last: dict[str, int] = {}
        for k, node in enumerate(graph.node):
            for name in node_uses(node):
                last[name] = k
        #: node index -> the names whose last reader it is (graph outputs are never freed)
        self.dying: dict[int, list[str]] = {}
        for name, k in last.items():
            if name not in outputs:
                self.dying.setdefault(k, []).append(name)
        #: id(value) -> the ONNX names (and structured values) that reach it
        self.refs: dict[int, int] = {}
        for v in values.values():
            self._count(v, 1)

    def _count(self, v: Any, step: int) -> None:
        self.refs[id(v)] = self.refs.get(id(v), 0) + step
        for inner in _held(v):
            self._count(inner, step)

    def after(self, k: int, node: onnx.NodeProto, values: dict[str, Any]) -> None:
        """Node ``k`` (``node``) was imported: count its results, free what it read for the last time."""
        for name in node.output:
            if name and name in values:
                self._count(values[name], 1)
        for name in self.dying.get(k, ()):
            v = values.get(name)
            if v is None:
                continue
            self._count(v, -1)
            if not isinstance(v, Constant) or self.refs.get(id(v), 0) > 0 or v.users or self.fn.is_output(v):
                continue
            kept = [c for c in self.fn.constants if c is not v]
            if len(kept) < len(self.fn.constants):
                values[name] = Value(name, v.type)  # (its type stays, for the checks after the import)
                self.fn.constants = kept
                self.tally.total -= math.prod(v.type.shape) * v.type.elem.itemsize
