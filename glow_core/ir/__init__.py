"""The graph IR: element kinds and tensor types, the node-kind table, the graph.

This package is the bottom floor: it imports nothing else of ours except
``glow_core.errors``. See README.md beside this file.
"""

from glow_core.ir.graph import Constant, Function, Module, Node, NodeOutput, Placeholder, Value
from glow_core.ir.kinds import AttrType, Category, KindTable, NodeKind, all_kinds, attr, define_kind, get_kind, kinds_in
from glow_core.ir.types import ElemKind, TensorType

__all__ = [
    "AttrType", "Category", "Constant", "ElemKind", "Function", "KindTable", "Module", "Node", "NodeKind",
    "NodeOutput", "Placeholder", "TensorType", "Value", "all_kinds", "attr", "define_kind", "get_kind", "kinds_in",
]
