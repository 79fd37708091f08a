"""1-D convolutions exported as a column (``[N, C, L, 1]`` with a ``K x 1`` filter, as Magika's) and the
long global poolings after them, on the vector paths, vs the interpreter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from glow_backend_cpu.emit import conv as conv_emit
from glow_backend_cpu.emit import pool as pool_emit
from glow_backend_cpu.emit.conv import ConvShape, as_row
from tests.cpu.util import check, feeds_of, one_node_function, rand, run_cpu

#: (C, L, M, K, stride, dilation, pad, group): Magika's 5 x 1 layer scaled down, strides, dilations, padding,
#: few output channels (depthwise / direct paths) and a long K (transposed path)
COLUMN_CASES = {
    "magika-like": (24, 130, 40, 5, 1, 1, 0, 1),
    "padded": (8, 77, 16, 3, 1, 1, 1, 1),
    "stride2-dilated": (6, 90, 12, 3, 2, 2, 2, 1),
    "depthwise": (16, 70, 16, 5, 1, 1, 2, 16),
    "grouped": (8, 50, 8, 3, 1, 1, 1, 2),
    "short-plane": (300, 9, 64, 4, 1, 1, 0, 1),
}


def _column_operands(case: str, rng: np.random.Generator) -> tuple[list[np.ndarray], dict[str, Any]]:
    C, L, M, K, st, dl, pad, G = COLUMN_CASES[case]
    x = rand((2, C, L, 1), np.float32, rng)
    w = rand((M, C // G, K, 1), np.float32, rng, low=-0.5, high=0.5)
    bias = rand((M,), np.float32, rng)
    attrs = {"strides": [st, 1], "dilations": [dl, 1], "pads": [pad, 0, pad, 0],
             "group": G}
    return [x, w, bias], attrs


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(COLUMN_CASES))
def test_column_convolutions_match_the_interpreter(case: str, threads: int) -> None:
    operands, attrs = _column_operands(case, np.random.default_rng(len(case)))
    check("Conv", operands, attrs, consts=(1, 2), threads=threads)


@pytest.mark.parametrize("case", sorted(COLUMN_CASES))
def test_a_column_runs_as_the_1d_convolution(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The column convolution gives the bits of the same convolution written 1-D, and its shape reaches the
    vector paths as a row (H = 1)."""
    operands, attrs = _column_operands(case, np.random.default_rng(7))
    seen: list[ConvShape] = []
    real = conv_emit.as_row
    monkeypatch.setattr(conv_emit, "as_row", lambda s: seen.append(real(s)) or seen[-1])
    col = one_node_function("Conv", operands, attrs, consts=(1, 2))
    got_col = run_cpu(col, feeds_of(col, operands), cache=False)["out0"]
    assert seen and seen[-1].H == 1 and seen[-1].W == operands[0].shape[2]
    flat = [operands[0][..., 0], operands[1][..., 0], operands[2]]
    attrs1 = {k: v[:1] if isinstance(v, list) else v for k, v in attrs.items()}
    attrs1["pads"] = attrs["pads"][:1] * 2
    one = one_node_function("Conv", flat, attrs1, consts=(1, 2))
    got_one = run_cpu(one, feeds_of(one, flat))["out0"]
    assert np.array_equal(got_col[..., 0].view(np.uint32), got_one.view(np.uint32))


def test_as_row_keeps_real_2d_convolutions() -> None:
    s2 = ConvShape(1, 4, 9, 9, 8, 3, 3, 7, 7, 1, 1, 0, 0, 1, 1, 1)
    assert as_row(s2) is s2
    padded = ConvShape(1, 4, 9, 1, 8, 3, 1, 7, 3, 1, 1, 0, 1, 1, 1, 1)  # column padding: a real 2-D plane
    assert as_row(padded) is padded
    col = ConvShape(1, 4, 9, 1, 8, 3, 1, 4, 1, 2, 1, 1, 0, 3, 1, 1)
    assert as_row(col) == ConvShape(1, 4, 1, 9, 8, 1, 3, 1, 4, 1, 2, 0, 1, 1, 3, 1)


def _pool(k: list[int], s: list[int], d: list[int], p: list[int]) -> dict[str, Any]:
    return {"kernel_shape": k, "strides": s, "dilations": d, "pads": p}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["MaxPool", "AvgPool"])
@pytest.mark.parametrize("length", [257, 508, 1000])
def test_long_global_pooling_is_vectorized(kind: str, length: int, threads: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows longer than the unrolled limit (Magika's GlobalMaxPool over 508 columns) take the window path,
    not the scalar loop, and match the interpreter, NaN included."""
    def no_scalar(*_: Any) -> None:
        raise AssertionError("scalar pooling path taken")

    monkeypatch.setattr(pool_emit, "emit_pool_scalar", no_scalar)
    rng = np.random.default_rng(length)
    x = rand((2, 5, length), np.float32, rng)
    x[1, 2, length // 3] = np.nan
    check(kind, [x], _pool([length], [1], [1], [0, 0]), threads=threads)
    # a strided, dilated, padded long window over three outputs
    x2 = rand((1, 3, 2 * length), np.float32, rng)
    check(kind, [x2], _pool([length - 40], [40], [2], [3, 5]), threads=threads)
    x3 = rand((1, 2, 3, length), np.float32, rng)
    check(kind, [x3], _pool([2, length], [1, 1], [1, 1], [1, 0, 0, 0]), threads=threads)
