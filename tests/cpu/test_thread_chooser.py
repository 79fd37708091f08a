"""The policy of ``runtime.ThreadChooser``, driven by injected run times (no real runs, no timing).

A scenario is a function of the run index returning the seconds a run with each thread count takes;
``simulate`` asks the chooser for a count, "runs" it and records the scenario's time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from glow_backend_cpu.runtime import ThreadChooser

MANY = 2
Costs = Callable[[int], dict[int, float]]


def simulate(c: ThreadChooser, costs: Costs, runs: int, start: int = 0) -> list[int]:
    """The thread counts of ``runs`` runs (run indices ``start``...) timed by ``costs``."""
    seen = []
    for i in range(start, start + runs):
        n = c.next()
        seen.append(n)
        c.record(n, costs(i)[n])
    return seen


def idle(i: int) -> dict[int, float]:
    return {MANY: 1.0, 1: 1.8}


def busy(i: int) -> dict[int, float]:  # a descheduled worker makes every barrier wait
    return {MANY: 5.0, 1: 3.0}


def jitter(base: Costs, amount: float, seed: int = 0) -> Costs:
    rng = np.random.default_rng(seed)
    table = rng.uniform(1 - amount, 1 + amount, size=(20000, 2))
    return lambda i: {MANY: base(i)[MANY] * table[i, 0], 1: base(i)[1] * table[i, 1]}


def first_run_with(seen: list[int], n: int, from_run: int) -> int:
    """How many runs after ``from_run`` the chooser settled on ``n`` (the next 8 runs all use it)."""
    for i in range(from_run, len(seen) - 8):
        if all(s == n for s in seen[i:i + 8]):
            return i - from_run
    raise AssertionError(f"never settled on {n} threads after run {from_run}: {seen[from_run:from_run + 80]}")


def test_every_thread_is_measured_first_then_one_thread_is_tried() -> None:
    c = ThreadChooser(MANY)
    seen = simulate(c, idle, 70)
    # one warm-up and TRIAL measured runs with every thread; one thread is clearly slower at its first run
    assert seen[:6] == [MANY] * 5 + [1]
    assert c.best == MANY and seen[6:] == [MANY] * 64
    c = ThreadChooser(MANY)
    seen = simulate(c, busy, 12)
    assert seen[:9] == [MANY] * 5 + [1] * 4  # one thread is faster: a full trial, then kept
    assert c.best == 1 and c.switches == 1 and seen[9:] == [1] * 3


def test_the_idle_case_tries_one_thread_once_every_explore_runs() -> None:
    c = ThreadChooser(MANY)
    seen = simulate(c, jitter(idle, 0.1), 2000)
    singles = seen[5:].count(1)
    assert 0 < singles <= -(-(len(seen) - 5) // ThreadChooser.EXPLORE)
    assert c.best == MANY and c.switches == 0


def test_a_burst_of_load_is_left_soon_after_it_ends() -> None:
    """The case the old fixed-interval policy got wrong: 1 thread kept for up to EXPLORE runs after a burst."""
    def scenario(i: int) -> dict[int, float]:
        return busy(i) if 100 <= i < 300 else idle(i)

    c = ThreadChooser(MANY)
    seen = simulate(c, scenario, 500)
    assert first_run_with(seen, 1, 100) <= ThreadChooser.TRIAL + ThreadChooser.DRIFT_RUNS
    # the burst ended: a one-thread run got faster too (its core is free), the drift starts a re-trial
    assert first_run_with(seen, MANY, 300) <= ThreadChooser.DRIFT_RUNS + ThreadChooser.TRIAL


def test_a_burst_that_does_not_change_the_one_thread_time_is_left_by_early_re_trials() -> None:
    def scenario(i: int) -> dict[int, float]:
        if 100 <= i < 150:
            return {MANY: 5.0, 1: 1.8}
        return idle(i)

    c = ThreadChooser(MANY)
    seen = simulate(c, scenario, 400)
    assert seen[150:].count(1) > 0
    # no drift to see: the one-thread pick is re-tried after EXPLORE_MIN runs (doubling while it is confirmed)
    assert first_run_with(seen, MANY, 150) <= 2 * ThreadChooser.EXPLORE_MIN + 2 * ThreadChooser.TRIAL


def test_a_machine_that_stays_busy_backs_off_its_re_trials() -> None:
    c = ThreadChooser(MANY)
    seen = simulate(c, jitter(busy, 0.1), 1000)
    assert c.best == 1
    # intervals 8, 16, 32, then 64: far fewer parallel runs than a re-trial every EXPLORE_MIN runs
    assert seen[500:].count(MANY) <= -(-500 // ThreadChooser.EXPLORE) * ThreadChooser.TRIAL + ThreadChooser.TRIAL


def test_near_equal_counts_do_not_flap() -> None:
    def even(i: int) -> dict[int, float]:
        return {MANY: 1.0, 1: 1.0}

    c = ThreadChooser(MANY)
    simulate(c, jitter(even, 0.02, seed=3), 3000)
    assert c.switches <= 2


def test_a_noisy_run_does_not_start_a_re_trial() -> None:
    def spikes(i: int) -> dict[int, float]:
        return {MANY: 4.0 if i % 10 == 0 else 1.0, 1: 1.8}  # one slow run in ten: the median of 3 ignores it

    c = ThreadChooser(MANY)
    seen = simulate(c, spikes, 600)
    assert seen[5:].count(1) <= -(-595 // ThreadChooser.EXPLORE)


def test_a_parallel_trial_is_not_ended_by_its_slow_first_run() -> None:
    """The first parallel run after a while wakes sleeping workers: only one-thread trials end early."""
    c = ThreadChooser(MANY)
    simulate(c, busy, 30)
    assert c.best == 1
    prev = 1
    for i in range(100):  # the load is gone, but one-thread runs are as fast as before (no drift)
        n = c.next()
        t = {MANY: 1.0, 1: 3.0}[n] * (4.0 if n == MANY and prev != MANY else 1.0)
        c.record(n, t)
        prev = n
    assert c.best == MANY
