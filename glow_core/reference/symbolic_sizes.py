"""Sizes of a function compiled for symbolic dims at run time, shared by the backends that run one (the cpu
runtime and the interpreter) and the pipeline that makes it (``glow_core/pipeline/symbolic.py``).

- :func:`is_global_pool`: a pool whose window is its input's whole spatial extent (the lowered
  GlobalAveragePool), whose ``kernel_shape`` is then the run's height and width.
"""

from __future__ import annotations

from glow_core.ir.graph import Node

#: pooling kinds whose ``kernel_shape`` may be the input's spatial sizes (a global pool)
GLOBAL_POOL_KINDS = frozenset({"AvgPool", "MaxPool"})


def is_global_pool(node: Node) -> bool:
    """A pool whose window is the whole spatial extent of its input (the lowered GlobalAveragePool)."""
    x = node.inputs[0] if node.inputs else None
    return node.kind.name in GLOBAL_POOL_KINDS and x is not None and \
        tuple(node.attrs.get("kernel_shape", ())) == tuple(x.type.shape[2:]) and \
        not any(node.attrs.get("pads", ())) and all(v == 1 for v in node.attrs.get("strides", ()))


__all__ = ["GLOBAL_POOL_KINDS", "is_global_pool"]
