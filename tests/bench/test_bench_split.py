"""scripts/bench_split.py: the interleaving of the even and the measured split, and one real run of it."""

from __future__ import annotations

import os

import pytest

from tests.bench import load_script

bench = load_script("bench_split")


def test_rounds_alternate_a_pinned_even_split_and_the_measured_one() -> None:
    calls: list[object] = []
    bench.compare(lambda: calls.append("run"), calls.append, rounds=2, n=3)
    block = [[1.0, 1.0], "run", "run", "run", None, "run", "run", "run", "run", "run", "run"]
    assert calls == block * 2  # the measured block starts with 3 runs that set its split


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_script_prints_both_phases(capsys: pytest.CaptureFixture[str]) -> None:
    cpus = os.sched_getaffinity(0)
    try:
        assert bench.main(["squeezenet", "--rounds", "1", "--runs", "2", "--busy", "100", "--idle", "100"]) == 0
    finally:
        os.sched_setaffinity(0, cpus)  # the script pins its caller
    out = capsys.readouterr().out
    assert "| alone |" in out and "| competitor 100/100 us on cpu" in out
