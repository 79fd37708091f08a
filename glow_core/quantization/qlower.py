"""Lowering of the typed quantized kinds onto the ONNX-style quantized primitives.

A backend then implements a few quantized kernels only: ``QuantizeLinear``,
``DequantizeLinear``, ``QLinearConv`` (QConv, and QMatMul as a 1x1 convolution,
which carries the int32 bias and per-channel scales) and 8-bit ``MaxPool``;
Rescale, QAdd, QMul, QAvgPool and QClip become Cast / float32 arithmetic / Round /
Max / Min, in the order the reference kernels compute, so the result is bit for bit
the same. Typed values (``int8q`` / ``uint8q``) become plain ``int8`` / ``uint8``;
data movement on them is rebuilt on the plain values.

This is a whole-function rewrite (types change, so it is not a per-node lowering
rule): :func:`lower_quantized`. ``glow_core.compile`` runs it when the backend
does not support every typed quantized node; the ordinary lowering then takes the
ONNX-style kinds further for backends without native kernels for them.

``QLookup`` (a 256-entry table of one 8-bit operand) becomes a ``Gather`` of its table, or, for a backend
that runs ``QLookup`` on plain codes (``native_lookup``: the cpu backend), stays a QLookup on the plain
codes; Rescale is then a table too (its kernel evaluated on the 256 codes: the same bits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from glow_core.errors import GlowError
from glow_core.ir.defs.quant import TYPED_QUANT_KINDS, qbounds
from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_core.reference import run_kernel
from glow_core.reference.kernels.quant import multiplier

E = ElemKind
F32 = E.FLOAT32
_PLAIN = {E.INT8Q: E.INT8, E.UINT8Q: E.UINT8}


class _Emitter:
    """Emits plain nodes before ``node`` (named after it); ``native_lookup``: the plain code kinds the backend
    runs QLookup on."""

    def __init__(self, fn: Function, node: Node, native_lookup: frozenset[ElemKind] = frozenset()) -> None:
        self.fn, self.node, self.native_lookup = fn, node, native_lookup

    def op(self, kind: str, inputs: list[Value | None], **attrs: object) -> Value:
        with self.fn.inserting_before(self.node):
            n = self.fn.create(kind, inputs, attrs, name=f"{self.node.name}.{kind.lower()}", origin=self.node.origin)
        return n.outputs[0]

    def const(self, value: object, dtype: object) -> Value:
        return self.fn.add_constant(np.ascontiguousarray(np.asarray(value, dtype)), f"{self.node.name}.const")

    def scalar(self, value: float, rank: int, dtype: object = np.float32) -> Value:
        return self.const(np.full((1,) * rank, value, dtype), dtype)

    def centered(self, q: Value, offset: float) -> Value:
        """float32(q - offset), exact."""
        v = self.op("Cast", [q], to=F32)
        return v if offset == 0 else self.op("Sub", [v, self.scalar(offset, q.type.rank)])

    def requantize(self, v: Value, t: TensorType) -> Value:
        """saturate(Round(v) + offset) cast to the plain kind of ``t``."""
        r = v.type.rank
        v = self.op("Round", [v])
        if t.offset:
            v = self.op("Add", [v, self.scalar(float(t.offset), r)])
        lo, hi = qbounds(t.elem)
        v = self.op("Min", [self.op("Max", [v, self.scalar(lo, r)]), self.scalar(hi, r)])
        return self.op("Cast", [v], to=_PLAIN[t.elem])

    def qparams(self, t: TensorType) -> tuple[Value, Value]:
        return self.const(np.float32(t.scale), np.float32), self.const(t.offset, _PLAIN[t.elem].dtype)


Rule = Callable[[_Emitter, Node, list[Value]], Value]


def _quantize(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    s, z = e.qparams(node.outputs[0].type)
    return e.op("QuantizeLinear", [xs[0], s, z], elem=_PLAIN[node.outputs[0].type.elem])


def _dequantize(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    s, z = e.qparams(node.inputs[0].type)  # type: ignore[union-attr]
    return e.op("DequantizeLinear", [xs[0], s, z], elem=F32)


def _rescale(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    """A lookup of its 256 codes when the backend runs QLookup (the same bits, one byte read per element),
    else the float32 arithmetic of the kernel."""
    if {_PLAIN[node.inputs[0].type.elem], _PLAIN[node.outputs[0].type.elem]} <= e.native_lookup:  # type: ignore
        t = node.outputs[0].type
        lo, hi = qbounds(node.inputs[0].type.elem)  # type: ignore[union-attr]
        codes = np.arange(lo, hi + 1).astype(node.inputs[0].type.dtype)  # type: ignore[union-attr]
        table = run_kernel("Rescale", node.attrs, [codes], [t.with_shape((256,))], f"table of {node.name}")[0]
        return _lookup(e, xs[0], e.const(table, _PLAIN[t.elem].dtype), node.inputs[0].type.elem)  # type: ignore
    s, o = node.attrs["in_params"]
    m = multiplier(s, node.attrs["scale"])
    v = e.op("Mul", [e.centered(xs[0], o), e.scalar(float(m), xs[0].type.rank)])
    return e.requantize(v, node.outputs[0].type)


def _qclip(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    dt, r = xs[0].type.dtype, xs[0].type.rank
    return e.op("Min", [e.op("Max", [xs[0], e.scalar(node.attrs["lo"], r, dt)]), e.scalar(node.attrs["hi"], r, dt)])


def _qlinear_conv(e: _Emitter, x: Value, tin: TensorType, w: Value, ws: Value, bias: Value | None, t: TensorType,
                  attrs: Mapping[str, object]) -> Value:
    m = w.type.shape[0]
    xs, xz = e.qparams(tin)
    ys, yz = e.qparams(t)
    wz = e.const(np.zeros(ws.type.size, np.int8), np.int8)  # symmetric weights; per channel or per tensor
    return e.op("QLinearConv", [x, xs, xz, w, ws, wz, ys, yz, bias], **attrs)


def _qconv(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    attrs = {k: node.attrs[k] for k in ("strides", "pads", "dilations", "group")}
    return _qlinear_conv(e, xs[0], node.inputs[0].type, xs[1], xs[2], xs[3] if len(xs) > 3 else None,  # type: ignore
                         node.outputs[0].type, attrs)


def _qmatmul(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    """(LHS [..., K]) x (W [K, N]) as QLinearConv of [R, K, 1, 1] and [N, K, 1, 1]."""
    a, w = xs[0], xs[1]
    k, n = w.type.shape
    rows = a.type.size // k
    x4 = e.op("Reshape", [a], shape=(rows, k, 1, 1))
    if isinstance(w, Constant):  # a constant filter at once: backends' fused int8 kernels want one
        w4 = e.const(np.ascontiguousarray(np.asarray(w.payload).T).reshape(n, k, 1, 1), w.payload.dtype)
    else:
        w4 = e.op("Reshape", [e.op("Transpose", [w], perm=(1, 0))], shape=(n, k, 1, 1))
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    y = _qlinear_conv(e, x4, node.inputs[0].type, w4, xs[2], xs[3] if len(xs) > 3 else None,  # type: ignore
                      node.outputs[0].type, attrs)
    return e.op("Reshape", [y], shape=node.outputs[0].type.shape)


def _qadd(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    sa, oa, sb, ob = node.attrs["in_params"]
    so = node.attrs["scale"]
    r = node.outputs[0].type.rank
    ta = e.op("Mul", [e.centered(xs[0], oa), e.scalar(float(multiplier(sa, so)), r)])
    tb = e.op("Mul", [e.centered(xs[1], ob), e.scalar(float(multiplier(sb, so)), r)])
    return e.requantize(e.op("Add", [ta, tb]), node.outputs[0].type)


def _qmul(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    sa, oa, sb, ob = node.attrs["in_params"]
    r = node.outputs[0].type.rank
    m = np.float32(sa) * np.float32(sb) / np.float32(node.attrs["scale"])
    prod = e.op("Mul", [e.centered(xs[0], oa), e.centered(xs[1], ob)])
    return e.requantize(e.op("Mul", [prod, e.scalar(float(m), r)]), node.outputs[0].type)


_POOL = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode")


def _qmaxpool(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    return e.op("MaxPool", [xs[0]], **{k: node.attrs[k] for k in _POOL})


def _qavgpool(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    s, o = node.attrs["in_params"]
    attrs = {k: node.attrs[k] for k in _POOL + ("count_include_pad",)}
    mean = e.op("AvgPool", [e.centered(xs[0], o)], **attrs)
    v = e.op("Mul", [mean, e.scalar(float(multiplier(s, node.attrs["scale"])), mean.type.rank)])
    return e.requantize(v, node.outputs[0].type)


def _lookup(e: _Emitter, x: Value, table: Value, elem: ElemKind) -> Value:
    """``table[x - qmin]`` for codes ``x`` of ``elem``: a QLookup on the plain codes when the backend runs one
    (``e.native_lookup``), else Gather(table, int32(x) - qmin), which every backend's Gather runs."""
    if {_PLAIN[elem], table.type.elem} <= e.native_lookup:
        return e.op("QLookup", [x, table])
    lo, _ = qbounds(elem)
    idx = e.op("Cast", [x], to=E.INT32)
    if lo:
        idx = e.op("Add", [idx, e.scalar(-lo, idx.type.rank, np.int32)])
    return e.op("Gather", [table, idx], axis=0)


def _qlookup(e: _Emitter, node: Node, xs: list[Value]) -> Value:
    return _lookup(e, xs[0], xs[1], node.inputs[0].type.elem)  # type: ignore[union-attr]


#: typed kind -> rule emitting its plain equivalent
QLOWERINGS: Mapping[str, Rule] = {
    "Quantize": _quantize, "Dequantize": _dequantize, "Rescale": _rescale, "QClip": _qclip, "QConv": _qconv,
    "QMatMul": _qmatmul, "QAdd": _qadd, "QMul": _qmul, "QMaxPool": _qmaxpool, "QAvgPool": _qavgpool,
    "QLookup": _qlookup,
}
assert set(QLOWERINGS) == set(TYPED_QUANT_KINDS)


def _plain_value(fn: Function, v: Value, plain: dict[int, Value]) -> Value:
    """The plain replacement of ``v``: a rewritten result, a typed constant's plain copy, or ``v`` itself."""
    if id(v) in plain:
        return plain[id(v)]
    if isinstance(v, Constant) and v.type.elem.is_quantized:
        plain[id(v)] = fn.add_constant(np.asarray(v.payload), f"{v.name}.plain",
                                       type=TensorType(_PLAIN[v.type.elem], v.type.shape))
        return plain[id(v)]
    return v


def lower_quantized(fn: Function, native_lookup: frozenset[ElemKind] = frozenset()) -> int:
    """Rewrite every typed quantized node and every value of a quantized type; returns the nodes rewritten.

    ``native_lookup``: the plain code kinds (int8, uint8) the backend runs ``QLookup`` on; a QLookup or
    Rescale of such codes then becomes that (else a Gather of the table, and float32 arithmetic).
    """
    plain: dict[int, Value] = {}  # id(old typed value) -> its plain replacement
    old_nodes: list[Node] = []
    for node in list(fn.nodes):
        typed = node.kind.name in QLOWERINGS or any(
            v is not None and v.type.elem.is_quantized for v in list(node.inputs) + list(node.outputs))
        if not typed:
            continue
        xs = [_plain_value(fn, v, plain) if v is not None else None for v in node.inputs]
        e = _Emitter(fn, node, native_lookup)
        rule = QLOWERINGS.get(node.kind.name)
        if rule is not None:
            outs = [rule(e, node, xs)]  # type: ignore[arg-type]
        else:  # data movement on typed values: the same kind on the plain values
            with fn.inserting_before(node):
                outs = list(fn.create(node.kind.name, xs, dict(node.attrs), name=f"{node.name}.plain",
                                      origin=node.origin).outputs)
        for old, new in zip(node.outputs, outs):
            if old.type.elem.is_quantized:
                plain[id(old)] = new
            else:
                fn.replace_all_uses_with(old, new)
        old_nodes.append(node)
    for node in reversed(old_nodes):
        for o in node.outputs:
            if fn.is_output(o):
                raise GlowError(f"a quantized value %{o.name} is a graph output; outputs must be dequantized")
        fn.erase_node(node)
    fn.erase_unused_constants()
    return len(old_nodes)
