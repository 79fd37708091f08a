"""Value records of a profile: min, max, count and an exactly re-binnable histogram.

The histogram lives on a grid anchored at 0 whose bin width is a power of two,
``w = 2**log2_width``: bin number ``g`` (an integer, possibly negative) holds the
samples ``x`` with ``g*w <= x < (g+1)*w``. At most :data:`DEFAULT_BINS` bins are
kept, the window ``first .. first+bins-1``.

When new samples fall outside the window the width doubles as many times as
needed (``log2_width += k``) and old bin ``g`` merges into new bin
``g >> k`` (floor division by ``2**k``). Because both grids are anchored at 0
and the new width is a multiple of the old one, every old bin lies entirely
inside one new bin: re-binning is exact, no count is ever split or guessed.
Placing a sample is exact too (``x / 2**e`` is exact in binary floating point).
The width chosen is the smallest power of two for which the observed range
fits, so the observed range always spans more than half the bins (about 1024 of
2048): the resolution percentile and entropy calibration work with.

NaN and infinities are counted in ``nonfinite`` and kept out of min, max and
the histogram.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.errors import GlowError

DEFAULT_BINS = 2048
#: bin width exponent used while every sample seen is 0 (the first nonzero sample re-grids)
ZERO_LOG2_WIDTH = -30


def _grid_for(lo: float, hi: float, bins: int) -> int:
    """Smallest ``e`` such that ``floor(hi/2**e) - floor(lo/2**e) < bins``."""
    span = hi - lo
    if span <= 0.0:
        mag = max(abs(lo), abs(hi))
        if mag == 0.0:
            return ZERO_LOG2_WIDTH
        e = math.frexp(mag)[1] - math.frexp(float(bins))[1]  # about bins/2 .. bins bins from 0 to mag
        return e
    e = math.frexp(span / (bins - 1))[1] - 1  # 2**e <= span/(bins-1) < 2**(e+1)
    mag = max(abs(lo), abs(hi))
    while math.floor(hi / 2.0**e) - math.floor(lo / 2.0**e) >= bins or mag / 2.0**e > 2.0**52:
        e += 1  # (the second test keeps bin numbers exact in int64 and float64)
    return e


@dataclass
class Histogram:
    """Counts on the power-of-two grid described in the module docstring."""

    bins: int = DEFAULT_BINS
    log2_width: int = ZERO_LOG2_WIDTH
    first: int = 0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def width(self) -> float:
        return 2.0**self.log2_width

    def edges(self) -> np.ndarray:
        """The ``len(counts)+1`` bin edges."""
        return (self.first + np.arange(len(self.counts) + 1, dtype=np.float64)) * self.width

    def total(self) -> int:
        return int(self.counts.sum())

    def _regrid(self, e: int) -> None:
        """Coarsen to width ``2**e`` (``e >= log2_width``), merging bins exactly."""
        k = e - self.log2_width
        if k < 0:
            raise AssertionError("a histogram only ever coarsens")
        if len(self.counts):
            g = self.first + np.arange(len(self.counts), dtype=np.int64)
            new_first = self.first >> k
            idx = (g >> min(k, 62)) - new_first  # (|g| < 2**53: a larger shift gives the same 0 or -1)
            merged = np.bincount(idx, weights=self.counts, minlength=int(idx[-1]) + 1).astype(np.int64)
            self.first, self.counts = new_first, merged
        self.log2_width = e

    def add(self, x: np.ndarray, lo: float, hi: float) -> None:
        """Add finite samples ``x`` whose min and max are ``lo`` and ``hi``."""
        if x.size == 0:
            return
        if len(self.counts) and self.counts.any():
            cur_lo, cur_hi = self.first * self.width, (self.first + len(self.counts)) * self.width
            lo, hi = min(lo, cur_lo), max(hi, cur_hi - self.width)  # the last bin's lower edge is observed
        e = max(_grid_for(lo, hi, self.bins), self.log2_width if len(self.counts) else -1075)
        if not len(self.counts):
            self.log2_width = e
        elif e > self.log2_width:
            self._regrid(e)
        w = self.width
        g = np.floor(x.astype(np.float64) / w).astype(np.int64)
        g_lo, g_hi = int(g.min()), int(g.max())
        if len(self.counts):
            g_lo, g_hi = min(g_lo, self.first), max(g_hi, self.first + len(self.counts) - 1)
        counts = np.zeros(g_hi - g_lo + 1, np.int64)
        if len(self.counts):
            counts[self.first - g_lo:self.first - g_lo + len(self.counts)] = self.counts
        counts += np.bincount(g - g_lo, minlength=len(counts))
        self.first, self.counts = g_lo, counts
        if len(self.counts) > self.bins:  # (cannot happen by construction of the grid)
            raise AssertionError("histogram outgrew its bins")

    def folded(self, max_bins: int | None = None) -> tuple[np.ndarray, float]:
        """The histogram of ``|x|`` from 0: (counts, bin width), at most ``max_bins`` bins.

        Negative bin ``g`` holds ``|x|`` in ``(-(g+1)w, -g w]``, bin ``-g-1`` of the
        positive grid (up to the closed/open end), so folding is exact; the result is
        then coarsened by powers of two until it has at most ``max_bins`` bins.
        """
        max_bins = max_bins or self.bins
        g = self.first + np.arange(len(self.counts), dtype=np.int64)
        a = np.where(g < 0, -g - 1, g)
        e = self.log2_width
        n = int(a.max()) + 1 if len(a) else 1
        while n > max_bins:
            a = a >> 1
            e += 1
            n = int(a.max()) + 1
        out = np.bincount(a, weights=self.counts, minlength=n).astype(np.int64)
        return out, 2.0**e

    def to_json(self) -> dict[str, Any]:
        nz = np.nonzero(self.counts)[0]
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if len(nz) else (0, 0)
        return {"log2_width": self.log2_width, "first": self.first + lo,
                "counts": [int(c) for c in self.counts[lo:hi]]}

    @staticmethod
    def from_json(d: Any, bins: int, where: str) -> Histogram:
        try:
            counts = np.asarray(d["counts"], dtype=np.int64)
            h = Histogram(bins, int(d["log2_width"]), int(d["first"]), counts)
        except (KeyError, TypeError, ValueError) as e:
            raise GlowError(f"{where}: malformed histogram ({type(e).__name__}: {e})") from None
        if not -1100 <= h.log2_width <= 1100 or abs(h.first) > 1 << 62:
            raise GlowError(f"{where}: histogram grid 2**{h.log2_width}, first bin {h.first} is out of range")
        if counts.ndim != 1 or len(counts) > bins or (counts < 0).any():
            raise GlowError(f"{where}: histogram has {counts.size} bins (at most {bins}) or negative counts")
        return h


@dataclass
class ValueRecord:
    """What a profile knows about one value: range, counts, histogram."""

    min: float = math.inf
    max: float = -math.inf
    count: int = 0
    nonfinite: int = 0
    histogram: Histogram = field(default_factory=Histogram)

    def add(self, array: np.ndarray) -> None:
        x = np.asarray(array).ravel()
        if x.dtype.kind != "f":
            if x.dtype.name != "bfloat16":
                raise GlowError(f"only float values are profiled, got {x.dtype}")
            x = x.astype(np.float32)  # (exact)
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite += int((~finite).sum())
            x = x[finite]
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        self.histogram.add(x, lo, hi)
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.count += int(x.size)

    @property
    def observed(self) -> bool:
        return self.count > 0

    def to_json(self) -> dict[str, Any]:
        return {"min": self.min if self.observed else None, "max": self.max if self.observed else None,
                "count": self.count, "nonfinite": self.nonfinite, "histogram": self.histogram.to_json()}

    @staticmethod
    def from_json(d: Any, bins: int, where: str) -> ValueRecord:
        try:
            count = int(d["count"])
            lo = math.inf if d["min"] is None else float(d["min"])
            hi = -math.inf if d["max"] is None else float(d["max"])
            rec = ValueRecord(lo, hi, count, int(d.get("nonfinite", 0)),
                              Histogram.from_json(d["histogram"], bins, where))
        except (KeyError, TypeError, ValueError) as e:
            raise GlowError(f"{where}: malformed value record ({type(e).__name__}: {e})") from None
        if rec.histogram.total() != count or (count and not lo <= hi):
            raise GlowError(f"{where}: histogram holds {rec.histogram.total()} samples but count is {count}, "
                            f"or min {lo} > max {hi}")
        return rec
