"""Running nodes and functions on a backend and on the reference: what a backend author tests with.

Helpers::

    from glow_tools.testing import check_node
    r = check_node("xyz", "Add", [a, b])          # run one Add on backend xyz and on the reference
    assert r.ok, r.message

They drive the compiler (``glow_core.pipeline.prepare_function``, the plugin
registry), so they live in the developer tooling above the core. The pure
tolerance and comparison helpers they use are the SDK's ``glow_sdk.testing``
(re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.pipeline import check_support, compile_options, prepare_function
from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function, Node, Value
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import TensorType
from glow_core.passes import PassContext
from glow_core.plugin_host import get_backend, reference_backend
from glow_sdk.backend import Backend
from glow_sdk.testing import (
    BITWISE,
    EXACT,
    KIND_TOLERANCES,
    TOLERANCE_CLASSES,
    ArrayStats,
    Comparison,
    Tolerance,
    array_stats,
    compare_arrays,
    finfo,
    is_float_dtype,
    tolerance_class,
    tolerance_for,
)

# -- running one node / one function ------------------------------------------------------

def _backend(backend: str | Backend) -> Backend:
    if isinstance(backend, str):
        return get_backend(backend)
    return backend


def pad_operands(kind: str, operands: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    """``operands`` with None for omitted trailing optional operands (kernels take every operand slot)."""
    spec = get_kind(kind)
    out = list(operands)
    if spec.inputs and not spec.inputs[-1].variadic and len(out) < len(spec.inputs):
        out += [None] * (len(spec.inputs) - len(out))
    return out


def one_node_function(kind: str, operands: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
                      types: Sequence[TensorType | None] | None = None, consts: Sequence[int] = ()) -> Function:
    """A function holding one ``kind`` node; operand ``i`` is input ``in{i}`` (a constant if ``i`` in ``consts``;
    None omits an optional operand). ``types`` overrides operand types (quantized kinds). Outputs: ``out{j}``."""
    operands = pad_operands(kind, operands)
    fn = Function("main")
    values: list[Value | None] = []
    for i, a in enumerate(operands):
        if a is None:
            values.append(None)
            continue
        t = types[i] if types is not None and types[i] is not None else TensorType.of(a)
        assert t is not None
        values.append(fn.add_constant(a, f"in{i}", t) if i in consts else fn.add_input(f"in{i}", t))
    node = fn.create(kind, values, dict(attrs or {}), name=kind.lower())
    for j, out in enumerate(node.outputs):
        fn.set_output(f"out{j}", out)
    return fn


def feeds_of(fn: Function, operands: Sequence[np.ndarray | None]) -> dict[str, np.ndarray]:
    """The feeds of a :func:`one_node_function`: ``in{i}`` for the operands that are inputs."""
    names = {p.name for p in fn.inputs}
    return {f"in{i}": a for i, a in enumerate(operands) if a is not None and f"in{i}" in names}


def unsupported_nodes(fn: Function, backend: Backend) -> list[Node]:
    return [n for n in fn.nodes if not backend.supports(n)]


def prepare_for(fn: Function, backend: str | Backend, *, lower_all: bool = False) -> Function:
    """Optimize and lower ``fn`` for ``backend`` in place (``lower_all``: lower every high-level kind)."""
    be = _backend(backend)
    ctx = PassContext(backend=be, options={"lower_all": True} if lower_all else {})
    return prepare_function(fn, be, ctx=ctx)


def run_function(fn: Function, backend: str | Backend, feeds: Mapping[str, np.ndarray], *,
                 lower_all: bool = False, prepared: bool = False) -> dict[str, np.ndarray]:
    """Prepare (unless ``prepared``), check support (every offending node at once), compile and run ``fn``."""

    be = _backend(backend)
    if not prepared:
        prepare_for(fn, be, lower_all=lower_all)
    check_support(fn, be)
    return be.compile(fn, compile_options()).execute(dict(feeds))


def evaluate_reference(kind: str, operands: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
                       out_types: Sequence[TensorType]) -> list[np.ndarray]:
    """Evaluate one node on the reference backend (``interpreter`` unless ``GLOW_REFERENCE_BACKEND`` says otherwise)."""
    return reference_backend().evaluate(kind, attrs, list(operands), list(out_types))


@dataclass
class NodeCheck:
    """The outcome of :func:`check_node`: one comparison per result."""

    kind: str
    backend: str
    comparisons: list[Comparison] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    @property
    def max_error(self) -> float:
        return max((c.max_abs_error for c in self.comparisons), default=0.0)

    @property
    def message(self) -> str:
        bad = [f"result {i}: {c.message}" for i, c in enumerate(self.comparisons) if not c.ok]
        return "; ".join(bad) if bad else "matches the reference"


def check_node(backend: str | Backend, kind: str, operands: Sequence[np.ndarray | None],
               attrs: Mapping[str, Any] | None = None, *, tolerance: Tolerance | None = None,
               types: Sequence[TensorType | None] | None = None, lower_all: bool = False) -> NodeCheck:
    """Run one ``kind`` node on ``backend`` (through the real pipeline) and on the reference; compare.

    Raises :class:`~glow_core.errors.UnsupportedError` when the backend cannot
    run the (lowered) node.
    """
    be = _backend(backend)
    operands = pad_operands(kind, operands)
    fn = one_node_function(kind, operands, attrs, types)
    node = fn.nodes[0]
    out_types = [o.type for o in node.outputs]
    want = evaluate_reference(kind, operands, node.attrs, out_types)
    got = run_function(fn, be, feeds_of(fn, operands), lower_all=lower_all)
    check = NodeCheck(kind, be.name, nodes=fn.count_by_kind())
    for j, (w, t) in enumerate(zip(want, out_types)):
        tol = tolerance or tolerance_for(kind, t.elem)
        check.comparisons.append(compare_arrays(got[f"out{j}"], w, tol))
    return check


def assert_matches_reference(backend: str | Backend, kind: str, operands: Sequence[np.ndarray | None],
                             attrs: Mapping[str, Any] | None = None, **kw: Any) -> NodeCheck:
    """:func:`check_node`, raising AssertionError with the comparison message when a result differs."""
    check = check_node(backend, kind, operands, attrs, **kw)
    if not check.ok:
        raise AssertionError(f"{kind} on backend {check.backend}: {check.message}")
    return check


__all__ = [
    "BITWISE", "EXACT", "KIND_TOLERANCES", "TOLERANCE_CLASSES", "ArrayStats", "Comparison", "NodeCheck",
    "Tolerance", "UnsupportedError", "array_stats", "assert_matches_reference", "check_node", "compare_arrays",
    "evaluate_reference", "feeds_of", "finfo", "is_float_dtype", "one_node_function", "pad_operands", "prepare_for",
    "run_function", "tolerance_class", "tolerance_for", "unsupported_nodes",
]
