"""The node-wise rounded evaluation: every node's exact result, rounded to float32 before its readers see it.

The float64 rule (:mod:`glow_tools.fuzz.float64`) never excuses an element on
which onnxruntime agrees with the float32 reference: two float32 evaluations
agreeing is the answer float32 determines in practice. They can agree on an
answer that neither node-wise semantics gives, though. A reduction's order is
left open by the spec ("Computes the mean of the input tensor's elements along
the provided axes", ReduceMean), and two engines summing in similar orders
share their rounding: the mean of sixty copies of ``65504**2`` is ``65504**2``
exactly, numpy's pairwise float32 sum gives one unit in the last place less,
and so does onnxruntime; a variance written as ``E[x^2] - E[x]^2`` is then
negative, and its square root NaN, where a backend whose sum is the correctly
rounded one gives the float32 answer of every node.

:func:`run_reference_rounded` evaluates the widened float64 model with every
kernel's float64 outputs rounded to float32 (and widened back) as they leave
the node: each node computes in float64 on float32 operands and its result is
the correctly rounded float32 value, up to float64's own rounding. An element
on which onnxruntime agrees with the reference is excused only where glow's
value is this evaluation's (within the judge's tolerance) and the reference's
is not, and where the rest of the float64 rule holds (glow within the float64
interval, the reference outside it or the element's float32 uncertainty past
the tolerance). Ops that hold subgraphs (If, Loop, Scan) run unrounded, and so
do ops the reference expands from a function body of its own (GroupNormalization):
their results are rounded only where a rounded node reads them, or as outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

from glow_tools.fuzz.runners import default_opset


def _round32(value: Any) -> Any:
    """A kernel's output with its float64 arrays rounded to float32 and widened back (sequences element-wise)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        with np.errstate(all="ignore"):
            return value.astype(np.float32).astype(np.float64)
    if isinstance(value, list):
        return [_round32(v) for v in value]
    return value


def _has_kernel(op_type: str, opset: int) -> bool:
    """Whether ``onnx.reference`` has a kernel of its own for the op (an op defined by a function whose body
    depends on its input types, GroupNormalization, has none: the evaluator expands it, unrounded inside, and
    its result is rounded where it is read or returned)."""
    from onnx.reference.ops._op_list import load_op

    try:
        load_op("", op_type, opset)
    except Exception:  # noqa: BLE001  (RuntimeContextError and kin: no kernel)
        return False
    return True


def _holds_graph(node: Any) -> bool:
    from onnx import AttributeProto

    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _rounding_class(op_type: str, base: type[OpRun] | None) -> type[OpRun]:
    """A kernel under ``op_type``'s name that runs ``base`` (the corrected kernel, or the reference's own for the
    model's opset when None) and rounds its outputs."""
    from glow_tools.fuzz.reference_nonfinite import reference_kernel

    def __init__(self: Any, onnx_node: Any, run_params: dict[str, Any]) -> None:
        OpRun.__init__(self, onnx_node, run_params)
        self._kernel = base(onnx_node, run_params) if base is not None else reference_kernel(onnx_node, run_params)

    def _run(self: Any, *args: Any, **attrs: Any) -> tuple[Any, ...]:
        out = self._kernel.run(*args)
        return tuple(_round32(o) for o in (out if isinstance(out, tuple) else (out,)))

    return type(op_type, (OpRun,), {"op_domain": "", "__init__": __init__, "_run": _run})


def rounding_ops(model: Any, fixed: list[type[OpRun]]) -> list[type[OpRun]]:
    """``new_ops`` for the node-wise rounded evaluation of ``model``'s main graph: every standard-domain op
    without subgraphs, rounding; ``fixed`` (the judge's corrected kernels) run under them or as they are."""
    by_name = {c.__name__: c for c in fixed}
    ops = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx") and not _holds_graph(n)
           and (n.op_type in by_name or _has_kernel(n.op_type, default_opset(model)))}
    held = {n.op_type for n in model.graph.node if _holds_graph(n)}
    wrapped = [_rounding_class(op, by_name.get(op)) for op in sorted(ops - held)]
    return wrapped + [c for c in fixed if c.__name__ not in ops - held]


def run_reference_rounded(case_dir: str) -> list[np.ndarray]:
    """The node-wise rounded evaluation's outputs for the case (see the module)."""
    from onnx.reference import ReferenceEvaluator

    from glow_tools.fuzz.float64 import widened_case
    from glow_tools.fuzz.float64_kernels import FLOAT64_KERNELS
    from glow_tools.fuzz.reference_fixes import new_ops

    model, names, inputs = widened_case(case_dir)
    ops = rounding_ops(model, new_ops(default_opset(model)) + FLOAT64_KERNELS)
    with np.errstate(all="ignore"):
        outs = ReferenceEvaluator(model, new_ops=ops).run(None, dict(zip(names, inputs)))
    return [np.asarray(_round32(o)) for o in outs]
