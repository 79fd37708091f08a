"""Convolutions and pools over symbolic spatial axes on the cpu backend (``emit/symconv.py``, issue 28).

Each test compiles one node once at the bound with height ``8*q`` and width ``8*t`` symbolic (the sizes a plan
in steps of 8 gives), then runs it at several sizes. Before every checked run the executable runs once at the
bound on a NaN image, so the input's padding holds NaN: a kernel whose valid outputs read the padding without
filling it first gives NaN there. Results are compared with onnx's reference at the actual size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core.ir.symbolic import SymExpr
from tests.cpu.test_symbolic_kernels import compile_function
from glow_tools.testing import one_node_function

Q, T = SymExpr.symbol("q"), SymExpr.symbol("t")
SIZES = [(4, 3), (1, 1), (2, 3), (3, 1), (1, 2)]  # (q, t): the bound first


def _scaled(e: SymExpr, c: int) -> SymExpr:
    return SymExpr.of({m: k * c for m, k in e.terms})


def _reference(op: str, attrs: dict[str, Any], x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    names = ["x"] + (["w"] if w is not None else [])
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    feeds = {"x": x, **({"w": w} if w is not None else {})}
    return ReferenceEvaluator(helper.make_model(g)).run(None, feeds)[0]


def _run(kind: str, onnx_op: str, c: int, attrs: dict[str, Any], onnx_attrs: dict[str, Any], out_scale: int,
         w: np.ndarray | None = None, sizes: list[tuple[int, int]] = SIZES) -> None:
    """``kind`` on ``[1, c, 8q, 8t]`` at the bound (4, 3); the output's height and width are ``out_scale*q`` and
    ``out_scale*t`` (0: a global pool, 1 x 1)."""
    rng = np.random.default_rng(3)
    bq, bt = sizes[0]
    x = rng.standard_normal((1, c, 8 * bq, 8 * bt)).astype(np.float32)
    operands = [x] + ([w] if w is not None else [])
    fn = one_node_function(kind, operands, attrs, consts=(1,) if w is not None else ())
    out_sym = (None, None, _scaled(Q, out_scale), _scaled(T, out_scale)) if out_scale else (None,) * 4
    exe = compile_function(fn, [(None, None, _scaled(Q, 8), _scaled(T, 8)), None], out_sym)
    for q, t in sizes:
        exe.execute({"in0": np.full(x.shape, np.nan, np.float32)})
        xi = rng.standard_normal((1, c, 8 * q, 8 * t)).astype(np.float32)
        out = list(exe.execute({"in0": xi}).values())[0]
        ref = _reference(onnx_op, onnx_attrs, xi, w)
        assert out.shape == ref.shape, (q, t)
        assert not np.isnan(out).any(), f"{(q, t)}: NaN from the padding"
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"{kind} at {(q, t)}")


CONVS = [  # (cin, cout, kernel, stride, pad, dilation, group, output scale)
    (8, 16, 3, 1, 1, 1, 1, 8),  # 3x3: Winograd's tiles
    (3, 8, 7, 2, 3, 1, 1, 4),  # a stem
    (8, 16, 1, 2, 0, 1, 1, 4),  # a strided projection
    (4, 8, 3, 1, 2, 2, 1, 8),  # dilated
    (8, 8, 3, 2, 1, 1, 8, 4),  # depthwise, strided
    (16, 32, 3, 1, 1, 1, 1, 8),  # GEMM
]


@pytest.mark.parametrize("cin,cout,k,s,p,d,g,scale", CONVS)
def test_conv_over_symbolic_height_and_width(cin: int, cout: int, k: int, s: int, p: int, d: int, g: int,
                                             scale: int) -> None:
    w = (np.random.default_rng(k).standard_normal((cout, cin // g, k, k)) * 0.3).astype(np.float32)
    attrs = {"strides": [s, s], "pads": [p] * 4, "dilations": [d, d], "group": g}
    _run("Conv", "Conv", cin, attrs, attrs, scale, w)


@pytest.mark.parametrize("path,cin,cout,sizes", [
    ("emit_conv_winograd", 32, 32, [(7, 7), (1, 1), (3, 5), (7, 2)]),  # 56 x 56 at the bound: 784 tiles
    ("emit_conv_gemm_t", 32, 64, [(2, 1), (1, 1), (2, 1)]),  # a small plane: vectors over output channels
])
def test_conv_paths_over_symbolic_height_and_width(monkeypatch: pytest.MonkeyPatch, path: str, cin: int, cout: int,
                                                   sizes: list[tuple[int, int]]) -> None:
    """The static paths the plain cases above do not reach, each checked to be the one taken."""
    import glow_backend_cpu.emit.conv as conv

    taken: list[str] = []
    static = getattr(conv, path)
    monkeypatch.setattr(conv, path, lambda *a, **k: (taken.append(path), static(*a, **k))[1])
    w = (np.random.default_rng(5).standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32)
    attrs = {"strides": [1, 1], "pads": [1] * 4, "dilations": [1, 1], "group": 1}
    _run("Conv", "Conv", cin, attrs, attrs, 8, w, sizes)
    assert taken == [path]


def test_maxpool_with_pads_fills_the_lowest_value() -> None:
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1]}
    _run("MaxPool", "MaxPool", 4, attrs, {k: v for k, v in attrs.items() if k != "dilations"}, 4)


def test_average_pools() -> None:
    attrs = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
             "count_include_pad": True}
    _run("AvgPool", "AveragePool", 4, attrs, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, 8)
    nopad = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0], "dilations": [1, 1]}
    _run("AvgPool", "AveragePool", 4, nopad, {"kernel_shape": [2, 2], "strides": [2, 2]}, 4)


@pytest.mark.parametrize("kind,op", [("AvgPool", "GlobalAveragePool"), ("MaxPool", "GlobalMaxPool")])
def test_global_pools_read_the_valid_entries(kind: str, op: str) -> None:
    attrs = {"kernel_shape": [32, 24], "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1]}
    _run(kind, op, 5, attrs, {}, 0)


def test_a_kernel_that_does_not_fill_the_padding_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted fault: without the fill, the NaN padding reaches the valid outputs."""
    import glow_backend_cpu.emit.symconv as symconv

    monkeypatch.setattr(symconv, "fill_padding", lambda *a, **k: None)
    w = (np.random.default_rng(1).standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32)
    attrs = {"strides": [1, 1], "pads": [1] * 4, "dilations": [1, 1], "group": 1}
    with pytest.raises(AssertionError, match="NaN from the padding"):
        _run("Conv", "Conv", 4, attrs, attrs, 8, w)
