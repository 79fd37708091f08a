"""Symbolic dims: for a backend that declares symbolic kernels (``Backend.symbolic_kinds``; the suite collects
these cases only for such a backend), one compile of a model with a free sequence runs every size up to the
bound, equal to the reference at each.

Each case compiles its model through ``glow_core.compile`` like a user (the core derives the symbolic dims and
lays the function out at the bound), checks that the core compiled it once for symbolic dims, and runs sizes
from the largest down (so a kernel that reads the padding left by a larger run shows), comparing each with
``onnx.reference``. A backend that declares no symbolic kernel gets UNSUPPORTED (never a pass); one whose
kernels the core refuses for the model also gets UNSUPPORTED, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glow_conformance.model import Case, Context, Level, Outcome, Result
from glow_sdk.testing import compare_arrays, tolerance_for

#: the sizes each case runs, largest first (the bound the core picks is larger than all of them)
SIZES = (37, 16, 5, 1, 8, 2)


def _graph(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "symbolic", inputs, outputs, inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _weights(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]


def positions_model() -> onnx.ModelProto:
    """relu((x + positions[:seq]) @ W + b): a position table sliced to the sequence, a product per row."""
    pos, w, b = _weights((64, 16), (16, 8), (8,))
    nodes = [helper.make_node("Shape", ["x"], ["n"], start=1, end=2),
             helper.make_node("Slice", ["pos", "zero", "n"], ["p"]),
             helper.make_node("Add", ["x", "p"], ["xp"]),
             helper.make_node("MatMul", ["xp", "W"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Relu", ["mb"], ["y"])]
    return _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 8])],
                  [numpy_helper.from_array(a, n) for a, n in ((pos, "pos"), (w, "W"), (b, "b"))] +
                  [numpy_helper.from_array(np.array([0], np.int64), "zero")])


def attention_model() -> onnx.ModelProto:
    """Softmax(q k^T / 4) v over a free sequence, then a mean over it: reductions over the symbolic axis."""
    wq, wk = _weights((16, 16), (16, 16))
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "four"], ["sd"]),
             helper.make_node("Softmax", ["sd"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "x"], ["a"]),
             helper.make_node("ReduceMean", ["a"], ["y"], axes=[1], keepdims=0)]
    return _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16]),
                   helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, "seq", 16])],
                  [numpy_helper.from_array(wq, "Wq"), numpy_helper.from_array(wk, "Wk"),
                   numpy_helper.from_array(np.array(4.0, np.float32), "four")])


def cache_model() -> onnx.ModelProto:
    """A KV cache step: present = Concat(past, new) along the growing axis, and a Softmax over it."""
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=1),
             helper.make_node("ReduceMax", ["present"], ["r"], axes=[2], keepdims=0),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    return _graph(nodes, [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past", 8]),
                          helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, 1, 8])],
                  [helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, "total", 8]),
                   helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "total"])], [])


def _feeds(model: onnx.ModelProto, size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(size)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value if d.HasField("dim_value") else size for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _run(build: Callable[[], onnx.ModelProto]) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        import glow_core

        if not ctx.backend.symbolic_kinds():
            return Outcome(Result.UNSUPPORTED, "the backend declares no symbolic kernel (Backend.symbolic_kinds)")
        model = build()
        net = glow_core.compile(model, ctx.backend_name)
        ref = ReferenceEvaluator(model)
        for size in SIZES:
            feeds = _feeds(model, size)
            got = net.run(feeds)
            for vi, want in zip(model.graph.output, ref.run(None, feeds)):
                c = compare_arrays(got[vi.name], np.asarray(want), tolerance_for("", _elem(want), "composite-accumulate"))
                if not c.ok:
                    return Outcome(Result.FAIL, f"size {size}, output {vi.name}: {c.message}")
        plans = [p.describe() for p in net.symbolic.plans]
        if not plans:
            why = "; ".join(sorted(set(net.symbolic.refused.values())))[:400]
            return Outcome(Result.UNSUPPORTED, f"the core did not compile the model for symbolic dims: {why}")
        if net.specializations_compiled != 1:
            return Outcome(Result.FAIL, f"{net.specializations_compiled} compiles for sizes {SIZES} (one expected)")
        return Outcome(Result.PASS, f"sizes {', '.join(map(str, SIZES))} from one compile ({'; '.join(plans)})")

    return run


def _elem(a: np.ndarray):  # type: ignore[no-untyped-def]
    from glow_core.ir.types import ElemKind

    return ElemKind.from_dtype(np.asarray(a).dtype)


SYMBOLIC: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "positions": (positions_model, "a position table sliced to a free sequence, products per row"),
    "attention": (attention_model, "softmax attention and a mean over a free sequence"),
    "kv-cache": (cache_model, "a cache concatenated along its growing axis, a softmax over it"),
}


def symbolic_cases() -> list[Case]:
    return [Case(f"symbolic/{name}", "symbolic", Level.CORE, False, _run(build), description=desc)
            for name, (build, desc) in SYMBOLIC.items()]


__all__ = ["SYMBOLIC", "attention_model", "cache_model", "positions_model", "symbolic_cases"]
