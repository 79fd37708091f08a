"""A YOLOv8n-style detector built with onnx.helper (random weights): Conv + SiLU (Sigmoid * Mul), C2f
blocks (Split, bottlenecks with residual Adds, Concat), SPPF (MaxPool x3), a neck with nearest Resize
and Concat, and the decoupled detection head (box and class branches per scale, concatenated).

The structure is YOLOv8n's (widths 16..256, depths 1, 2, 2, 1; 64 Conv nodes), so partition counts on a
narrow accelerator are those of the real model; the input size is a parameter (the counts do not
depend on it, the bytes moved do).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, what: str) -> str:
        self.n += 1
        return f"{what}{self.n}"

    def const(self, array: np.ndarray, what: str = "c") -> str:
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs: object) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs

    def conv(self, x: str, cin: int, cout: int, k: int = 1, s: int = 1, act: bool = True) -> str:
        scale = 1.0 / np.sqrt(cin * k * k)
        w = self.const((self.rng.standard_normal((cout, cin, k, k)) * scale).astype(np.float32), "w")
        b = self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b")
        p = k // 2
        (y,) = self.node("Conv", [x, w, b], kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])
        if not act:
            return y
        (sig,) = self.node("Sigmoid", [y])
        return self.node("Mul", [y, sig])[0]  # SiLU

    def c2f(self, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
        c = cout // 2
        y = self.conv(x, cin, 2 * c)
        split = self.const(np.array([c, c], np.int64), "split")
        parts = self.node("Split", [y, split], n_out=2, axis=1)
        outs = list(parts)
        b = parts[1]
        for _ in range(n):
            t = self.conv(self.conv(b, c, c, 3), c, c, 3)
            b = self.node("Add", [b, t])[0] if shortcut else t
            outs.append(b)
        (cat,) = self.node("Concat", outs, axis=1)
        return self.conv(cat, (2 + n) * c, cout)

    def sppf(self, x: str, cin: int, cout: int) -> str:
        c = cin // 2
        y = self.conv(x, cin, c)
        pools = [y]
        for _ in range(3):
            pools.append(self.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])[0])
        (cat,) = self.node("Concat", pools, axis=1)
        return self.conv(cat, 4 * c, cout)

    def up(self, x: str) -> str:
        scales = self.const(np.array([1, 1, 2, 2], np.float32), "scales")
        return self.node("Resize", [x, "", scales], mode="nearest")[0]

    def head(self, x: str, cin: int, classes: int, flatten: bool = True) -> str:
        c2, c3 = max(16, cin // 4, 64), max(cin, min(classes, 100))
        box = self.conv(self.conv(self.conv(x, cin, c2, 3), c2, c2, 3), c2, 64, act=False)
        cls = self.conv(self.conv(self.conv(x, cin, c3, 3), c3, c3, 3), c3, classes, act=False)
        (cat,) = self.node("Concat", [box, cls], axis=1)
        if not flatten:
            return cat
        shape = self.const(np.array([1, 64 + classes, -1], np.int64), "shape")
        return self.node("Reshape", [cat, shape])[0]


def yolov8n_like(size: int | str = 160, classes: int = 80, seed: int = 0, flatten: bool = True) -> onnx.ModelProto:
    """The detector (module docstring): input ``images`` float32[1, 3, size, size], output ``output0``.
    ``size`` "symbolic": the input is ``[batch, 3, height, width]``; ``flatten`` False: the three heads' maps are
    the outputs (``p3``, ``p4``, ``p5``: [N, 64 + classes, h, w], what a detector exported without its decode
    gives), not one ``[1, 64 + classes, anchors]``."""
    g = _Builder(seed)
    x = g.conv("images", 3, 16, 3, 2)
    x = g.conv(x, 16, 32, 3, 2)
    x = g.c2f(x, 32, 32, 1, True)
    x = g.conv(x, 32, 64, 3, 2)
    p3 = g.c2f(x, 64, 64, 2, True)
    x = g.conv(p3, 64, 128, 3, 2)
    p4 = g.c2f(x, 128, 128, 2, True)
    x = g.conv(p4, 128, 256, 3, 2)
    x = g.c2f(x, 256, 256, 1, True)
    p5 = g.sppf(x, 256, 256)
    n4 = g.c2f(g.node("Concat", [g.up(p5), p4], axis=1)[0], 384, 128, 1, False)
    n3 = g.c2f(g.node("Concat", [g.up(n4), p3], axis=1)[0], 192, 64, 1, False)
    m4 = g.c2f(g.node("Concat", [g.conv(n3, 64, 64, 3, 2), n4], axis=1)[0], 192, 128, 1, False)
    m5 = g.c2f(g.node("Concat", [g.conv(m4, 128, 128, 3, 2), p5], axis=1)[0], 384, 256, 1, False)
    heads = [g.head(n3, 64, classes, flatten), g.head(m4, 128, classes, flatten), g.head(m5, 256, classes, flatten)]
    if flatten:
        g.nodes.append(helper.make_node("Concat", heads, ["output0"], name="detect_concat", axis=2))
        outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 64 + classes, None])]
    else:
        for name, h in zip(("p3", "p4", "p5"), heads):
            g.nodes.append(helper.make_node("Identity", [h], [name]))
        outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 64 + classes, f"{n}_h", f"{n}_w"])
                   for n in ("p3", "p4", "p5")]
    dims = ["batch", 3, "height", "width"] if size == "symbolic" else [1, 3, size, size]
    graph = helper.make_graph(
        g.nodes, "yolov8n_like", [helper.make_tensor_value_info("images", TensorProto.FLOAT, dims)], outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model
