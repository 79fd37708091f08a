"""Convolution, matrix products and pooling: whichever emitter is registered, and the simple fallbacks
of ``emit.naive_linalg`` (forced in), against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from glow_backend_cpu.emit import naive_linalg
from glow_backend_cpu.emit.context import EMITTERS

from tests.cpu.util import check, rand

NAIVE = {"MatMul": naive_linalg.emit_matmul, "FusedMatMul": naive_linalg.emit_matmul,
         "Conv": naive_linalg.emit_conv, "FusedConv": naive_linalg.emit_conv,
         "MaxPool": naive_linalg.emit_pool, "AvgPool": naive_linalg.emit_pool}


@pytest.fixture(params=["registered", "naive"])
def emitters(request, monkeypatch):  # type: ignore[no-untyped-def]
    if request.param == "naive":
        for k, fn in NAIVE.items():
            monkeypatch.setitem(EMITTERS, k, fn)
    return request.param


CONVS = [
    # x shape, w shape, strides, pads, dilations, group
    ((1, 3, 9, 11), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 10, 10), (6, 2, 3, 3), (2, 2), (0, 1, 2, 0), (1, 1), 2),
    ((1, 8, 7, 7), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),
    ((1, 3, 12, 12), (5, 3, 3, 2), (1, 2), (2, 1, 2, 1), (2, 1), 1),
    ((1, 16, 5, 5), (32, 16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((1, 3, 20), (4, 3, 5), (2,), (2, 1), (1,), 1),
]


@pytest.mark.parametrize("xs,ws,strides,pads,dil,group", CONVS)
def test_conv(emitters, xs, ws, strides, pads, dil, group) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": group}
    x, w, b = rand(xs, np.float32, rng), rand(ws, np.float32, rng), rand((ws[0],), np.float32, rng)
    check("Conv", [x, w, b], attrs, consts=[1, 2], cache=False)
    check("Conv", [x, w], attrs, consts=[1], cache=False)
    for act in ({"activation": "relu"}, {"activation": "clip", "clip_min": -0.5, "clip_max": 0.5}):
        check("FusedConv", [x, w, b], dict(attrs, **act), consts=[1, 2], cache=False)


@pytest.mark.parametrize("a,b", [((5, 7), (7, 9)), ((2, 3, 17, 33), (33, 20)), ((40,), (40, 3)), ((4, 6), (6,)),
                                 ((3, 1, 4, 5), (2, 5, 6)), ((1, 64), (64, 1000))])
def test_matmul(emitters, a, b) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    check("MatMul", [rand(a, np.float32, rng), rand(b, np.float32, rng)], cache=False)
    check("MatMul", [rand(a, np.float32, rng), rand(b, np.float32, rng)], consts=[1], cache=False)


def test_fused_matmul_bias_and_activation(emitters) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2)
    a, w, bias = rand((3, 50), np.float32, rng), rand((50, 20), np.float32, rng), rand((20,), np.float32, rng)
    check("FusedMatMul", [a, w, bias], {"activation": "relu"}, consts=[1, 2], cache=False)
    check("FusedMatMul", [a, w, None], {"activation": "clip", "clip_min": 0.0, "clip_max": 1.0}, consts=[1],
          cache=False)


@pytest.mark.parametrize("kind", ["MaxPool", "AvgPool"])
@pytest.mark.parametrize("xs,k,s,p,d,ceil", [
    ((1, 3, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((2, 2, 8, 7), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True),
    ((1, 4, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), (1, 1), False),
    ((1, 2, 10, 10), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), False),
    ((1, 2, 15), (4,), (3,), (1, 2), (1,), True),
])
def test_pools(emitters, kind, xs, k, s, p, d, ceil) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(3)
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d, "ceil_mode": ceil}
    x = rand(xs, np.float32, rng)
    if kind == "AvgPool":
        for inc in (False, True):
            check(kind, [x], dict(attrs, count_include_pad=inc), cache=False)
    else:
        check(kind, [x], attrs, cache=False)
