"""Calibration: from a profile record to quantization parameters (pure functions).

Two tables drive it:

- :data:`RANGE_METHODS` (calibration name -> how the real range [lo, hi] is chosen
  from a :class:`~glow_core.quantization.histogram.ValueRecord`);
- :data:`SCHEMA_RULES` (schema name -> how (scale, offset, storage type) follow from
  the range).

The range always contains 0, so 0 is exactly representable (it is the integer
``offset``). Convention (Glow's): ``real = scale * (q - offset)``. ``scale`` is a
float32 value; offsets round half away from zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from glow_core.errors import GlowError
from glow_core.quantization.config import QuantizationConfig
from glow_core.quantization.histogram import ValueRecord

_TINY = float(np.finfo(np.float32).tiny)


class CalibrationError(GlowError):
    """A value cannot be calibrated (it was never observed, or has no finite sample)."""


@dataclass(frozen=True)
class QuantParams:
    """``real = scale * (q - offset)``, ``q`` stored as ``dtype`` (int8, uint8, int16 or uint16)."""

    scale: float
    offset: int
    dtype: str
    #: the real range the parameters were chosen for (contains 0)
    range: tuple[float, float]

    @property
    def qmin(self) -> int:
        return int(np.iinfo(self.dtype).min)

    @property
    def qmax(self) -> int:
        return int(np.iinfo(self.dtype).max)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        q = np.floor(np.asarray(x, np.float64) / self.scale + 0.5) + self.offset
        return np.clip(q, self.qmin, self.qmax).astype(self.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return (np.float32(self.scale) * (np.asarray(q, np.float32) - np.float32(self.offset))).astype(np.float32)


def _round(x: float) -> int:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def _f32(x: float) -> float:
    return float(np.float32(max(x, _TINY)))


# -- schemas: range -> parameters ------------------------------------------------------------------

def _asymmetric(lo: float, hi: float, cfg: QuantizationConfig) -> QuantParams:
    qmin, qmax = cfg.qrange
    scale = _f32((hi - lo) / (qmax - qmin)) if hi > lo else 1.0
    offset = min(max(_round(qmin - lo / scale), qmin), qmax)
    return QuantParams(scale, offset, cfg.precision, (lo, hi))


def _symmetric(lo: float, hi: float, cfg: QuantizationConfig) -> QuantParams:
    qmax = cfg.qrange[1]
    a = max(-lo, hi)
    return QuantParams(_f32(a / qmax) if a > 0 else 1.0, 0, cfg.precision, (-a, a))


def _symmetric_uint8(lo: float, hi: float, cfg: QuantizationConfig) -> QuantParams:
    if lo < 0:
        return _symmetric(lo, hi, cfg)
    return QuantParams(_f32(hi / cfg.unsigned_max) if hi > 0 else 1.0, 0, "u" + cfg.precision, (0.0, hi))


SchemaRule = Callable[[float, float, QuantizationConfig], QuantParams]
SCHEMA_RULES: Mapping[str, SchemaRule] = {
    "asymmetric": _asymmetric,
    "symmetric": _symmetric,
    "symmetric_uint8": _symmetric_uint8,
}


def params_for_range(lo: float, hi: float, cfg: QuantizationConfig) -> QuantParams:
    """Quantization parameters of ``cfg.schema`` for the real range [lo, hi] widened to contain 0."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise CalibrationError(f"cannot quantize the range [{lo}, {hi}]")
    return SCHEMA_RULES[cfg.schema](min(float(lo), 0.0), max(float(hi), 0.0), cfg)


# -- range methods: record -> [lo, hi] -------------------------------------------------------------

def _levels(record: ValueRecord, cfg: QuantizationConfig) -> int:
    """How many quantization levels cover [0, max|x|] (for the entropy search)."""
    hi = cfg.qrange[1]
    if cfg.schema == "symmetric":
        return hi + 1
    return cfg.unsigned_max + 1 if record.min >= 0 else hi + 1


def histogram_quantile(counts: np.ndarray, first_edge: float, width: float, q: float) -> float:
    """The ``q``-quantile (0..1) of a histogram, linear inside the bin that holds it."""
    total = int(counts.sum())
    if total == 0:
        raise CalibrationError("empty histogram")
    target = q * total
    if target <= 0:
        return first_edge + int(np.flatnonzero(counts)[0]) * width
    cum = np.cumsum(counts)
    b = min(int(np.searchsorted(cum, target, side="left")), len(counts) - 1)  # first bin with cum >= target
    before = int(cum[b - 1]) if b else 0
    frac = (target - before) / counts[b]
    return first_edge + (b + min(max(frac, 0.0), 1.0)) * width


def _minmax(record: ValueRecord, cfg: QuantizationConfig) -> tuple[float, float]:
    return record.min, record.max


def _percentile(record: ValueRecord, cfg: QuantizationConfig) -> tuple[float, float]:
    q = cfg.percentile / 100.0
    h = record.histogram
    if cfg.schema == "asymmetric" or (cfg.schema == "symmetric_uint8" and record.min >= 0):
        first = h.first * h.width
        lo = histogram_quantile(h.counts, first, h.width, 1.0 - q)
        hi = histogram_quantile(h.counts, first, h.width, q)
        return max(record.min, lo), min(record.max, hi)
    folded, w = h.folded()
    a = min(histogram_quantile(folded, 0.0, w, q), max(-record.min, record.max))
    return max(record.min, -a), min(record.max, a)


#: the largest fraction of the values the entropy calibration may clip (see ``entropy_threshold``)
MAX_CLIPPED = 1e-3


def entropy_threshold(counts: np.ndarray, levels: int, max_clipped: float = MAX_CLIPPED) -> int:
    """TensorRT-style KL calibration on a histogram of |x| from 0: the number of bins to keep.

    For every candidate ``i`` (``levels <= i <= len(counts)``) the reference
    distribution P is the first ``i`` bins with every count beyond them added to
    bin ``i-1``; the candidate Q merges the first ``i`` bins into ``levels`` groups
    and spreads each group's total evenly over its nonzero bins. The ``i`` with the
    smallest KL(P || Q) wins. Returns ``len(counts)`` when there are no more bins
    than levels (nothing to clip).

    Only candidates that clip at most ``max_clipped`` of the values compete. KL alone
    cannot see what clipping costs: for a distribution far from zero (log-mel features
    around -70, a layer's output around 60) a threshold below all of it folds every
    value into bin ``i-1``, where Q matches the spike exactly (KL 0), and the whole
    tensor would clip to one value (an audio embedding network's cosine to float fell
    from 0.996 with MinMax to 0.715).
    """
    n = len(counts)
    if n <= levels:
        return n
    c = counts.astype(np.float64)
    tail = np.concatenate([np.cumsum(c[::-1])[::-1], [0.0]])  # tail[i] = sum(c[i:])
    allowed = max_clipped * tail[0]
    best_i, best_kl = n, math.inf
    for i in range(levels, n + 1):
        if tail[i] > allowed:
            continue
        p = c[:i].copy()
        p[-1] += tail[i]
        if p.sum() == 0:
            continue
        starts = (np.arange(levels) * i) // levels
        nonzero = (c[:i] > 0).astype(np.float64)
        sums = np.add.reduceat(c[:i], starts)
        nz = np.add.reduceat(nonzero, starts)
        per = np.divide(sums, nz, out=np.zeros_like(sums), where=nz > 0)
        group = np.repeat(np.arange(levels), np.diff(np.append(starts, i)))
        qd = per[group] * nonzero
        kl = _kl(p, qd)
        if kl < best_kl:
            best_i, best_kl = i, kl
    return best_i


def _kl(p: np.ndarray, q: np.ndarray, eps: float = 1e-4) -> float:
    """KL(P || Q) of two unnormalized histograms; Q is smoothed where it is 0 and P is not."""
    p = p / p.sum()
    qs = q.sum()
    if qs == 0:
        return math.inf
    q = q / qs
    mask = p > 0
    q = np.where(mask & (q == 0), eps, q)
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def _entropy(record: ValueRecord, cfg: QuantizationConfig) -> tuple[float, float]:
    folded, w = record.histogram.folded()
    if folded[1:].any():
        # the bin at 0 holds (after a ReLU, mostly) exact zeros, which every range represents exactly: its
        # mass would pull the KL search towards a small threshold that clips the values that matter
        folded = folded.copy()
        folded[0] = 0
    keep = entropy_threshold(folded, _levels(record, cfg))
    a = min(keep * w, max(-record.min, record.max))
    return max(record.min, -a), min(record.max, a)


RangeMethod = Callable[[ValueRecord, QuantizationConfig], "tuple[float, float]"]
RANGE_METHODS: Mapping[str, RangeMethod] = {
    "minmax": _minmax,
    "percentile": _percentile,
    "entropy": _entropy,
}


def calibrated_range(record: ValueRecord, cfg: QuantizationConfig, name: str = "value") -> tuple[float, float]:
    """The real range ``cfg.calibration`` picks for ``record`` (before the schema widens it to contain 0)."""
    if not record.observed:
        raise CalibrationError(f"'{name}' has no finite sample in the profile ({record.nonfinite} NaN/inf)",
                               hint="profile with more or different data")
    return RANGE_METHODS[cfg.calibration](record, cfg)


def calibrate(record: ValueRecord, cfg: QuantizationConfig, name: str = "value") -> QuantParams:
    """Quantization parameters for one profiled value."""
    lo, hi = calibrated_range(record, cfg, name)
    return params_for_range(lo, hi, cfg)


def estimated_sqnr(record: ValueRecord, params: QuantParams) -> float:
    """The signal-to-quantization-noise ratio (dB) ``params`` would give on the profiled samples of ``record``.

    From the histogram alone: a sample inside the range ``[real(qmin), real(qmax)]`` gets the noise of
    uniform rounding, ``scale**2 / 12``; one outside also its squared distance to the range (it saturates).
    Samples are taken at their bin's centre. An exact 0 (the bin at 0 of a ReLU output, say) costs the same
    rounding noise in this estimate although 0 is exact, so the estimate errs low. ``inf`` when every
    sample is 0.
    """
    h = record.histogram
    if not record.observed or not len(h.counts):
        raise CalibrationError("no finite sample to estimate a quantization error on")
    x = (h.first + np.arange(len(h.counts), dtype=np.float64) + 0.5) * h.width
    x = np.clip(x, record.min, record.max)  # (the edge bins' centres may lie outside what was seen)
    lo = params.scale * (params.qmin - params.offset)
    hi = params.scale * (params.qmax - params.offset)
    c = h.counts.astype(np.float64)
    signal = float(c @ (x * x))
    noise = float(c @ (np.clip(x, lo, hi) - x) ** 2) + c.sum() * params.scale ** 2 / 12.0
    if signal == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if noise > 0 else math.inf


def calibrate_profile(records: Mapping[str, ValueRecord], cfg: QuantizationConfig,
                      kinds: Mapping[str, str] | None = None) -> dict[str, QuantParams]:
    """Parameters for every profiled value that ``cfg`` does not keep float.

    ``kinds`` (value name -> node kind, e.g. ``{n: i.kind for n, i in profile.infos.items()}``)
    lets ``cfg.keep_float_kinds`` apply; without it only ``cfg.keep_float_names`` does.
    """
    kinds = kinds or {}
    return {name: calibrate(rec, cfg, name) for name, rec in records.items()
            if not cfg.keeps_float(kinds.get(name, ""), name)}
