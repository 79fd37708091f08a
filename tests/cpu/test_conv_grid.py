"""Depthwise, grouped and im2col-packed convolutions of the CPU backend vs the interpreter, over a grid of shapes.

The shapes are those of mobile detectors (PicoDet, the OCR models: depthwise 3x3 / 5x5 convolutions,
channel counts that are no multiple of the vector width, odd spatial sizes) and the corners of the
direct path of ``emit/conv.py`` (``Mg = M / group < 4``): kernel sizes 1 to 7, strides 1 and 2 (3 for
the wide-load shuffle), dilations 1 to 3, asymmetric and zero pads, 1 and 2 spatial axes, depth
multipliers 1 to 3, several input channels per group, batch 2, fused activations, a filter that is
a run-time operand. Grouped convolutions wide enough for the GEMM path (``Mg >= 4``) are in the grid
too, so both paths see the same group arithmetic.

Every case is compiled into one module (``linalg_harness.KernelSuite``) and run with 1 and 3 threads,
checked with the float32 bound of ``test_kernels_linalg`` (``|y - y_ref| <= 1e-4 * |x|*|w|``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from tests.cpu.test_kernels_linalg import THREADS, Family, _check_linalg, _conv

Case = tuple[str, str, dict[str, Any], list[np.ndarray | None], tuple[int, ...]]


def _pads(k: int, d: int, asym: bool) -> tuple[int, int, int, int]:
    """'same'-like pads for a k-tap kernel dilated by d; ``asym`` moves one of them to the far side."""
    total = (k - 1) * d
    lo = total // 2
    hi = total - lo
    return (lo, max(0, lo - 1), hi, hi + 1) if asym else (lo, lo, hi, hi)


def depthwise_cases(rng: np.random.Generator) -> list[Case]:
    """Kernel size x stride x dilation x pads, on channel counts 5 / 7 / 12 / 19 and odd images."""
    cases: list[Case] = []
    channels = itertools.cycle((5, 7, 12, 19))
    sizes = itertools.cycle(((13, 11), (9, 17), (7, 23), (16, 10)))
    for k, s, d, asym in itertools.product(range(1, 8), (1, 2), (1, 2), (False, True)):
        if d == 2 and k > 5:  # a dilated 6/7-tap kernel needs a larger image than the grid uses
            continue
        c = next(channels)
        h, w = next(sizes)
        cid = f"dw-k{k}-s{s}-d{d}-{'asym' if asym else 'sym'}-c{c}"
        cases.append(_conv(rng, cid, (1, c, h, w), (c, 1, k, k), (s, s), _pads(k, d, asym), (d, d), group=c))
    return cases


def grouped_cases(rng: np.random.Generator) -> list[Case]:
    """Group counts, depth multipliers and input channels per group, both paths, 1-D and 2-D, fused and not."""
    c = _conv
    return [
        c(rng, "dw-mult2", (1, 6, 11, 9), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=6),
        c(rng, "dw-mult3-s2", (1, 5, 12, 13), (15, 1, 5, 5), (2, 2), (2, 2, 2, 2), group=5),
        c(rng, "g3-cg2-mg2", (1, 6, 10, 10), (6, 2, 3, 3), (1, 1), (1, 0, 1, 2), group=3),
        c(rng, "g4-cg3-mg1-k7", (1, 12, 15, 14), (4, 3, 7, 7), (1, 1), (3, 3, 3, 3), group=4),
        c(rng, "g2-cg5-mg3-s2-d2", (1, 10, 17, 19), (6, 5, 3, 3), (2, 2), (2, 1, 2, 3), (2, 2), group=2),
        c(rng, "g2-mg4-gemm", (1, 10, 9, 11), (8, 5, 3, 3), (1, 1), (1, 1, 1, 1), group=2),
        c(rng, "g4-mg6-gemm-k5s2", (1, 8, 13, 13), (24, 2, 5, 5), (2, 2), (2, 2, 2, 2), group=4),
        c(rng, "dw-rect-k3x5", (1, 7, 12, 15), (7, 1, 3, 5), (1, 2), (1, 2, 1, 2), group=7),
        c(rng, "dw-rect-k1x7-d3", (1, 9, 8, 30), (9, 1, 1, 7), (1, 1), (0, 9, 0, 9), (1, 3), group=9),
        c(rng, "dw-s3-k5", (1, 6, 20, 23), (6, 1, 5, 5), (3, 3), (2, 1, 0, 2), group=6),
        c(rng, "dw-nopad-valid", (1, 11, 9, 9), (11, 1, 5, 5), (1, 1), (0, 0, 0, 0), group=11),
        c(rng, "dw-bigpad", (1, 3, 4, 5), (3, 1, 3, 3), (1, 1), (4, 3, 2, 5), group=3),
        c(rng, "dw-batch2", (2, 7, 9, 10), (7, 1, 3, 3), (2, 1), (1, 1, 1, 1), group=7),
        c(rng, "dw-nobias", (1, 12, 10, 10), (12, 1, 5, 5), (1, 1), (2, 2, 2, 2), group=12, bias=False),
        c(rng, "dw-runtime-filter", (1, 5, 9, 12), (5, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=5, const_w=False),
        c(rng, "dw-wide-row", (1, 3, 5, 131), (3, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=3),
        c(rng, "dw-relu", (1, 8, 11, 13), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), group=8, act="relu"),
        c(rng, "dw-clip6-s2", (1, 9, 14, 9), (9, 1, 5, 5), (2, 2), (2, 2, 2, 2), group=9, act="clip", lo=0.0,
          hi=0.6),
        c(rng, "dw1d-k5", (1, 7, 29), (7, 1, 5), (1,), (2, 2), group=7),
        c(rng, "dw1d-k4-s2-d2", (2, 5, 31), (5, 1, 4), (2,), (3, 2), (2,), group=5),
        c(rng, "g1d-cg3", (1, 9, 20), (6, 3, 3), (1,), (1, 0), group=3),
    ]


def im2col_cases(rng: np.random.Generator) -> list[Case]:
    """The GEMM path's im2col packing on images wide enough for vectors whose every lane and tap row lies
    inside the input, next to border vectors and rows: pads, dilation, asymmetric pads, tiles that span
    output rows, 1-D, batch 2, stride 2 (the wide load and shuffle), a fused activation."""
    c = _conv
    return [
        c(rng, "im2col-k3-wide", (1, 6, 12, 70), (8, 6, 3, 3), (1, 1), (1, 1, 1, 1)),
        c(rng, "im2col-k5-d2-asym", (1, 4, 15, 53), (6, 4, 5, 5), (1, 1), (4, 3, 4, 5), (2, 2)),
        c(rng, "im2col-k3-rows-span", (1, 5, 9, 37), (7, 5, 3, 3), (1, 1), (1, 1, 1, 1)),
        c(rng, "im2col-k3-nopad", (1, 3, 8, 40), (5, 3, 3, 3), (1, 1), (0, 0, 0, 0)),
        c(rng, "im2col-k7-pad3", (1, 2, 11, 75), (4, 2, 7, 7), (1, 1), (3, 3, 3, 3), act="relu"),
        c(rng, "im2col1d-k3-wide", (1, 4, 90), (6, 4, 3), (1,), (1, 1)),
        c(rng, "im2col-k3-s2-wide", (1, 4, 10, 70), (6, 4, 3, 3), (2, 2), (1, 1, 1, 1)),
        c(rng, "im2col-batch2", (2, 3, 6, 50), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1)),
    ]


GRID = Family(depthwise_cases(np.random.default_rng(7)) + grouped_cases(np.random.default_rng(8))
              + im2col_cases(np.random.default_rng(9)))


def test_grid_covers_the_brief() -> None:
    """The grid holds every kernel size 1-7, both strides, a dilation, asymmetric pads, both paths."""
    ids = [c[0] for c in GRID.cases]
    for k in range(1, 8):
        assert any(f"-k{k}-" in i for i in ids), k
    attrs = [c[2] for c in GRID.cases]
    assert any(a["dilations"][0] == 2 for a in attrs) and any(a["strides"][0] == 2 for a in attrs)
    assert any(a["pads"][0] != a["pads"][-2] or a["pads"][1] != a["pads"][-1] for a in attrs if len(a["pads"]) == 4)
    assert any(c[3][0].shape[1] % 8 and c[3][0].shape[1] % 4 for c in GRID.cases)  # no multiple of the lanes


@pytest.mark.parametrize("nthreads", THREADS)
@pytest.mark.parametrize("cid", [c[0] for c in GRID.cases])
def test_conv_grid(cid: str, nthreads: int) -> None:
    _check_linalg(GRID, cid, nthreads)
