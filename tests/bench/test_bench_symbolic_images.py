"""scripts/bench_symbolic_images.py on its tiny detector: one compile against a compile per shape."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bench import load_script

bench = load_script("bench_symbolic_images")


def test_every_batch_and_size_is_measured_and_compared() -> None:
    lines = bench.bench("tiny", 1, 1)
    rows = [line for line in lines if line.startswith("| tiny |")]
    assert len(rows) == 2 * len(bench.BATCHES)
    assert {r.split("|")[3].strip() for r in rows} == {str(b) for b in bench.BATCHES}
    assert "outputs equal" in lines[0] and "compiles of its own: 1" in lines[0], lines[0]


def test_a_difference_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def differ(*args: object, **kwargs: object) -> None:
        raise AssertionError("planted")

    monkeypatch.setattr(np.testing, "assert_allclose", differ)
    lines = bench.bench("tiny", 1, 1)
    assert "outputs DIFFER" in lines[0]
