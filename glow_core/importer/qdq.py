"""The QDQ import fold: pre-quantized ONNX models onto the integer kinds, before import.

Static quantizers (onnxruntime's ``quantize_static`` in QDQ format, and the
exporters that follow it) write a quantized model as float operators wrapped in
``DequantizeLinear`` / ``QuantizeLinear`` pairs. Imported literally, every
product would run in float on dequantized weights. This fold rewrites the
patterns onto the ONNX integer operators, which lower onto glow's int8
primitives (IntConv / IntMatMul / Requantize, fused on backends with int8 kernels):

- ``DQ(x), DQ(W), [DQ(bias) | float bias] -> Conv -> [Relu] -> Q`` becomes
  ``QLinearConv`` (the bias re-expressed as int32 in units of ``x_scale *
  W_scale``: taken as is when the model's bias scale is exactly that, rounded
  half to even otherwise); a Relu between becomes ``Max(y, y_zero_point)`` on
  the quantized result (Q is monotonic and Q(0) is the zero point);
- ``DQ(a), DQ(B) -> MatMul -> Q`` becomes ``QLinearMatMul``;
- ``DQ(A), DQ(B), [DQ(C) | float C] -> Gemm -> [Relu] -> Q`` (``transA = 0``,
  ``alpha = 1``, ``beta = 1`` with a C) becomes a 1x1 ``QLinearConv`` over the
  rows of A (``Reshape`` to ``[P, K, 1, 1]`` and back), so the bias stays on
  the int8 path as a Conv's does;
- ``DQ -> MaxPool / Reshape / Flatten / Transpose / Squeeze / Unsqueeze -> Q``
  with the same scale and zero point on both sides runs the operator on the
  integers directly (these commute with the monotonic affine map, exactly).

Scales and zero points must be initializers; W must be an integer initializer;
the intermediate float values must feed nothing else and be no graph output.
Anything else is left as it is (and runs in float, as written). The integer
form computes ``requant((x - xz) * (W - wz) + bias)`` in int32 where the QDQ
form computes in float: the two differ by at most one unit in the last place
of the quantized result, as onnxruntime's own QDQ fusion does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

_INT8 = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
#: data movement that commutes with (de)quantization when both sides share the parameters
_MOVEMENT = frozenset({"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"})


class _Graph:
    """Producer / consumer indices of one graph, and its initializers as arrays (read lazily)."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.inits = {t.name: t for t in graph.initializer}
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        for sub in _subgraph_inputs(graph):
            self.consumers.setdefault(sub, []).append(onnx.NodeProto())  # read by a subgraph: keep
        self.outputs = {o.name for o in graph.output}
        self._arrays: dict[str, np.ndarray] = {}

    def array(self, name: str) -> np.ndarray | None:
        if name not in self.inits:
            return None
        if name not in self._arrays:
            t = self.inits[name]
            if t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            self._arrays[name] = numpy_helper.to_array(t)
        return self._arrays[name]

    def only_consumer(self, value: str, op: str | frozenset[str]) -> onnx.NodeProto | None:
        users = self.consumers.get(value, [])
        if len(users) != 1 or value in self.outputs:
            return None
        n = users[0]
        ops = {op} if isinstance(op, str) else op
        return n if n.op_type in ops and n.domain in ("", "ai.onnx") else None

    def made_by(self, value: str, op: str) -> onnx.NodeProto | None:
        n = self.producer.get(value)
        return n if n is not None and n.op_type == op and n.domain in ("", "ai.onnx") else None


def _subgraph_inputs(graph: onnx.GraphProto) -> set[str]:
    """Names read inside the subgraphs of the graph's nodes (If / Loop / Scan bodies)."""
    names: set[str] = set()
    for n in graph.node:
        for a in n.attribute:
            for g in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                names.update(i for sn in g.node for i in sn.input)
    return names


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _float_attr(node: onnx.NodeProto, name: str, default: float = 1.0) -> float:
    for a in node.attribute:
        if a.name == name:
            return float(a.f)
    return default


class _Params:
    """The scale / zero point of a (De)QuantizeLinear whose operands are initializers."""

    def __init__(self, g: _Graph, node: onnx.NodeProto) -> None:
        self.ok = False
        if len(node.input) < 2 or _attr(node, "block_size", 0) != 0:
            return
        self.scale_name = node.input[1]
        self.zero_name = node.input[2] if len(node.input) > 2 and node.input[2] else ""
        self.scale = g.array(self.scale_name)
        self.zero = g.array(self.zero_name) if self.zero_name else np.zeros((), np.uint8)
        self.axis = _attr(node, "axis", 1)
        self.ok = self.scale is not None and self.zero is not None and self.scale.dtype == np.float32 \
            and self.zero.dtype in (np.uint8, np.int8) and self.zero.shape == self.scale.shape

    @property
    def per_tensor(self) -> bool:
        return self.ok and self.scale.size == 1

    def same_as(self, other: "_Params") -> bool:
        return self.per_tensor and other.per_tensor and self.zero.dtype == other.zero.dtype \
            and np.array_equal(self.scale.reshape(()), other.scale.reshape(())) \
            and np.array_equal(self.zero.reshape(()), other.zero.reshape(()))


class _Folder:
    def __init__(self, model: onnx.ModelProto, opset: int) -> None:
        self.model = model
        self.opset = opset
        self.g = _Graph(model.graph)
        self.replace: dict[int, list[onnx.NodeProto]] = {}   # id(node) -> nodes in its place
        self.removed: set[int] = set()
        self.new_inits: list[onnx.TensorProto] = []
        self.unused: set[str] = set()   # initializers the fold replaced (dropped when nothing reads them)
        self.counter = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}__qdq{self.counter}"

    def add_init(self, array: np.ndarray, stem: str) -> str:
        name = self.fresh(stem)
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name

    # -- the output side: [Relu ->] QuantizeLinear ----------------------------------------------------------

    def _output(self, value: str) -> tuple[list[onnx.NodeProto], onnx.NodeProto, _Params, bool] | None:
        """The (Relu, Q) nodes after a product's float result, Q's parameters and whether a Relu is there."""
        relu = self.g.only_consumer(value, "Relu")
        q = self.g.only_consumer(relu.output[0] if relu is not None else value, "QuantizeLinear")
        if q is None or len(q.output) != 1 or (relu is not None and self.opset < 12):
            return None
        p = _Params(self.g, q)
        if not p.per_tensor or _attr(q, "saturate", 1) != 1 or (not p.zero_name and _attr(q, "output_dtype", 0)):
            return None
        return ([relu] if relu is not None else []) + [q], q, p, relu is not None

    def _input(self, value: str) -> tuple[onnx.NodeProto, _Params] | None:
        dq = self.g.made_by(value, "DequantizeLinear")
        if dq is None:
            return None
        p = _Params(self.g, dq)
        return (dq, p) if p.per_tensor else None

    def _product(self, node: onnx.NodeProto) -> tuple[tuple[onnx.NodeProto, _Params], onnx.NodeProto,
                                                      tuple[list[onnx.NodeProto], onnx.NodeProto, _Params, bool]] | None:
        """A product's DQ'd input (node, parameters), its weight's DequantizeLinear and its output side."""
        xin, wdq = self._input(node.input[0]), self.g.made_by(node.input[1], "DequantizeLinear")
        outp = self._output(node.output[0])
        if xin is None or wdq is None or outp is None:
            return None
        return xin, wdq, outp

    def _finish(self, anchor: onnx.NodeProto, dead: Sequence[onnx.NodeProto], new: list[onnx.NodeProto],
                out: str, q: onnx.NodeProto, p: _Params, relu: bool) -> None:
        if relu:  # Relu before Q: max(Q(y), Q(0)) = max(Q(y), zero point) (integer Max: opset 12)
            raw = self.fresh(out)
            new[-1].output[0] = raw
            new.append(helper.make_node("Max", [raw, self.zero_const(p)], [out], name=self.fresh("relu")))
        self.replace[id(anchor)] = new
        self.removed.update(id(n) for n in dead)

    def zero_const(self, p: _Params) -> str:
        return p.zero_name if p.zero_name else self.add_init(np.zeros((), np.uint8), "zero")

    # -- Conv ---------------------------------------------------------------------------------------------

    def conv(self, node: onnx.NodeProto) -> None:
        if len(node.input) < 2 or len(node.output) != 1:
            return
        found = self._product(node)
        if found is None:
            return
        (xdq, xp), win, (tail, q, yp, relu) = found
        wp = _Params(self.g, win)
        w = self.g.array(win.input[0])
        if not wp.ok or w is None or w.dtype not in (np.int8, np.uint8) or w.ndim < 3:
            return
        m = w.shape[0]
        if not (wp.scale.size == 1 or (wp.scale.shape == (m,) and wp.axis in (0, -w.ndim))):
            return
        if len(self.g.consumers.get(node.input[1], [])) != 1:
            return
        bias = self._bias(node, xp, wp, m)
        if bias is False:
            return
        ins = [xdq.input[0], xp.scale_name, self.zero_const(xp), win.input[0], wp.scale_name, self.zero_const(wp),
               yp.scale_name, self.zero_const(yp)] + ([bias] if bias else [])
        conv = helper.make_node("QLinearConv", ins, [q.output[0]], name=node.name or self.fresh("qlinearconv"))
        conv.attribute.extend(a for a in node.attribute)
        self._finish(node, tail + [win], [conv], q.output[0], q, yp, relu)

    def _bias(self, node: onnx.NodeProto, xp: _Params, wp: _Params, m: int) -> str | bool | None:
        """The int32 bias initializer's name, None without a bias, False when it cannot be expressed."""
        if len(node.input) < 3 or not node.input[2]:
            return None
        want = (xp.scale.astype(np.float32).reshape(()) * wp.scale.astype(np.float32).reshape(-1))
        want = np.broadcast_to(want, (m,))
        if not np.all(np.isfinite(want)) or np.any(want == 0):
            return False
        bdq = self.g.made_by(node.input[2], "DequantizeLinear")
        if bdq is not None:
            bp, b = _Params(self.g, bdq), self.g.array(bdq.input[0])
            if b is None or b.dtype != np.int32 or b.shape != (m,) or bp.scale is None or bp.scale.dtype != np.float32:
                return False
            bz = self.g.array(bdq.input[2]) if len(bdq.input) > 2 and bdq.input[2] else np.zeros((), np.int32)
            if bz is None or np.any(bz != 0):
                return False
            if len(self.g.consumers.get(node.input[2], [])) != 1:
                return False
            self.removed.add(id(bdq))
            if np.array_equal(np.broadcast_to(bp.scale.reshape(-1), (m,)), want):
                return bdq.input[0]
            real = b.astype(np.float32) * np.broadcast_to(bp.scale.reshape(-1), (m,))
        else:
            real = self.g.array(node.input[2])
            if real is None or real.dtype != np.float32 or real.shape != (m,):
                return False
        q = np.rint(real.astype(np.float64) / want.astype(np.float64))
        return self.add_init(np.clip(q, -2 ** 31, 2 ** 31 - 1).astype(np.int32), node.input[2])

    # -- MatMul ---------------------------------------------------------------------------------------------

    def matmul(self, node: onnx.NodeProto) -> None:
        if len(node.input) != 2 or len(node.output) != 1:
            return
        found = self._product(node)
        if found is None:
            return
        (adq, ap), bdq, (tail, q, yp, relu) = found
        bp, bw = _Params(self.g, bdq), self.g.array(bdq.input[0])
        if not bp.ok or bw is None or bw.ndim != 2 or len(self.g.consumers.get(node.input[1], [])) != 1:
            return
        if not (bp.scale.size == 1 or (bp.scale.shape == (bw.shape[1],) and bp.axis in (1, -1))):
            return
        ins = [adq.input[0], ap.scale_name, self.zero_const(ap), bdq.input[0], bp.scale_name, self.zero_const(bp),
               yp.scale_name, self.zero_const(yp)]
        mm = helper.make_node("QLinearMatMul", ins, [q.output[0]], name=node.name or self.fresh("qlinearmatmul"))
        self._finish(node, tail + [bdq], [mm], q.output[0], q, yp, relu)

    # -- Gemm -------------------------------------------------------------------------------------------------

    def gemm(self, node: onnx.NodeProto) -> None:
        """``A[P, K] x B (+ C)`` as a 1x1 QLinearConv over P images: ``A -> [P, K, 1, 1]``, the filter ``B^T`` (int8
        initializer), the bias in int32 as for Conv, ``[P, N, 1, 1] -> [P, N]`` (QLinearMatMul has no bias)."""
        if len(node.input) < 2 or len(node.output) != 1 or _attr(node, "transA", 0) != 0:
            return
        alpha, beta = _float_attr(node, "alpha"), _float_attr(node, "beta")
        if alpha != 1.0 or (len(node.input) > 2 and node.input[2] and beta != 1.0):
            return
        found = self._product(node)
        if found is None:
            return
        (adq, ap), bdq, (tail, q, yp, relu) = found
        trans_b = _attr(node, "transB", 0) == 1
        bp, bw = _Params(self.g, bdq), self.g.array(bdq.input[0])
        if not bp.ok or bw is None or bw.dtype not in (np.int8, np.uint8) or bw.ndim != 2 \
                or len(self.g.consumers.get(node.input[1], [])) != 1:
            return
        n_axis = 0 if trans_b else 1
        n, k = bw.shape[n_axis], bw.shape[1 - n_axis]
        if not (bp.scale.size == 1 or (bp.scale.shape == (n,) and bp.axis in (n_axis, n_axis - 2))):
            return
        bias = self._bias(node, ap, bp, n)
        if bias is False:
            return
        filt = self.add_init(np.ascontiguousarray(bw if trans_b else bw.T).reshape(n, k, 1, 1), bdq.input[0])
        x4, y4 = self.fresh(adq.input[0]), self.fresh(q.output[0])
        ins = [x4, ap.scale_name, self.zero_const(ap), filt, bp.scale_name, self.zero_const(bp),
               yp.scale_name, self.zero_const(yp)] + ([bias] if bias else [])
        name = node.name or self.fresh("gemm")
        new = [helper.make_node("Reshape", [adq.input[0], self.add_init(np.array([0, k, 1, 1], np.int64), "shape")],
                                [x4], name=self.fresh(name)),
               helper.make_node("QLinearConv", ins, [y4], name=name),
               helper.make_node("Reshape", [y4, self.add_init(np.array([0, n], np.int64), "shape")], [q.output[0]],
                                name=self.fresh(name))]
        self.unused.add(bdq.input[0])
        self._finish(node, tail + [bdq], new, q.output[0], q, yp, relu)

    # -- data movement -----------------------------------------------------------------------------------------

    def movement(self, node: onnx.NodeProto) -> None:
        if not node.input or len([o for o in node.output if o]) != 1:
            return
        xin = self._input(node.input[0])
        q = self.g.only_consumer(node.output[0], "QuantizeLinear")
        if xin is None or q is None:
            return
        (dq, xp), qp = xin, _Params(self.g, q)
        if not xp.same_as(qp) or _attr(q, "saturate", 1) != 1:
            return
        moved = onnx.NodeProto()
        moved.CopyFrom(node)
        moved.input[0] = dq.input[0]
        del moved.output[:]
        moved.output.append(q.output[0])
        self.replace[id(node)] = [moved]
        self.removed.add(id(q))

    # -- driver ----------------------------------------------------------------------------------------------

    RULES = {"Conv": conv, "MatMul": matmul, "Gemm": gemm}

    def run(self) -> onnx.ModelProto:
        for node in list(self.g.graph.node):
            if node.domain not in ("", "ai.onnx") or id(node) in self.removed or id(node) in self.replace:
                continue
            rule = self.RULES.get(node.op_type) or (_Folder.movement if node.op_type in _MOVEMENT else None)
            if rule is not None:
                rule(self, node)
        if not self.replace:
            return self.model
        out = onnx.ModelProto()
        out.CopyFrom(self.model)
        nodes: list[onnx.NodeProto] = []
        for node in self.model.graph.node:
            if id(node) in self.removed:
                continue
            nodes.extend(self.replace.get(id(node), [node]))
        del out.graph.node[:]
        out.graph.node.extend(_drop_dead_dequantize(nodes, {o.name for o in out.graph.output}))
        out.graph.initializer.extend(self.new_inits)
        used = {i for n in out.graph.node for i in n.input}
        kept = [t for t in out.graph.initializer if t.name not in self.unused or t.name in used]
        if len(kept) < len(out.graph.initializer):  # the replaced Gemm filters (their transposed copies stay)
            del out.graph.initializer[:]
            out.graph.initializer.extend(kept)
        return out


def _drop_dead_dequantize(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """DequantizeLinear nodes nothing reads any more (the folded products' inputs)."""
    used = {i for n in nodes for i in n.input} | outputs
    for n in nodes:
        for a in n.attribute:
            for g in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                used.update(i for sn in g.node for i in sn.input)
    return [n for n in nodes if not (n.op_type == "DequantizeLinear" and n.output[0] not in used)]


def fold_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its QDQ patterns on the integer operators (the same object when there is none)."""
    if not any(n.op_type == "DequantizeLinear" for n in model.graph.node):
        return model
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 10:  # QLinearConv / QLinearMatMul exist from opset 10
        return model
    return _Folder(model, opset).run()
