"""``keep-compressed-weights``: a weight that ships as 8-bit integers stays 8-bit.

Weight-only compression (what model hubs do to transformers) stores a matrix as int8 or uint8
and dequantizes it in the graph::

    W = Mul(Cast(Wq, to=float32), S)        Wq [K, N] an initializer, S its scale
    Y = MatMul(X, W)                        (or MatMul(X, Transpose(W)), or Gemm(X, W, C), transB or not)

Folding that to a float constant quadruples the weight's memory and the bytes every product
reads. When the backend runs ``DequantMatMul``, this pass (before the other optimizations, so
before constant folding) turns each such product into ``DequantMatMul(X, Wq, S2)``, ``S2`` the
scale as ``[1, N]`` (per column), ``[K, 1]`` (per row) or ``[1, 1]``; the backend dequantizes
inside its kernel, rounding each weight exactly as the Cast and the Mul do, so the answer is
unchanged. A transposed weight is transposed once here, still as integers. An embedding table
compressed the same way and read by a Gather on axis 0 stays 8-bit too: the Gather picks the
integer rows, then only those are dequantized (any backend that runs the Gather, the Cast and the
Mul; the per-row scales are gathered with them). The Cast and the Mul
die when nothing else reads them (a weight also read elsewhere is folded for those readers as
before). ``fuse-activations`` later moves a following bias Add and activation into the node.

Nothing happens for a backend without the kinds, at optimization level 0 (this pass is in the
optimize pipeline; the lowering pipeline's constant folding then folds the weight), or for the graph the int8 conversion sees (``quantizable``: it requantizes float weights).
The importer leaves the Cast of a large 8-bit matrix unfolded so this pass can see it
(``glow_core.importer.context.DEFERRED_CASTS``).
"""

from __future__ import annotations

import numpy as np

from glow_core.ir.defs.fused import COMPRESSED_KINDS
from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.types import ElemKind
from glow_core.passes.rewrite import create_before, erase_if_dead, payload, producer
from glow_core.passinfra import PassContext, graph_pass

KIND = "DequantMatMul"


def _scale_2d(scale: np.ndarray, k: int, n: int) -> np.ndarray | None:
    """``scale`` as [1, N], [K, 1] or [1, 1] when it broadcasts to [K, N] that way, else None."""
    if scale.ndim > 2:
        if any(d != 1 for d in scale.shape[:-2]):
            return None
        scale = scale.reshape(scale.shape[-2:])
    s2 = scale.reshape((1,) * (2 - scale.ndim) + scale.shape)
    return s2 if s2.shape in ((1, n), (k, 1), (1, 1)) else None


def _dequantized(w: Value) -> tuple[np.ndarray, np.ndarray, tuple[Node, ...], bool] | None:
    """(Wq, scale [1, N] | [K, 1] | [1, 1] of Wq, the nodes that dequantize, transposed?) when ``w`` is
    Mul(Cast(Wq), S) of constants or its Transpose, Wq an 8-bit matrix."""
    tr = producer(w, "Transpose")
    if tr is not None:
        if tuple(tr.attrs["perm"]) != (1, 0):
            return None
        w = tr.inputs[0]
    mul = producer(w, "Mul")
    if mul is None or mul.result.type.elem is not ElemKind.FLOAT32:
        return None
    for i in (0, 1):
        cast, s = producer(mul.inputs[i], "Cast"), payload(mul.inputs[1 - i])
        if cast is None or s is None or not isinstance(cast.inputs[0], Constant):
            continue
        q = payload(cast.inputs[0])
        if q is None or cast.inputs[0].type.elem not in COMPRESSED_KINDS or q.ndim != 2:
            continue
        if mul.result.type.shape != q.shape or cast.result.type.elem is not ElemKind.FLOAT32:
            continue
        s2 = _scale_2d(np.asarray(s, np.float32), *q.shape)
        if s2 is not None:
            return q, s2, (cast, mul) if tr is None else (cast, mul, tr), tr is not None
    return None


def _replace(fn: Function, reader: Node, x: Value, w: Value, bias: Value | None, flip: bool,
             ctx: PassContext) -> bool:
    """``reader`` (x @ w [+ bias], w dequantized; ``flip``: read w transposed) -> DequantMatMul."""
    assert ctx.backend is not None
    if KIND not in ctx.backend.supported_kinds() or x.type.elem is not ElemKind.FLOAT32:
        return False
    found = _dequantized(w)
    if found is None:
        return False
    q, s2, nodes, transposed = found
    if transposed != flip:  # the product reads Wq transposed: transpose it once, as integers
        qc: Value = fn.add_constant(np.ascontiguousarray(q.T), f"{reader.name}.weight_q")
        s2 = s2.T
    else:
        qc = nodes[0].inputs[0]
    sc = fn.add_constant(np.ascontiguousarray(s2), f"{reader.name}.weight_scale")
    node = create_before(fn, reader, KIND, [x, qc, sc, bias])
    if node.result.type != reader.result.type or not ctx.backend.supports(node):
        fn.erase_node(node)
        return False
    fn.replace_all_uses_with(reader.result, node.result)
    erase_if_dead(fn, reader, *reversed(nodes))
    return True


def _matmul(fn: Function, mm: Node, ctx: PassContext) -> bool:
    x, w = mm.inputs[0], mm.inputs[1]
    return x is not None and w is not None and _replace(fn, mm, x, w, None, False, ctx)


def _gemm(fn: Function, gemm: Node, ctx: PassContext) -> bool:
    """Gemm(A, W, C) with alpha 1, no trans_a, and C (if any) added with beta 1: A @ W(^T) + C."""
    a = gemm.attrs
    x, w, c = gemm.inputs[0], gemm.inputs[1], gemm.inputs[2]
    if a["trans_a"] or a["alpha"] != 1.0 or (c is not None and a["beta"] != 1.0) or x is None or w is None:
        return False
    return _replace(fn, gemm, x, w, c, bool(a["trans_b"]), ctx)


def _gather_first(fn: Function, gather: Node, ctx: PassContext) -> bool:
    """Gather(Mul(Cast(Wq), S), ids) on axis 0 -> Mul(Cast(Gather(Wq, ids)), S'): the table stays 8-bit and
    only the rows gathered are dequantized (S' the scale, gathered too when it is per row)."""
    table, ids = gather.inputs[0], gather.inputs[1]
    if gather.attrs.get("axis", 0) != 0 or table is None or ids is None or producer(table, "Transpose"):
        return False
    found = _dequantized(table)
    if found is None:
        return False
    q, s2, nodes, _ = found
    k, n = q.shape
    made: list[Node] = []
    origin = gather.origin or gather.name
    with fn.inserting_before(gather):
        made.append(fn.create("Gather", [nodes[0].inputs[0], ids], {"axis": 0}, name=f"{gather.name}.q", origin=origin))
        made.append(fn.create("Cast", [made[-1].result], {"to": ElemKind.FLOAT32}, name=f"{gather.name}.dq", origin=origin))
        if s2.shape == (k, 1) and k > 1:
            sc = fn.add_constant(np.ascontiguousarray(s2), f"{gather.name}.scale")
            made.append(fn.create("Gather", [sc, ids], {"axis": 0}, name=f"{gather.name}.scale", origin=origin))
            scale: Value = made[-1].result
        else:
            scale = fn.add_constant(np.ascontiguousarray(s2.reshape(n) if s2.shape == (1, n) else s2.reshape(())),
                                    f"{gather.name}.scale")
        made.append(fn.create("Mul", [made[1].result, scale], name=f"{gather.name}.mul", origin=origin))
    assert ctx.backend is not None
    if made[-1].result.type != gather.result.type or not all(ctx.backend.supports(m) for m in made):
        erase_if_dead(fn, *reversed(made))
        return False
    fn.replace_all_uses_with(gather.result, made[-1].result)
    erase_if_dead(fn, gather, *reversed(nodes))
    return True


#: the readers of a dequantized weight this pass rewrites, and how
READERS = {"MatMul": _matmul, "Gemm": _gemm, "Gather": _gather_first}


@graph_pass("keep-compressed-weights")
def keep_compressed_weights(fn: Function, ctx: PassContext) -> bool:
    """MatMul(X, Mul(Cast(Wq), S)) with an 8-bit constant Wq -> DequantMatMul(X, Wq, S) when the backend
    runs it: the weight stays compressed (module doc)."""
    if ctx.backend is None or ctx.options.get("quantizable", False):
        return False
    changed = False
    for node in list(fn.nodes):
        rule = READERS.get(node.kind.name)
        if rule is not None and node.function is fn:
            changed |= rule(fn, node, ctx)
    if changed:
        fn.erase_unused_constants()
    return changed
