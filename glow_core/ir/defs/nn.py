"""Neural-network compute kinds: convolution, pooling, matrix products, no-ops.

Attributes are normalized by the importer: every spatial attribute has one
entry per spatial axis, ``pads`` holds ``[begin..., end...]`` explicitly
(``auto_pad`` is resolved at import), ``kernel_shape`` is explicit for pools.
Layout is NCHW (channels first) with 1, 2 or 3 (or more) spatial axes.
"""

from __future__ import annotations

from collections.abc import Sequence

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req, same_elem
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import Category as C
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import (
    ALL_KINDS,
    FLOAT_KINDS,
    NUMERIC_KINDS,
    ElemKind,
    TensorType,
    broadcast_shapes,
)

#: element kinds of MaxPool (ONNX allows int8/uint8 since opset 12)
MAXPOOL_KINDS = FLOAT_KINDS | {ElemKind.INT8, ElemKind.UINT8}
#: element kinds of MatMul (the ONNX type list)
MATMUL_KINDS = FLOAT_KINDS | {ElemKind.INT32, ElemKind.INT64, ElemKind.UINT32, ElemKind.UINT64}
#: element kinds of Gemm
GEMM_KINDS = MATMUL_KINDS


# -- shared shape helpers ---------------------------------------------------------

def check_spatial_attrs(nd: int, attrs: Attrs, names: Sequence[str] = ("strides", "dilations")) -> None:
    """``strides``/``dilations`` have ``nd`` positive entries, ``pads`` has ``2*nd``."""
    for n in names:
        v = attrs[n]
        if len(v) != nd or any(x < 1 for x in v):
            raise GlowTypeError(f"'{n}' must hold {nd} positive values, got {list(v)}")
    if len(attrs["pads"]) != 2 * nd:
        raise GlowTypeError(f"'pads' must hold {2 * nd} values (begins then ends), got {list(attrs['pads'])}")


def window_out_dim(size: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
                   ceil_mode: bool = False) -> int:
    """Output length of a sliding window along one axis (ONNX Conv/Pool formula).

    With ``ceil_mode`` a last partial window is kept unless it would start in
    the end padding.
    """
    eff = (kernel - 1) * dilation + 1
    span = size + pad_begin + pad_end - eff
    if span < 0:
        raise GlowTypeError(
            f"window of extent {eff} (kernel {kernel}, dilation {dilation}) is larger than the padded input "
            f"({size} + {pad_begin} + {pad_end})"
        )
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def conv_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w = req(types, 0), req(types, 1)
    b = types[2] if len(types) > 2 else None
    elem = same_elem(types, 0, 1, 2)
    check_elems(x, FLOAT_KINDS, "Conv input")
    if x.rank < 3 or w.rank != x.rank:
        raise GlowTypeError(f"Conv needs input [N,C,spatial...] and filter [M,C/group,kernel...] of equal rank >= 3, "
                            f"got {x} and {w}")
    nd = x.rank - 2
    check_spatial_attrs(nd, attrs)
    g = attrs["group"]
    n, c = x.shape[:2]
    m = w.shape[0]
    if g < 1 or c != w.shape[1] * g or m % g:
        raise GlowTypeError(f"channels do not fit group={g}: input has {c} channels, filter is {list(w.shape)}")
    if b is not None and b.shape != (m,):
        raise GlowTypeError(f"bias must have shape [{m}], got {list(b.shape)}")
    pads = attrs["pads"]
    if any(p < 0 for p in pads):
        raise GlowTypeError(f"pads must be >= 0, got {list(pads)}")
    out = [window_out_dim(x.shape[2 + i], w.shape[2 + i], attrs["strides"][i], attrs["dilations"][i], pads[i],
                          pads[nd + i]) for i in range(nd)]
    return [TensorType(elem, (n, m, *out))]


_CONV_ATTRS = (
    attr("strides", A.INTS, doc="one per spatial axis"),
    attr("pads", A.INTS, doc="[begin..., end...] per spatial axis"),
    attr("dilations", A.INTS, doc="one per spatial axis"),
    attr("group", A.INT, 1),
)

define_kind("Conv", inputs=("Input", "Filter", "Bias?"), attrs=_CONV_ATTRS, infer=conv_rule,
            categories=(C.CONVOLUTION, C.PRIMITIVE), elems=FLOAT_KINDS,
            doc="N-d grouped, strided, dilated, zero-padded cross-correlation; Filter [M, C/group, k...].")


def _conv_transpose_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x, w = req(types, 0), req(types, 1)
    b = types[2] if len(types) > 2 else None
    elem = same_elem(types, 0, 1, 2)
    check_elems(x, FLOAT_KINDS, "ConvTranspose input")
    if x.rank < 3 or w.rank != x.rank:
        raise GlowTypeError(f"ConvTranspose needs input [N,C,spatial...] and filter [C,M/group,kernel...] of equal "
                            f"rank >= 3, got {x} and {w}")
    nd = x.rank - 2
    check_spatial_attrs(nd, attrs)
    g = attrs["group"]
    n, c = x.shape[:2]
    if g < 1 or w.shape[0] != c or c % g:
        raise GlowTypeError(f"channels do not fit group={g}: input has {c} channels, filter is {list(w.shape)}")
    m = w.shape[1] * g
    if b is not None and b.shape != (m,):
        raise GlowTypeError(f"bias must have shape [{m}], got {list(b.shape)}")
    op, pads = attrs["output_padding"], attrs["pads"]
    if len(op) != nd or any(v < 0 for v in op):
        raise GlowTypeError(f"'output_padding' must hold {nd} values >= 0, got {list(op)}")
    out = []
    for i in range(nd):
        s, d, k = attrs["strides"][i], attrs["dilations"][i], w.shape[2 + i]
        o = s * (x.shape[2 + i] - 1) + op[i] + (k - 1) * d + 1 - pads[i] - pads[nd + i]
        if o < 0:
            raise GlowTypeError(f"negative output size {o} along spatial axis {i}")
        out.append(o)
    return [TensorType(elem, (n, m, *out))]


define_kind("ConvTranspose", inputs=("Input", "Filter", "Bias?"),
            attrs=_CONV_ATTRS + (attr("output_padding", A.INTS, doc="extra size at the end, per spatial axis"),),
            infer=_conv_transpose_rule, categories=(C.CONVOLUTION,), elems=FLOAT_KINDS,
            doc="Gradient of Conv w.r.t. its input; Filter [C, M/group, k...]. Output position o reads the full "
                "transposed result at o + pads_begin (zero outside it); pads may be negative.")


# -- pooling ----------------------------------------------------------------------

def _pool_shape(x: TensorType, attrs: Attrs) -> tuple[int, ...]:
    if x.rank < 2:
        raise GlowTypeError(f"pooling needs an input [N,C,spatial...], got {x}")
    nd = x.rank - 2
    k = attrs["kernel_shape"]
    if len(k) != nd or any(v < 1 for v in k):
        raise GlowTypeError(f"'kernel_shape' must hold {nd} positive values, got {list(k)}")
    check_spatial_attrs(nd, attrs)
    pads = attrs["pads"]
    if any(p < 0 for p in pads):
        raise GlowTypeError(f"pads must be >= 0, got {list(pads)}")
    out = [window_out_dim(x.shape[2 + i], k[i], attrs["strides"][i], attrs["dilations"][i], pads[i], pads[nd + i],
                          attrs["ceil_mode"]) for i in range(nd)]
    return (*x.shape[:2], *out)


def _pool_rule(allowed: frozenset[ElemKind]):  # type: ignore[no-untyped-def]
    def rule(types: Types, attrs: Attrs) -> list[TensorType]:
        x = req(types, 0)
        check_elems(x, allowed, "pooling input")
        return [TensorType(x.elem, _pool_shape(x, attrs))]

    return rule


def _maxpool_argmax_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    (y,) = _pool_rule(MAXPOOL_KINDS)(types, attrs)
    if attrs["storage_order"] not in (0, 1):
        raise GlowTypeError(f"storage_order must be 0 or 1, got {attrs['storage_order']}")
    return [y, TensorType(ElemKind.INT64, y.shape)]


_POOL_ATTRS = (
    attr("kernel_shape", A.INTS),
    attr("strides", A.INTS),
    attr("pads", A.INTS, doc="[begin..., end...]"),
    attr("dilations", A.INTS),
    attr("ceil_mode", A.BOOL, False, doc="keep a last partial window (not one starting in the end padding)"),
)

define_kind("MaxPool", inputs=("Input",), attrs=_POOL_ATTRS, infer=_pool_rule(MAXPOOL_KINDS),
            categories=(C.POOLING, C.PRIMITIVE), elems=MAXPOOL_KINDS, doc="Max over each window; padding never wins.")
define_kind("MaxPoolWithArgmax", inputs=("Input",), outputs=("Result", "Argmax"),
            attrs=_POOL_ATTRS + (attr("storage_order", A.INT, 0, doc="0 row major, 1 column major"),),
            infer=_maxpool_argmax_rule, categories=(C.POOLING,), elems=MAXPOOL_KINDS | {ElemKind.INT64},
            doc="MaxPool plus the flat index (over the unpadded input, N and C included) of each maximum; "
                "the first maximum in window order wins ties.")
define_kind("AvgPool", inputs=("Input",),
            attrs=_POOL_ATTRS + (attr("count_include_pad", A.BOOL, False),),
            infer=_pool_rule(FLOAT_KINDS), categories=(C.POOLING, C.PRIMITIVE), elems=FLOAT_KINDS,
            doc="Mean over each window. The divisor counts the input elements in the window, plus the explicit "
                "padding when count_include_pad (never the ceil_mode overhang).")
define_kind("LpPool", inputs=("Input",), attrs=_POOL_ATTRS + (attr("p", A.INT, 2),),
            infer=_pool_rule(FLOAT_KINDS), categories=(C.POOLING,), elems=FLOAT_KINDS,
            doc="(sum over the window of |x|^p)^(1/p); padding contributes 0.")


# -- matrix products -----------------------------------------------------------

def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape (1-D operands promoted and their axis dropped)."""
    if not a or not b:
        raise GlowTypeError("MatMul operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise GlowTypeError(f"inner dimensions differ: {list(a)} x {list(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, b = req(types, 0), req(types, 1)
    elem = same_elem(types, 0, 1)
    check_elems(a, MATMUL_KINDS, "MatMul operand")
    return [TensorType(elem, matmul_shape(a.shape, b.shape))]


define_kind("MatMul", inputs=("LHS", "RHS"), infer=_matmul_rule, categories=(C.LINEAR_ALGEBRA, C.PRIMITIVE),
            elems=MATMUL_KINDS, doc="numpy.matmul: batch broadcasting, 1-D operands promoted then squeezed.")


def _gemm_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    a, b = req(types, 0), req(types, 1)
    c = types[2] if len(types) > 2 else None
    elem = same_elem(types, 0, 1, 2)
    check_elems(a, GEMM_KINDS, "Gemm operand")
    if a.rank != 2 or b.rank != 2:
        raise GlowTypeError(f"Gemm needs 2-D A and B, got {a} and {b}")
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    k2, n = b.shape[::-1] if attrs["trans_b"] else b.shape
    if k != k2:
        raise GlowTypeError(f"inner dimensions differ: op(A) is [{m},{k}], op(B) is [{k2},{n}]")
    if c is not None and broadcast_shapes(c.shape, (m, n)) != (m, n):
        raise GlowTypeError(f"C {list(c.shape)} does not broadcast to [{m},{n}]")
    return [TensorType(elem, (m, n))]


define_kind("Gemm", inputs=("A", "B", "C?"),
            attrs=(attr("alpha", A.FLOAT, 1.0), attr("beta", A.FLOAT, 1.0), attr("trans_a", A.BOOL, False),
                   attr("trans_b", A.BOOL, False)),
            infer=_gemm_rule, categories=(C.LINEAR_ALGEBRA,), elems=GEMM_KINDS,
            doc="alpha * op(A) @ op(B) + beta * C (C broadcast to [M,N]; skipped when beta == 0).")


# -- einsum --------------------------------------------------------------------

def parse_einsum(equation: str, shapes: Sequence[tuple[int, ...]]) -> tuple[list[list[str]], list[str], dict[str, int]]:
    """Parse an explicit einsum equation ``"ab,bc->ac"`` (``...`` allowed, broadcasting).

    Returns each operand's labels and the output's labels, with the ellipsis
    expanded into labels ``"...0"``, ``"...1"``, ... (right-aligned), and the
    size of every label.
    """
    eq = equation.replace(" ", "")
    if eq.count("->") != 1:
        raise GlowTypeError(f"einsum equation '{equation}' must be explicit (contain one '->')")
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise GlowTypeError(f"einsum equation '{equation}' names {len(terms)} operands, got {len(shapes)}")
    for t in terms + [out]:
        if t.count("...") > 1 or (t.replace("...", "") and not t.replace("...", "").isalpha()):
            raise GlowTypeError(f"einsum term '{t}' is malformed")
    ell_rank = 0
    for t, s in zip(terms, shapes):
        named = len(t.replace("...", ""))
        if ("..." in t and len(s) < named) or ("..." not in t and len(s) != named):
            raise GlowTypeError(f"einsum term '{t}' does not fit an operand of rank {len(s)}")
        if "..." in t:
            ell_rank = max(ell_rank, len(s) - named)
    ell = [f"...{i}" for i in range(ell_rank)]

    def labels(term: str, rank: int) -> list[str]:
        head, dots, tail = term.partition("...")
        if not dots:
            return list(term)
        r = rank - len(head) - len(tail)
        return list(head) + ell[ell_rank - r:] + list(tail)

    sizes: dict[str, int] = {}
    expanded: list[list[str]] = []
    for t, s in zip(terms, shapes):
        labs = labels(t, len(s))
        for lab, d in zip(labs, s):
            old = sizes.get(lab)
            if lab.startswith("..."):  # ellipsis dimensions broadcast
                if old is not None and old != 1 and d != 1 and old != d:
                    raise GlowTypeError(f"einsum: '...' dimensions {old} and {d} do not broadcast")
                sizes[lab] = d if old is None or old == 1 else old
            elif old is not None and old != d:
                raise GlowTypeError(f"einsum: label '{lab}' has sizes {old} and {d}")
            else:
                sizes[lab] = d
        expanded.append(labs)
    out_labels = labels(out, len(out.replace("...", "")) + ell_rank)
    for lab in out_labels:
        if lab not in sizes:
            raise GlowTypeError(f"einsum output label '{lab}' appears in no operand")
    if len(set(out_labels)) != len(out_labels):
        raise GlowTypeError(f"einsum output '{out}' repeats a label")
    if ell_rank and "..." not in out:
        raise GlowTypeError("einsum: '...' in the operands must appear in the explicit output")
    return expanded, out_labels, sizes


def _einsum_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    present = [t for t in types if t is not None]
    if not present:
        raise GlowTypeError("Einsum needs at least one operand")
    elem = same_elem(types, *range(len(types)))
    check_elems(present[0], NUMERIC_KINDS, "Einsum operand")
    _, out, sizes = parse_einsum(attrs["equation"], [t.shape for t in present])
    return [TensorType(elem, tuple(sizes[ch] for ch in out))]


define_kind("Einsum", inputs=("Inputs*",), attrs=(attr("equation", A.STRING, doc="explicit, with '->'"),),
            infer=_einsum_rule, categories=(C.LINEAR_ALGEBRA,), elems=NUMERIC_KINDS,
            doc="Einstein summation over an explicit equation.")


# -- inference no-ops -------------------------------------------------------------

def _same(types: Types, attrs: Attrs) -> list[TensorType]:
    return [req(types, 0)]


define_kind("Identity", inputs=("Input",), infer=_same, categories=(C.NO_OP,), elems=ALL_KINDS,
            doc="Returns its operand.")
define_kind("Dropout", inputs=("Input",), infer=_same, categories=(C.NO_OP,), elems=ALL_KINDS,
            doc="Dropout at inference: returns its operand.")
