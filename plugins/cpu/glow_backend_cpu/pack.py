"""Compile-time packing of constant GEMM operands (numpy only, no LLVM).

The micro-kernels (``emit/gemm.py``) read A in MR-row panels and B in
NR-column panels, one k at a time. A constant operand (a convolution filter,
an FC weight) is re-laid out here once, at compile time, and stored with the
other constants (``EmitContext.add_constant``):

- :func:`pack_a_panels`: ``A[G, M, K]`` -> ``[G, ceil(M/MR), K, MR]`` (rows past M are zero);
- :func:`pack_b_panels`: ``B[G, K, N]`` -> ``[G, ceil(N/NR), K, NR]`` (columns past N are zero).

Both return contiguous float32 arrays; every panel starts at a multiple of
``MR * K`` / ``NR * K`` elements from the base. For the precision bf16
(``emit/bf16.py``), :func:`pack_a_pairs` / :func:`pack_b_pairs` give the same
layouts in 32-bit words of bf16 pairs (k even in the low half), ``K2 = ceil(K / 2)``
k steps, as uint16 arrays.
"""

from __future__ import annotations

import numpy as np


def pack_a_panels(a: np.ndarray, mr: int) -> np.ndarray:
    """``a[g, m, k]`` at ``out[g, m // mr, k, m % mr]``."""
    if a.ndim != 3:
        raise ValueError(f"pack_a_panels needs [G, M, K], got shape {a.shape}")
    g, m, k = a.shape
    mp = -(-m // mr)
    padded = np.zeros((g, mp * mr, k), dtype=np.float32)
    padded[:, :m, :] = a
    out = padded.reshape(g, mp, mr, k).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(out)


def pack_b_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """``b[g, k, n]`` at ``out[g, n // nr, k, n % nr]``."""
    if b.ndim != 3:
        raise ValueError(f"pack_b_panels needs [G, K, N], got shape {b.shape}")
    g, k, n = b.shape
    nt = -(-n // nr)
    padded = np.zeros((g, k, nt * nr), dtype=np.float32)
    padded[:, :, :n] = b
    out = padded.reshape(g, k, nt, nr).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out)


def conv_filter_matrix(w: np.ndarray, group: int) -> np.ndarray:
    """A Conv filter ``[M, C/group, k...]`` as the GEMM left operand ``[group, M/group, C/group * prod(k)]``."""
    m = w.shape[0]
    return np.ascontiguousarray(w.reshape(group, m // group, -1), dtype=np.float32)


def even_blocks(total: int, limit: int, quantum: int = 1) -> list[int]:
    """Start offsets of near-equal blocks of ``total`` of at most ``limit`` (multiples of ``quantum``).

    A block is never smaller than one quantum, so a quantum larger than
    ``limit`` gives blocks of exactly one quantum.
    """
    if total <= 0:
        return [0]
    units = -(-total // quantum)
    per_limit = max(1, limit // quantum)
    nblocks = -(-units // per_limit)
    per = -(-units // nblocks)
    return [u * quantum for u in range(0, units, per)]


def round_bf16(x: np.ndarray) -> np.ndarray:
    """The bf16 bits (uint16) of float32 ``x``, rounded to nearest even; NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)


def _pairs(x: np.ndarray) -> np.ndarray:
    """``x[g, p, k, r]`` (float32) as bf16 ``[g, p, ceil(k / 2), r, 2]``: k pairs side by side, odd k padded."""
    g, p, k, r = x.shape
    padded = np.zeros((g, p, k + k % 2, r), dtype=np.float32)
    padded[:, :, :k] = x
    bits = round_bf16(padded).reshape(g, p, (k + 1) // 2, 2, r).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(bits)


def pack_a_pairs(a: np.ndarray, mr: int) -> np.ndarray:
    """:func:`pack_a_panels` in bf16 pairs: ``a[g, m, 2 j + h]`` at ``out[g, m // mr, j, m % mr, h]``."""
    return _pairs(pack_a_panels(a, mr))


def pack_b_pairs(b: np.ndarray, nr: int) -> np.ndarray:
    """:func:`pack_b_panels` in bf16 pairs: ``b[g, 2 j + h, n]`` at ``out[g, n // nr, j, n % nr, h]``."""
    return _pairs(pack_b_panels(b, nr))
