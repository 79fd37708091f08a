"""Which nodes may run with symbolic dims, per kind (``glow_core/pipeline/symbolic.py``).

A function compiled for symbolic dims is laid out at the bounds, and entries past a run's size are padding.
A node is safe when padding can only ever meet padding: every symbolic axis is *element-wise* for it (the
result at a position depends on its inputs at the same position of that axis), and nothing it computes on
padding can trap. A node that reduces over, or moves data along, a symbolic axis is safe only when the
backend's kernel for its kind reads the run's sizes (``Backend.symbolic_kinds``).

:data:`SYMBOLIC_RULES` maps a kind to its rule: ``rule(node) -> None`` (safe without the backend's help) or
the reason it needs a symbolic kernel. Kinds without a rule: element-wise kinds are safe (the integer
divisions excepted), every other kind needs a symbolic kernel when a symbolic axis touches it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from glow_core.ir.graph import Constant, Node, Placeholder
from glow_core.ir.kinds import Category
from glow_core.ir.types import TensorType

#: (node) -> None when every symbolic axis is element-wise for it, else why it needs a symbolic kernel
Rule = Callable[[Node], "str | None"]

#: element-wise kinds that trap on a zero integer divisor (padding may hold zeros)
TRAPPING = frozenset({"Div", "Mod"})


def sym_axes(t: TensorType | None) -> set[int]:
    """The axes of ``t`` whose size is symbolic."""
    if t is None or t.sym is None:
        return set()
    return {k for k, e in enumerate(t.sym) if e is not None}


def touches_symbols(node: Node) -> bool:
    return any(sym_axes(v.type) for v in [*node.inputs, *node.outputs] if v is not None)


def _elementwise(node: Node) -> str | None:
    if node.kind.name in TRAPPING and not node.outputs[0].type.elem.is_float:
        return f"an integer {node.kind.name} over symbolic dims (padding could divide by zero)"
    return None


def _moves_axes(node: Node) -> str | None:
    return None  # Transpose and co: each entry keeps its position along every axis it carries


def _reshape(node: Node) -> str | None:
    """Safe when each symbolic axis stays one axis with the same size expression and the same number of
    entries before and after it in the layout (splitting or merging only fixed axes, or axes of size 1)."""
    src, dst = node.inputs[0].type, node.outputs[0].type  # type: ignore[union-attr]
    sa, da = sorted(sym_axes(src)), sorted(sym_axes(dst))
    if len(sa) != len(da):
        return "a Reshape that merges or splits a symbolic axis"
    for k, j in zip(sa, da):
        same = src.sym[k] == dst.sym[j]  # type: ignore[index]
        outer = int(np.prod(src.shape[:k])) == int(np.prod(dst.shape[:j]))
        inner = int(np.prod(src.shape[k + 1:])) == int(np.prod(dst.shape[j + 1:]))
        if not (same and outer and inner):
            return "a Reshape that merges or splits a symbolic axis"
    return None


def _along_axis(name: str = "axis") -> Rule:
    """Safe when the node's ``axis`` attribute (reduced, concatenated or normalized over) is fixed."""

    def rule(node: Node) -> str | None:
        t = node.inputs[0].type if node.kind.name != "Concat" else node.outputs[0].type  # type: ignore[union-attr]
        axis = int(node.attrs.get(name, -1))
        axis = axis + t.rank if axis < 0 else axis
        return f"a {node.kind.name} along a symbolic axis" if axis in sym_axes(t) else None

    return rule


def _over_axes(node: Node) -> str | None:
    """Softmax and the reductions: safe when no axis they reduce over is symbolic (``axes``; none: all)."""
    t = node.inputs[0].type  # type: ignore[union-attr]
    axes = node.attrs.get("axes")
    reduced = set(range(t.rank)) if axes is None or len(axes) == 0 else {a + t.rank if a < 0 else a for a in axes}
    return f"a {node.kind.name} over a symbolic axis" if reduced & sym_axes(t) else None


def _channels(node: Node) -> str | None:
    """LRN sums over the channel axis (1): element-wise along every other axis."""
    t = node.inputs[0].type  # type: ignore[union-attr]
    return f"a {node.kind.name} over a symbolic channel axis" if 1 in sym_axes(t) else None


def _slice(node: Node) -> str | None:
    """Safe on a symbolic axis it keeps whole (start 0, step 1, the same size expression) or of which it reads
    only the first entry (a symbol is at least 1)."""
    src, dst = node.inputs[0].type, node.outputs[0].type  # type: ignore[union-attr]
    starts, sizes, steps = node.attrs["starts"], node.attrs["sizes"], node.attrs["steps"]
    for k in sym_axes(src) | sym_axes(dst):
        whole = k in sym_axes(src) and k in sym_axes(dst) and starts[k] == 0 and steps[k] == 1 \
            and src.sym[k] == dst.sym[k]  # type: ignore[index]
        first = k in sym_axes(src) and k not in sym_axes(dst) and starts[k] == 0 and sizes[k] <= 1
        if not (whole or first):
            return "a Slice that cuts a symbolic axis"
    return None


def _last_axis(node: Node) -> str | None:
    t = node.inputs[0].type  # type: ignore[union-attr]
    return f"a {node.kind.name} over a symbolic last axis" if t.rank - 1 in sym_axes(t) else None


def _matmul(node: Node) -> str | None:
    """Element-wise over rows and columns; the contracted axis (LHS's last) must be fixed."""
    lhs = node.inputs[0].type  # type: ignore[union-attr]
    return "a product that sums over a symbolic axis" if lhs.rank - 1 in sym_axes(lhs) else None


def _attention(node: Node) -> str | None:
    """Rows of queries are element-wise; the keys' axis is summed over."""
    kt = node.inputs[1].type  # type: ignore[union-attr]
    return "attention over a symbolic number of keys" if kt.rank - 1 in sym_axes(kt) else None


def _gather(node: Node) -> str | None:
    """Element-wise along the indices' axes, when padded indices are in range: indices fed by the caller
    (the runtime zeroes their padding) or constant ones all in range; the gathered axis must be fixed."""
    data, idx = node.inputs[0], node.inputs[1]
    assert data is not None and idx is not None
    axis = int(node.attrs.get("axis", 0))
    axis = axis + data.type.rank if axis < 0 else axis
    if axis in sym_axes(data.type):
        return "a Gather along a symbolic axis"
    if not sym_axes(idx.type) or isinstance(idx, Placeholder):
        return None
    if isinstance(idx, Constant):
        n = data.type.shape[axis]
        vals = np.asarray(idx.payload)
        if vals.size == 0 or (int(vals.min()) >= -n and int(vals.max()) < n):
            return None
    return "a Gather of computed indices over a symbolic axis"


def _windows(node: Node) -> str | None:
    """Convolutions and pools are element-wise along the batch; a window sliding over a symbolic spatial axis
    reads past the run's size at its edge (zeros for a convolution's padding, nothing for a max), so it needs
    the backend's kernel, which fills the input's padding first (or counts only the valid entries)."""
    t = node.inputs[0].type  # type: ignore[union-attr]
    return f"a {node.kind.name} over symbolic spatial axes" if sym_axes(t) - {0} else None


#: kinds with a sliding window over the spatial axes (NC + spatial layouts)
WINDOW_KINDS = ("Conv", "FusedConv", "MaxPool", "AvgPool")

SYMBOLIC_RULES: dict[str, Rule] = {
    **{k: _windows for k in WINDOW_KINDS},
    "Transpose": _moves_axes,
    "Reshape": _reshape,
    "Concat": _along_axis(),
    "Softmax": _over_axes,
    "LogSoftmax": _over_axes,
    "Slice": _slice,
    "LRN": _channels,
    "FusedLayerNorm": _last_axis,
    "MatMul": _matmul,
    "FusedMatMul": _matmul,
    "FusedAttention": _attention,
    "Gather": _gather,
    **{k: _over_axes for k in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                               "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp")},
}


def needs_symbolic_kernel(node: Node) -> str | None:
    """None when ``node`` is safe on padded layouts by itself, else why it needs its kind's symbolic kernel."""
    if not touches_symbols(node):
        return None
    rule = SYMBOLIC_RULES.get(node.kind.name)
    if rule is not None:
        return rule(node)
    if Category.ELEMENTWISE in node.kind.categories or Category.NO_OP in node.kind.categories:
        return _elementwise(node)
    return f"{node.kind.name} with symbolic dims"


__all__ = ["SYMBOLIC_RULES", "WINDOW_KINDS", "needs_symbolic_kernel", "sym_axes", "touches_symbols"]
