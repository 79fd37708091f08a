"""Lowering: high-level node kinds -> the primitive set.

In: a graph function and a backend (which decides, per node, what it runs
natively). Out: the same function where every other node is rewritten into
primitives (kinds with the PRIMITIVE category). See table.py for the contract
and rules/ for the rules, one module per family.
"""

from glow_core.lowering.builder import Builder
from glow_core.lowering.table import LOWERINGS, lower_node, lowering, lowerings, primitive_kinds

__all__ = ["Builder", "LOWERINGS", "lower_node", "lowering", "lowerings", "primitive_kinds"]
