"""The fuzzer in CI: a fixed, bounded set of mutants per backend must end without a finding,
and planted failures must be classified as what they are (so the CI subset can fail).

The campaign behind these tests is ``glow_tools.fuzz`` (docs/robustness.md, "The fuzzer");
``scripts/fuzz_campaign.py`` runs the long ones.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from glow_core.errors import ModelError, UnsupportedError
from glow_tools.fuzz import MUTATORS
from glow_tools.fuzz.campaign import Settings, read_rows, replay, run_campaign, table
from glow_tools.fuzz.cases import generate
from glow_tools.fuzz.isolate import Limits
from glow_tools.fuzz.runners import FINDINGS, run_reference
from glow_tools.fuzz.seeds import seed_names

pytestmark = pytest.mark.robustness

#: the CI subset: cases 0 .. CI_CASES - 1 of campaign CI_SEED, on each backend (100: about a minute of the
#: 15-minute CI; the campaigns of scripts/fuzz_campaign.py run tens of thousands)
CI_SEED = 20261125
CI_CASES = 100


@pytest.fixture(scope="module")
def names() -> list[str]:
    found = seed_names()
    assert len(found) > 9 or not os.environ.get("GLOW_ONNX_NODE_TESTS"), "GLOW_ONNX_NODE_TESTS has no node tests"
    return found


def _backends() -> tuple[str, ...]:
    try:
        import glow_backend_cpu  # noqa: F401
    except ImportError:
        return ("interpreter",)
    return ("interpreter", "cpu")


def test_ci_subset_has_no_findings(names: list[str], tmp_path: Path) -> None:
    """Both backends in one campaign: each case's reference (and onnxruntime) runs once for the two."""
    backends = _backends()
    settings = Settings(out=tmp_path, backends=backends, seed=CI_SEED,
                        limits=Limits(cpu_seconds=20, wall_seconds=120.0, memory_bytes=2 << 30))
    rows = run_campaign(settings, range(CI_CASES), names, MUTATORS)
    assert len(rows) == CI_CASES * len(backends)
    findings = [r for r in rows if r["class"] in FINDINGS]
    assert not findings, "fuzz findings (replay with the command in each repro's case.json):\n" + table(rows)
    for backend in backends:
        mine = [r for r in rows if r["backend"] == backend]
        assert sorted(r["index"] for r in mine) == list(range(CI_CASES))
        # the subset exercises both sides: models glow runs and models it refuses
        classes = {r["class"] for r in mine}
        assert {"match", "clean-error"} <= classes, table(mine)
        # ... and inputs whose dims the fuzzer made symbolic, run at the fed shapes (issue 28)
        symbolic = [r for r in mine if any(m.startswith("dim_symbol:") for m in r["mutators"])]
        assert any(r["class"] == "match" for r in symbolic), table(mine)


def test_dim_symbol_joins_at_its_seed_and_recorded_campaigns_reproduce(names: list[str]) -> None:
    """A mutator added later has weight 0 in the campaigns of record (seeds 0 to 2): their cases are the
    ones they were; from seed 3 on it is drawn, and it leaves the data fed as it was."""
    without = {k: v for k, v in MUTATORS.items() if k != "dim_symbol"}
    for seed in (0, 1, 2):
        for index in (5, 77, 1234):
            a, b = generate(seed, index, names, MUTATORS), generate(seed, index, names, without)
            assert (a.seed_model, a.mutators) == (b.seed_model, b.mutators)
            assert a.mutant.model.SerializeToString() == b.mutant.model.SerializeToString()
    drawn = [c for c in (generate(3, i, names, MUTATORS) for i in range(200))
             if any(m.startswith("dim_symbol:") for m in c.mutators)]
    assert drawn
    for c in drawn:
        fed = [tuple(a.shape) for a in c.mutant.inputs]
        declared = [vi for vi in c.mutant.model.graph.input
                    if vi.name not in {t.name for t in c.mutant.model.graph.initializer}]
        assert len(fed) == len(declared)


# -- planted failures: the classification sees each kind of failure -----------------


def _crash(case_dir: str, backend: str) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("unreachable")


def _spin(case_dir: str, backend: str) -> dict[str, Any]:
    while True:
        pass


def _sleep(case_dir: str, backend: str) -> dict[str, Any]:
    time.sleep(60)
    raise AssertionError("unreachable")


def _allocate(case_dir: str, backend: str) -> dict[str, Any]:
    hoard = []
    while True:  # address space without touching the pages: quick even on a loaded machine
        hoard.append(np.empty(256 << 20, np.uint8))


def _key_error(case_dir: str, backend: str) -> dict[str, Any]:
    return {"kind": "exception", "type": "KeyError", "message": "KeyError: 'x'", "traceback": ""}


def _bug_message(case_dir: str, backend: str) -> dict[str, Any]:
    return {"kind": "glow-error", "type": "BackendError", "unsupported": False, "cause": "",
            "message": "backend 'cpu' failed to compile the model: KeyError (this is a bug in the backend)"}


def _unsupported_from_key_error(case_dir: str, backend: str) -> dict[str, Any]:
    try:
        try:
            raise KeyError("axis")
        except KeyError as e:
            raise UnsupportedError("cannot import: KeyError") from e
    except UnsupportedError as e:
        return {"kind": "glow-error", "type": "UnsupportedError", "unsupported": True, "message": str(e),
                "cause": f"{type(e.__cause__).__name__}: {e.__cause__}"}


def _off_by_one(case_dir: str, backend: str) -> dict[str, Any]:
    return {"kind": "outputs", "outputs": [o + 1 for o in run_reference(case_dir)]}


def _exact(case_dir: str, backend: str) -> dict[str, Any]:
    return {"kind": "outputs", "outputs": run_reference(case_dir)}


def _clean(case_dir: str, backend: str) -> dict[str, Any]:
    e = ModelError("the model is invalid")
    return {"kind": "glow-error", "type": type(e).__name__, "message": e.one_line(), "unsupported": False,
            "cause": ""}


PLANTED = [
    (_crash, "crash"),
    (_spin, "hang"),
    (_sleep, "hang"),
    (_allocate, "memory"),
    (_key_error, "internal-error"),
    (_bug_message, "internal-error"),
    (_unsupported_from_key_error, "internal-error"),
    (_off_by_one, "wrong"),
    (_exact, "match"),
    (_clean, "clean-error"),
]


def _matching_case(names: list[str]) -> int:
    """A CI case that glow and the reference both run (so 'wrong' and 'match' can be planted)."""
    for index in range(200):
        case = generate(CI_SEED, index, names, MUTATORS)
        if case.mutators[0].startswith("input_extreme") and len(case.mutators) == 1:
            return index
    raise AssertionError("no input_extreme case among the first 200")


@pytest.mark.parametrize("runner, expected", PLANTED, ids=[f.__name__.strip("_") for f, _ in PLANTED])
def test_planted_failure_is_classified(runner: Any, expected: str, names: list[str], tmp_path: Path) -> None:
    index = _matching_case(names)
    settings = Settings(out=tmp_path, backends=("fake",), seed=CI_SEED, glow_runner=runner, onnxruntime=False,
                        limits=Limits(cpu_seconds=2, wall_seconds=3.0 if runner is _sleep else 10.0,
                                      memory_bytes=512 << 20))  # (the sleeper waits out the wall limit twice)
    rows = run_campaign(settings, [index], names, MUTATORS)
    assert [r["class"] for r in rows] == [expected], rows
    assert read_rows(tmp_path) == [{k: v for k, v in rows[0].items() if k != "repro"}]
    if expected in FINDINGS:
        repro = Path(rows[0]["repro"])
        assert (repro / "model" / "model.onnx").is_file() and (repro / "case.json").is_file()
        again = replay(repro, ["fake"], settings)
        assert [r["class"] for r in again] == [expected]
    else:
        assert not (tmp_path / "repros").exists()


def test_cases_are_deterministic(names: list[str]) -> None:
    for index in (0, 7, 41):
        a = generate(CI_SEED, index, names, MUTATORS)
        b = generate(CI_SEED, index, names, MUTATORS)
        assert a.meta() == b.meta()
        assert a.mutant.serialized() == b.mutant.serialized()
        assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a.mutant.inputs, b.mutant.inputs))


def test_a_campaign_resumes_where_it_stopped(names: list[str], tmp_path: Path) -> None:
    settings = Settings(out=tmp_path, backends=("fake",), seed=CI_SEED, glow_runner=_clean, onnxruntime=False)
    assert len(run_campaign(settings, range(3), names, MUTATORS)) == 3
    assert len(run_campaign(settings, range(5), names, MUTATORS)) == 2
    assert sorted(r["index"] for r in read_rows(tmp_path)) == [0, 1, 2, 3, 4]


def test_without_a_judge_backends_are_compared_with_the_interpreter() -> None:
    from glow_tools.fuzz.campaign import _vs_interpreter
    from glow_tools.fuzz.isolate import Outcome

    def answered(*values: float) -> Outcome:
        return Outcome("ok", {"kind": "outputs", "outputs": [np.array(values, np.float32)]})

    glow = {"interpreter": answered(1, 2), "cpu": answered(1, 2), "xyz": answered(1, 3), "bad": Outcome("crash")}
    assert _vs_interpreter(glow, "cpu") == "agrees"
    assert "1 of 2 elements differ" in _vs_interpreter(glow, "xyz")
    assert _vs_interpreter(glow, "bad") == "" and _vs_interpreter(glow, "interpreter") == ""
