"""Conversion: a profiled float graph -> islands of typed quantized computation.

Every node of a kind in :data:`CONVERTERS` whose float values have calibrated
parameters (and which the config does not keep float) is replaced, in place, by
``Quantize`` on its float operands -> the typed quantized kind -> ``Dequantize``
of its result. The quantization passes (:mod:`.qpasses`) then join the islands:
``Dequantize -> Quantize`` pairs vanish or become ``Rescale``, rescales fold
into their producers, Dequantize moves past data movement, clips implied by
saturation disappear.

Islands start at the compute kinds (Conv, MatMul, Gemm with constant weights):
the other kinds (element-wise Add / Mul, Relu / Clip, pooling, Concat) are
converted only when every non-constant operand comes from a node converted
before, so they extend an island and never open a new Quantize / Dequantize
pair of their own (which would cost precision for no integer compute: a
transformer's attention-mask addition or LayerNorm's scale, say). An element-wise
node no converter takes (an activation: Sigmoid, SiLU as ``x * Sigmoid(x)``,
HardSwish, GELU, Tanh, ...) of one island value becomes a 256-entry ``QLookup``
(:mod:`.tables`), so the island goes on through it; Split and Gather of an island
value run on the integers.

Weights (constant filters / right-hand sides) become symmetric int8 with one
scale per output channel (``per_channel``; else one per tensor) passed as a
float32 operand; biases become int32 at scale ``s_in * s_w[c]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from glow_core.ir.defs.quant import params_of
from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.kinds import Category
from glow_core.ir.types import ElemKind, TensorType
from glow_core.passes.fusion import QUANTIZABLE_ACTIVATIONS
from glow_core.quantization.calibration import (
    CalibrationError,
    QuantParams,
    calibrate,
    estimated_sqnr,
    params_for_range,
)
from glow_core.quantization.config import QuantizationConfig, QuantizationConfigError
from glow_core.quantization.qpasses import MOVEMENT
from glow_core.quantization.tables import absorbed, convert_movement, convert_table

E = ElemKind
_QELEM = {"int8": E.INT8Q, "uint8": E.UINT8Q}
#: the kinds an island starts at (with a constant weight); the others only extend an island
ISLAND_OPENERS = frozenset({"Conv", "FusedConv", "MatMul", "FusedMatMul", "Gemm"})
AUTO_REASON = "--auto-keep-float"


@dataclass
class Conversion:
    """What a conversion did: quantized node names by kind, nodes kept float (and why)."""

    quantized: dict[str, list[str]] = field(default_factory=dict)
    kept_float: dict[str, str] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.quantized.values())

    @property
    def auto_kept_float(self) -> dict[str, str]:
        """The nodes ``auto_keep_float`` kept float, with the reason (the value and its estimated SQNR)."""
        return {n: why for n, why in self.kept_float.items() if why.startswith(AUTO_REASON)}


class Converter:
    """State of one conversion: calibrated parameters per value name, the config, the function."""

    def __init__(self, fn: Function, params: Mapping[str, QuantParams], cfg: QuantizationConfig,
                 expose: str | None = None) -> None:
        self.fn, self.params, self.cfg, self.expose = fn, params, cfg, expose
        self.node: Node | None = None
        #: Dequantize results that replaced a float value -> that value's (profiled) name
        self.alias: dict[str, str] = {}
        #: float values an island reaches: converted results and data movement of them
        self.island: set[str] = set()
        #: float nodes a lookup table took in (``tables.convert_table``): name -> kind
        self.tabled: dict[str, str] = {}
        #: parameters chosen at conversion over the profiled ones (a table's result: the range it produces)
        self.ranged: dict[str, QuantParams] = {}
        #: the kinds with a converter (what may take a value on the integers)
        self.integer_kinds = frozenset(CONVERTERS)

    # -- types --------------------------------------------------------------------------------------
    def qtype(self, v: Value) -> TensorType | None:
        """The typed quantized type of float value ``v`` (profiled, or a constant's own range), or None."""
        if v.type.elem != E.FLOAT32:
            return None
        key = self.alias.get(v.name, v.name)
        p = self.ranged.get(key) or self.params.get(key)
        if p is None and isinstance(v, Constant):
            data = np.asarray(v.payload, np.float64)
            if data.size == 0 or not np.isfinite(data).all():
                return None
            p = params_for_range(float(data.min()), float(data.max()), self.cfg)
        if p is None:
            return None
        return TensorType(_QELEM[p.dtype], v.type.shape, p.scale, p.offset)

    def out_attrs(self, t: TensorType) -> dict[str, object]:
        return {"elem": t.elem, "scale": t.scale, "offset": t.offset}

    def in_island(self, v: Value | None) -> bool:
        """``v`` is a constant or the (dequantized) result of a node converted before."""
        return isinstance(v, Constant) or (v is not None and v.name in self.island)

    # -- emitting -----------------------------------------------------------------------------------
    def emit(self, kind: str, inputs: list[Value | None], **attrs: object) -> Value:
        node = self.node
        assert node is not None
        with self.fn.inserting_before(node):
            n = self.fn.create(kind, inputs, attrs, name=f"{node.name}.{kind.lower()}", origin=node.origin)
        return n.outputs[0]

    def quantize(self, v: Value, t: TensorType) -> Value:
        if isinstance(v, Constant):  # a typed constant, quantized as the Quantize kernel would
            data = np.asarray(v.payload, np.float32)
            q = np.clip(np.rint(data / np.float32(t.scale)) + np.float32(t.offset), *((0, 255) if t.elem == E.UINT8Q
                                                                                     else (-128, 127)))
            return self.fn.add_constant(q.astype(t.dtype), f"{v.name}.q", type=t)
        return self.emit("Quantize", [v], **self.out_attrs(t))

    def dequantize(self, q: Value) -> Value:
        return self.emit("Dequantize", [q], in_params=params_of(q.type))

    def const(self, data: np.ndarray, what: str) -> Constant:
        assert self.node is not None
        return self.fn.add_constant(np.ascontiguousarray(data), f"{self.node.name}.{what}")

    def finish(self, q: Value) -> None:
        """Replace the node's float result by ``Dequantize(q)`` and erase the node."""
        self.finish_all([q])

    def finish_all(self, qs: list[Value]) -> None:
        """Replace the node's float results by ``Dequantize`` of ``qs`` (one each) and erase the node."""
        node = self.node
        assert node is not None and len(qs) == len(node.outputs)
        for old, q in zip(node.outputs, qs):
            d = self.dequantize(q)
            name = self.alias[d.name] = self.alias.get(old.name, old.name)
            self.island.add(d.name)
            self.fn.replace_all_uses_with(old, d)
            if self.expose is not None:
                self.fn.set_output(self.expose + name, d)
        self.fn.erase_node(node)

    def clip(self, q: Value, lo: float, hi: float) -> Value:
        """QClip of the real bounds [lo, hi] in ``q``'s type (no node when saturation already implies them)."""
        t = q.type
        qmin, qmax = (0, 255) if t.elem == E.UINT8Q else (-128, 127)
        # quantizing is monotone, so clip(quantize(x)) == quantize(clip(x)) with the bounds quantized alike
        qlo = qmin if lo == -np.inf else int(np.clip(np.rint(np.float32(lo) / np.float32(t.scale)) + t.offset,
                                                      qmin, qmax))
        qhi = qmax if hi == np.inf else int(np.clip(np.rint(np.float32(hi) / np.float32(t.scale)) + t.offset,
                                                    qmin, qmax))
        if qlo <= qmin and qhi >= qmax:
            return q
        return self.emit("QClip", [q], lo=qlo, hi=min(max(qhi, qlo), qmax))


# -- weights ---------------------------------------------------------------------------------------------

def quantize_weight(w: np.ndarray, axis: int, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 (levels -127..127) per output channel along ``axis``: (int8 weight, float32 scales)."""
    w = np.asarray(w, np.float64)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(moved).max(axis=1) if moved.shape[1] else np.zeros(moved.shape[0])
    if not per_channel:
        amax = np.full_like(amax, amax.max() if amax.size else 0.0)
    scales = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scales.astype(np.float64).reshape(shape)), -127, 127).astype(np.int8)
    return q, (scales if per_channel else scales[:1])


def quantize_bias(bias: np.ndarray | None, s_in: float, scales: np.ndarray, n: int) -> np.ndarray:
    """int32 bias at scale ``s_in * s_w[c]`` (zeros without a bias)."""
    if bias is None:
        return np.zeros(n, np.int32)
    s = np.float64(s_in) * np.broadcast_to(scales.astype(np.float64), (n,))
    return np.clip(np.rint(np.asarray(bias, np.float64).reshape(n) / s), -(2 ** 31), 2 ** 31 - 1).astype(np.int32)


# -- converters ------------------------------------------------------------------------------------------

def _const(v: Value | None) -> np.ndarray | None:
    return np.asarray(v.payload) if isinstance(v, Constant) and v.type.elem == E.FLOAT32 else None


def _activation(c: Converter, q: Value, attrs: Mapping[str, object]) -> Value:
    act = attrs.get("activation", "none")
    if act == "relu":
        return c.clip(q, 0.0, np.inf)
    if act == "clip":
        return c.clip(q, float(attrs["clip_min"]), float(attrs["clip_max"]))  # type: ignore[arg-type]
    return q


def _conv(c: Converter, node: Node) -> bool:
    x, w, b = node.inputs[0], node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else None
    if len(node.inputs) > 3 and node.inputs[3] is not None:  # a FusedConv's residual: no int8 form, stays float
        return False
    if node.attrs.get("activation", "none") not in QUANTIZABLE_ACTIVATIONS:
        return False
    tx, ty, wd = c.qtype(x), c.qtype(node.outputs[0]), _const(w)
    bd = _const(b)
    if tx is None or ty is None or wd is None or (b is not None and bd is None):
        return False
    wq, scales = quantize_weight(wd, 0, c.cfg.per_channel)
    m = wd.shape[0]
    qx = c.quantize(x, tx)
    attrs = {k: node.attrs[k] for k in ("strides", "pads", "dilations", "group")}
    y = c.emit("QConv", [qx, c.const(wq, "qfilter"), c.const(scales, "qscale"),
                         c.const(quantize_bias(bd, tx.scale, scales, m), "qbias")],
               **attrs, in_params=params_of(tx), **c.out_attrs(ty))
    c.finish(_activation(c, y, node.attrs))
    return True


def _matmul_weight(node: Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(weight [K, N], bias [N] or None) of a MatMul / FusedMatMul / Gemm with constant operands."""
    kind = node.kind.name
    w = _const(node.inputs[1])
    if w is None or w.ndim != 2:
        return None
    bias_v = node.inputs[2] if len(node.inputs) > 2 else None
    bias = _const(bias_v)
    if bias_v is not None and bias is None:
        return None
    n = w.shape[0] if kind == "Gemm" and node.attrs["trans_b"] else w.shape[1]
    if kind == "Gemm":
        if node.attrs["trans_a"]:
            return None
        w = (w.T if node.attrs["trans_b"] else w) * np.float64(node.attrs["alpha"])
        bias = None if bias is None else bias * np.float64(node.attrs["beta"])
    if bias is not None:
        if bias.size not in (1, n) or (bias.ndim and bias.shape[-1] not in (1, n)) or \
                any(d != 1 for d in bias.shape[:-1]):
            return None
        bias = np.broadcast_to(bias.reshape(-1), (n,)).astype(np.float64)
    return np.asarray(w, np.float64), bias


def _matmul(c: Converter, node: Node) -> bool:
    got = _matmul_weight(node)
    x = node.inputs[0]
    tx, ty = c.qtype(x), c.qtype(node.outputs[0])
    if got is None or tx is None or ty is None or x.type.rank < 2 or \
            node.attrs.get("activation", "none") not in QUANTIZABLE_ACTIVATIONS:
        return False
    w, bias = got
    wq, scales = quantize_weight(w, 1, c.cfg.per_channel)
    y = c.emit("QMatMul", [c.quantize(x, tx), c.const(wq, "qweight"), c.const(scales, "qscale"),
                           c.const(quantize_bias(bias, tx.scale, scales, w.shape[1]), "qbias")],
               in_params=params_of(tx), **c.out_attrs(ty))
    c.finish(_activation(c, y, node.attrs))
    return True


def _binary(kind: str) -> Callable[[Converter, Node], bool]:
    def rule(c: Converter, node: Node) -> bool:
        a, b = node.inputs
        ta, tb, ty = c.qtype(a), c.qtype(b), c.qtype(node.outputs[0])
        if ta is None or tb is None or ty is None or not (c.in_island(a) and c.in_island(b)):
            return False
        qa, qb = c.quantize(a, ta), c.quantize(b, tb)
        c.finish(c.emit(kind, [qa, qb], in_params=params_of(ta, tb), **c.out_attrs(ty)))
        return True

    return rule


def _relu(c: Converter, node: Node) -> bool:
    ty = c.qtype(node.outputs[0])
    if ty is None or not c.in_island(node.inputs[0]):
        return False
    c.finish(c.clip(c.quantize(node.inputs[0], ty), 0.0, np.inf))
    return True


def _clip_node(c: Converter, node: Node) -> bool:
    ty = c.qtype(node.outputs[0])
    bounds = [(_const(v) if v is not None else None) for v in node.inputs[1:3]]
    if ty is None or not c.in_island(node.inputs[0]) or \
            any(v is not None and b is None for v, b in zip(node.inputs[1:3], bounds)):
        return False
    lo = float(bounds[0].reshape(())) if bounds[0] is not None else -np.inf
    hi = float(bounds[1].reshape(())) if len(bounds) > 1 and bounds[1] is not None else np.inf
    c.finish(c.clip(c.quantize(node.inputs[0], ty), lo, hi))
    return True


def _clip_by_constant(c: Converter, node: Node) -> bool:
    """Max(x, k) / Min(x, k) with a scalar constant ``k`` (a lowered Clip or Relu): a clip on the integers."""
    a, b = node.inputs
    x, k = (a, b) if isinstance(b, Constant) else (b, a)
    ty = c.qtype(node.outputs[0])
    if (not isinstance(k, Constant) or k.type.size != 1 or isinstance(x, Constant) or x is None or ty is None
            or x.type.shape != node.outputs[0].type.shape or not c.in_island(x)):
        return False
    bound = float(np.asarray(k.payload, np.float64).reshape(()))
    lo, hi = (bound, np.inf) if node.kind.name == "Max" else (-np.inf, bound)
    c.finish(c.clip(c.quantize(x, ty), lo, hi))
    return True


_POOL = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode")


def _maxpool(c: Converter, node: Node) -> bool:
    tx = c.qtype(node.inputs[0])
    if tx is None or not c.in_island(node.inputs[0]):
        return False
    c.finish(c.emit("QMaxPool", [c.quantize(node.inputs[0], tx)], **{k: node.attrs[k] for k in _POOL}))
    return True


def _avgpool(c: Converter, node: Node) -> bool:
    tx, ty = c.qtype(node.inputs[0]), c.qtype(node.outputs[0])
    if tx is None or ty is None or not c.in_island(node.inputs[0]):
        return False
    attrs = {k: node.attrs[k] for k in _POOL + ("count_include_pad",)}
    c.finish(c.emit("QAvgPool", [c.quantize(node.inputs[0], tx)], **attrs, in_params=params_of(tx),
                    **c.out_attrs(ty)))
    return True


def _concat(c: Converter, node: Node) -> bool:
    ty = c.qtype(node.outputs[0])
    if ty is None or any(v is None or v.type.elem != E.FLOAT32 or not c.in_island(v) for v in node.inputs):
        return False
    qs = [c.quantize(v, ty.with_shape(v.type.shape)) for v in node.inputs if v is not None]
    c.finish(c.emit("Concat", list(qs), axis=node.attrs["axis"]))
    return True


ConvertFn = Callable[[Converter, Node], bool]
#: node kind -> converter (returns False when the node stays float); an element-wise node that its
#: converter declines (or that has none) may still become a lookup table (``tables.convert_table``)
CONVERTERS: Mapping[str, ConvertFn] = {
    "Conv": _conv, "FusedConv": _conv,
    "MatMul": _matmul, "FusedMatMul": _matmul, "Gemm": _matmul,
    "Add": _binary("QAdd"), "Mul": _binary("QMul"),
    "Relu": _relu, "Clip": _clip_node,
    "MaxPool": _maxpool, "AvgPool": _avgpool, "Concat": _concat,
    "Split": convert_movement, "Gather": convert_movement, "Max": _clip_by_constant, "Min": _clip_by_constant,
}


def _rule(node: Node) -> ConvertFn | None:
    """The converter of ``node``: its kind's, then (element-wise kinds) a lookup table; an element-wise node a
    later table takes in stays float (``tables.absorbed``)."""
    rule = CONVERTERS.get(node.kind.name)
    if not node.kind.is_(Category.ELEMENTWISE) or node.kind.is_(Category.QUANTIZATION):
        return rule
    first = rule or (lambda c, n: False)
    return lambda c, n: not absorbed(c, n) and (first(c, n) or convert_table(c, n))


def _why_float(c: Converter, node: Node, low_sqnr: Mapping[str, float], cfg: QuantizationConfig) -> str:
    """Why ``node`` (whose converter declined it) stays float."""
    operands = [v for v in node.inputs if v is not None and not isinstance(v, Constant)]
    if node.kind.name not in ISLAND_OPENERS and not all(c.in_island(v) for v in operands):
        return "outside the int8 islands (an operand does not come from a converted node)"
    low = [(v.name, low_sqnr[v.name]) for v in [*operands, *node.outputs] if v.name in low_sqnr]
    if low:
        name, db = min(low, key=lambda x: x[1])
        return f"{AUTO_REASON}: '{name}' would have an int8 SQNR of {db:.1f} dB < {cfg.auto_keep_float:g}"
    return "no calibrated range or non-constant weight"


def calibrate_all(records: Mapping[str, object],
                  cfg: QuantizationConfig) -> tuple[dict[str, QuantParams], dict[str, float]]:
    """(parameters by value name, the values ``cfg.auto_keep_float`` left float -> their estimated SQNR in dB)."""
    params: dict[str, QuantParams] = {}
    for name, rec in records.items():
        try:
            params[name] = calibrate(rec, cfg, name)  # type: ignore[arg-type]
        except CalibrationError:
            continue
    if cfg.auto_keep_float is None:
        return params, {}
    sqnr = {n: estimated_sqnr(records[n], p) for n, p in params.items()}  # type: ignore[arg-type]
    low = {n: db for n, db in sqnr.items() if db < cfg.auto_keep_float}
    return {n: p for n, p in params.items() if n not in low}, low


def convert(fn: Function, params: Mapping[str, QuantParams], cfg: QuantizationConfig,
            expose: str | None = None, low_sqnr: Mapping[str, float] | None = None) -> Conversion:
    """Rewrite ``fn`` in place into typed quantized islands (see the module doc).

    ``expose`` (a prefix): also make every converted node's dequantized result a graph output named
    ``expose + <float value name>`` (the quantization report compares them with the float values).
    ``low_sqnr``: the values ``cfg.auto_keep_float`` left without parameters, with their estimated
    SQNR, to say why a node that would quantize one stays float.
    """
    if cfg.precision != "int8":
        raise QuantizationConfigError(f"conversion supports precision int8, not {cfg.precision}",
                                      hint="use precision='int8' (int16 is for profiling and calibration only)")
    c = Converter(fn, params, cfg, expose)
    done = Conversion()
    for node in list(fn.nodes):
        rule = _rule(node)
        if node.kind.name in MOVEMENT and node.inputs and c.in_island(node.inputs[0]):
            c.island.update(o.name for o in node.outputs)  # the quantization passes move it onto the integers
        if rule is None or node.function is not fn:
            continue
        names = {node.name, node.origin} | {o.name for o in node.outputs}
        if node.kind.name in cfg.keep_float_kinds or names & cfg.keep_float_names:
            done.kept_float[node.name] = "--keep-float"
            continue
        c.node = node
        if rule(c, node):
            done.quantized.setdefault(node.kind.name, []).append(node.name)
        elif node.kind.name in CONVERTERS:  # (a kind without a converter that no table took is not reported)
            done.kept_float[node.name] = _why_float(c, node, low_sqnr or {}, cfg)
    for name, kind in c.tabled.items():  # taken into a lookup table by a later node
        done.kept_float.pop(name, None)
        done.quantized.setdefault(kind, []).append(name)
    return done
