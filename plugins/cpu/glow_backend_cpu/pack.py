"""Compile-time packing of constant GEMM operands (numpy only, no LLVM).

The micro-kernels (``emit/gemm.py``) read A in MR-row panels and B in
NR-column panels, one k at a time. A constant operand (a convolution filter,
an FC weight) is re-laid out here once, at compile time, and stored with the
other constants (``EmitContext.add_constant``):

- :func:`pack_a_panels`: ``A[G, M, K]`` -> ``[G, ceil(M/MR), K, MR]`` (rows past M are zero);
- :func:`pack_b_panels`: ``B[G, K, N]`` -> ``[G, ceil(N/NR), K, NR]`` (columns past N are zero).

Both return contiguous float32 arrays; every panel starts at a multiple of
``MR * K`` / ``NR * K`` elements from the base.
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
