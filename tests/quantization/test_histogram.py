"""The profile's value records: exact power-of-two histograms that re-bin without splitting a count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from glow_core.errors import GlowError
from glow_core.quantization.histogram import DEFAULT_BINS, Histogram, ValueRecord


def _recount(values: np.ndarray, h: Histogram) -> np.ndarray:
    """Count ``values`` into ``h``'s bins independently: bin g holds g*w <= x < (g+1)*w."""
    g = np.floor(values.astype(np.float64) / h.width).astype(np.int64) - h.first
    assert g.min() >= 0 and g.max() < len(h.counts)
    return np.bincount(g, minlength=len(h.counts))


@pytest.mark.parametrize("scales", [(1.0,), (0.0, 1.0, 10.0, 1000.0, 0.001), (1e-6, 1e4), (5.0, 5.0)])
def test_histogram_counts_every_sample_in_its_bin_across_regrids(scales: tuple[float, ...]) -> None:
    rng = np.random.default_rng(7)
    rec, seen = ValueRecord(), []
    for s in scales:
        x = (rng.standard_normal(777) * s + (3.0 if s == 5.0 else 0.0)).astype(np.float32)
        seen.append(x)
        rec.add(x)
        allx = np.concatenate(seen)
        assert rec.min == float(allx.min()) and rec.max == float(allx.max())
        assert rec.count == allx.size == rec.histogram.total()
        assert len(rec.histogram.counts) <= DEFAULT_BINS
        np.testing.assert_array_equal(_recount(allx, rec.histogram), rec.histogram.counts)


def test_histogram_resolution_uses_more_than_half_the_bins() -> None:
    x = np.random.default_rng(0).uniform(-3.0, 7.0, 10000).astype(np.float32)
    rec = ValueRecord()
    rec.add(x)
    h = rec.histogram
    span_bins = (rec.max - rec.min) / h.width
    assert 1023 < span_bins <= DEFAULT_BINS  # the smallest power-of-two width that fits
    assert h.width == 2.0 ** math.ceil(math.log2((rec.max - rec.min) / (DEFAULT_BINS - 1))) or span_bins < 2047


def test_nonfinite_values_are_counted_apart() -> None:
    rec = ValueRecord()
    rec.add(np.array([1.0, np.nan, -2.0, np.inf, -np.inf], np.float32))
    assert (rec.min, rec.max, rec.count, rec.nonfinite) == (-2.0, 1.0, 2, 3)
    empty = ValueRecord()
    empty.add(np.array([np.nan], np.float32))
    assert not empty.observed and empty.nonfinite == 1


def test_all_zero_then_wide_values() -> None:
    rec = ValueRecord()
    rec.add(np.zeros(10, np.float32))
    rec.add(np.array([-100.0, 250.0], np.float32))
    allx = np.concatenate([np.zeros(10), [-100.0, 250.0]])
    np.testing.assert_array_equal(_recount(allx, rec.histogram), rec.histogram.counts)


def test_folded_histogram_is_the_histogram_of_magnitudes() -> None:
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    rec = ValueRecord()
    rec.add(x)
    counts, w = rec.histogram.folded()
    assert counts.sum() == x.size
    # |x| in ((k)w, (k+1)w] for negatives, [kw, (k+1)w) for positives: recount the same way
    a = np.where(x < 0, np.ceil(-x.astype(np.float64) / w) - 1, np.floor(x.astype(np.float64) / w)).astype(np.int64)
    np.testing.assert_array_equal(np.bincount(a, minlength=len(counts)), counts)
    small, w2 = rec.histogram.folded(max_bins=100)
    assert len(small) <= 100 and small.sum() == x.size and w2 > w


def test_json_round_trip_and_malformed_records() -> None:
    rec = ValueRecord()
    rec.add(np.random.default_rng(2).standard_normal(300).astype(np.float32) * 4)
    back = ValueRecord.from_json(rec.to_json(), DEFAULT_BINS, "v")
    assert (back.min, back.max, back.count) == (rec.min, rec.max, rec.count)
    np.testing.assert_array_equal(back.histogram.edges()[:-1][back.histogram.counts > 0],
                                  rec.histogram.edges()[:-1][rec.histogram.counts > 0])
    bad = rec.to_json()
    bad["count"] = 5
    with pytest.raises(GlowError, match="count is 5"):
        ValueRecord.from_json(bad, DEFAULT_BINS, "v")
    with pytest.raises(GlowError, match="malformed"):
        ValueRecord.from_json({"min": 0}, DEFAULT_BINS, "v")


def test_half_precision_values() -> None:
    import ml_dtypes

    for dt in (np.float16, ml_dtypes.bfloat16):
        rec = ValueRecord()
        rec.add(np.array([-1.5, 0.25, 3.0], dt))
        assert (rec.min, rec.max, rec.count) == (-1.5, 3.0, 3)
    with pytest.raises(GlowError, match="only float values"):
        ValueRecord().add(np.array([1, 2], np.int32))
