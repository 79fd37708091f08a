"""The suite's parts, in process: generators cover the kind table, case ids, filters, waivers, verdicts,
reports, progress, the worker protocol, and the ``glow conformance`` command's own errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from glow_conformance.cases_ops import node_cases
from glow_conformance.gen import FAMILIES, generators
from glow_conformance.isolation import _decode, _encode
from glow_conformance.model import SUITE_VERSION, Case, CaseRecord, Level, Outcome, Result
from glow_conformance.progress import Progress
from glow_conformance.report import Report, check_report_dir
from glow_conformance.suite import NoCasesError, Suite, SuiteOptions, record, run_suite, select
from glow_conformance.waivers import WaiverError, parse_waivers

from glow_core.errors import GlowError
from glow_core.ir.defs.symbolic import SYMBOLIC_ONLY_KINDS
from glow_core.ir.kinds import all_kinds
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import get_backend
from glow_sdk.primitives import mandatory_primitives, optional_primitives, primitive_kinds

E = ElemKind


def test_every_kind_of_the_table_has_a_generator() -> None:
    # (SymbolicValue exists only in compiles for symbolic dims: the symbolic/ cases cover it)
    missing = sorted(set(all_kinds()) - set(generators()) - SYMBOLIC_ONLY_KINDS)
    assert not missing, f"add a case generator (glow_conformance/gen/) for: {missing}"
    assert not set(generators()) - set(all_kinds()), "generators of kinds that no longer exist"


def test_every_primitive_has_mandatory_cases_in_every_shape_family_that_applies() -> None:
    cases = node_cases(get_backend("interpreter"), Level.CORE, [])
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    assert all(c.category == "primitive" and c.mandatory == (c.kind not in optional_primitives()) for c in cases)
    kinds = {c.kind for c in cases}
    assert kinds == primitive_kinds()
    gens = generators()
    for kind, elems in mandatory_primitives().items():
        have = {c.elem for c in cases if c.kind == kind}
        assert have == {e.value for e in elems & gens[kind].elems} and have, (kind, have)
    for kind in ("Add", "Div", "Max", "Equal", "Pow"):
        variants = {c.variant for c in cases if c.kind == kind and c.elem == "float32"}
        assert set(FAMILIES) <= variants, (kind, variants)
    for kind in ("Exp", "Sqrt", "Abs", "Round"):
        variants = {c.variant for c in cases if c.kind == kind and c.elem == "float32"}
        assert set(FAMILIES) - {"broadcast"} <= variants, (kind, variants)
    cast_targets = {c.variant.split("-")[1] for c in cases if c.kind == "Cast" and c.elem == "float32"}
    assert cast_targets == {"bool", "float32", "int32", "int64"}  # the mandatory ones at level core


def test_full_level_adds_the_declared_element_kinds_and_the_high_level_kinds() -> None:
    cases = node_cases(get_backend("interpreter"), Level.FULL, [])
    assert {c.category for c in cases} == {"primitive", "high-level"}
    assert any(c.id == "primitive/Add/bfloat16/special" and not c.mandatory for c in cases)
    assert any(c.id.startswith("primitive/Cast/float32/to-float16-") for c in cases)
    assert {c.kind for c in cases if c.category == "high-level"} == \
        set(all_kinds()) - primitive_kinds() - SYMBOLIC_ONLY_KINDS


def test_typed_quantized_kinds_have_cases_only_for_the_typed_elems_a_backend_runs() -> None:
    # the cpu backend runs QLookup on plain int8 codes only: quantization hands it no typed QLookup, so a
    # case of one would report a node it never receives as unsupported
    cpu = {c.id for c in node_cases(get_backend("cpu"), Level.FULL, []) if c.category == "high-level"}
    assert not [i for i in cpu if i.startswith("high-level/QLookup/")]
    interp = {c.id for c in node_cases(get_backend("interpreter"), Level.FULL, [])}
    assert "high-level/QLookup/int8q/odd" in interp


def test_special_values_reach_the_cases() -> None:
    gen = generators()["Add"]
    v = gen.variants(E.FLOAT32)["special"](np.random.default_rng(0))
    a = v.operands[0]
    assert a is not None and np.isnan(a).any() and np.isinf(a).any() and (np.signbit(a) & (a == 0)).any()
    assert (np.abs(a[(a != 0) & np.isfinite(a)]) < np.finfo(np.float32).tiny).any()  # denormals
    iv = gen.variants(E.INT32)["special"](np.random.default_rng(0)).operands[0]
    assert iv is not None and iv.min() == np.iinfo(np.int32).min and iv.max() == np.iinfo(np.int32).max
    gather = generators()["Gather"].variants(E.FLOAT32)["odd"](np.random.default_rng(1))
    data, idx = gather.operands
    assert data is not None and idx is not None
    assert idx.min() >= -data.shape[1] and idx.max() < data.shape[1]  # valid (negative ones from the end)


def _case(cid: str, mandatory: bool, category: str = "primitive") -> Case:
    return Case(cid, category, Level.CORE, mandatory, lambda ctx: Outcome(Result.PASS))


def test_filters() -> None:
    cases = [_case(i, True) for i in ("primitive/Add/float32/odd", "primitive/Sub/int64/odd", "model/resnet50")]
    assert [c.id for c in select(cases, ["Add", "model"])] == ["primitive/Add/float32/odd", "model/resnet50"]
    assert [c.id for c in select(cases, ["~primitive"])] == ["model/resnet50"]
    assert [c.id for c in select(cases, ["odd", "~Sub"])] == ["primitive/Add/float32/odd"]
    assert len(select(cases, [])) == 3


def test_waiver_file_format() -> None:
    ws = parse_waivers("# comment\n\nprimitive/Exp/float16/*: the device exp is 3 ulps  # trailing comment\n", "w.txt")
    assert len(ws) == 1 and ws[0].reason == "the device exp is 3 ulps" and ws[0].source == "w.txt:3"
    assert ws[0].matches("primitive/Exp/float16/large") and not ws[0].matches("primitive/Exp/float32/large")
    with pytest.raises(WaiverError, match=r"w.txt:2: the waiver of 'primitive/Add/\*' gives no reason"):
        parse_waivers("# x\nprimitive/Add/*:\n", "w.txt")
    with pytest.raises(WaiverError, match="w.txt:1: .* is not of the form"):
        parse_waivers("primitive/Add/*\n", "w.txt")


def test_verdict_rules_and_waivers() -> None:
    ws = parse_waivers("primitive/*: x\nhigh-level/*: y\n")
    fail = Outcome(Result.FAIL, "wrong")
    unsup = Outcome(Result.UNSUPPORTED, "not declared")
    mand_fail = record(_case("primitive/Add/float32/odd", True), fail, 0.1, ws)
    assert mand_fail.result is Result.FAIL and mand_fail.blocks_conformance and ws[0].rejected
    mand_unsup = record(_case("primitive/Add/int64/odd", True), unsup, 0.1, ws)
    assert mand_unsup.result is Result.UNSUPPORTED and mand_unsup.blocks_conformance
    waived = record(_case("high-level/LSTM/float32/forward", False, "high-level"), fail, 0.1, ws)
    assert waived.result is Result.WAIVED and waived.raw is Result.FAIL and not waived.blocks_conformance
    other = record(_case("model/x", False, "model"), fail, 0.1, [])
    assert other.blocks_conformance
    revised = record(_case("model/y", True, "model"), Outcome(Result.UNSUPPORTED, "needs LSTM", mandatory=False),
                     0.1, [])
    assert not revised.mandatory and not revised.blocks_conformance  # unsupported never passes, never blocks


def _report(records: list[CaseRecord]) -> Report:
    return Report(SUITE_VERSION, "core", {"name": "toy", "version": "1", "distribution": "glow-backend-toy",
                                          "distribution_version": "1", "sdk_api_version": 1},
                  {"name": "interpreter"}, "0.1.0", {"python": "3"}, "2024-01-01T00:00:00+00:00", records=records)


def test_report_formats(tmp_path: Path) -> None:
    recs = [record(_case("primitive/Add/float32/odd", True), Outcome(Result.FAIL, "1 of 35 elements differ", 1.0),
                   0.5, []),
            record(_case("primitive/Add/float32/unit", True), Outcome(Result.PASS, "", 0.0), 0.1, []),
            record(_case("high-level/Gelu/float32/basic", False, "high-level"),
                   Outcome(Result.UNSUPPORTED, "not declared"), 0.1, [])]
    rep = _report(recs)
    assert not rep.conformant and [r.case.id for r in rep.blockers] == ["primitive/Add/float32/odd"]
    assert "DOES NOT CONFORM: 1 mandatory case(s) do not pass" in rep.verdict()
    paths = rep.write(tmp_path)
    data: dict[str, Any] = json.loads(paths["json"].read_text())
    assert data["suite"]["version"] == SUITE_VERSION and data["backend"]["distribution"] == "glow-backend-toy"
    assert data["summary"] == {"total": 3, "pass": 1, "fail": 1, "unsupported": 1, "waived": 0, "mandatory": 2}
    assert data["verdict"]["blocking_cases"] == ["primitive/Add/float32/odd"]
    assert data["cases"][0]["max_error"] == 1.0 and data["cases"][2]["max_error"] is None
    root = ET.parse(paths["junit"]).getroot()
    assert root.get("tests") == "3" and root.get("failures") == "1"
    skipped = [tc for tc in root.iter("testcase") if tc.find("skipped") is not None]
    assert [tc.get("name") for tc in skipped] == ["high-level/Gelu/float32/basic"]
    md = paths["markdown"].read_text()
    assert "| `primitive/Add/float32/odd` | fail | yes | 1 | 1 of 35 elements differ |" in md
    assert "never counted as passing" in md
    table = rep.summary_lines()
    assert table[0].split() == ["CATEGORY", "TOTAL", "PASS", "FAIL", "UNSUPPORTED", "WAIVED", "MANDATORY"]
    assert table[1].split() == ["primitive", "2", "1", "1", "0", "0", "2"]


def test_progress_lines_and_bar() -> None:
    out = io.StringIO()
    p = Progress(20, "lines", out)
    for i in range(20):
        p.update(f"case{i}", failed=i == 3)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("conformance: 100% (20/20 cases, 1 failed")
    bar = io.StringIO()
    p = Progress(3, "bar", bar)
    p.update("primitive/Add/float32/odd", False)
    assert bar.getvalue().startswith("\r[") and "1/3" in bar.getvalue()
    off = io.StringIO()
    Progress(3, "off", off).update("x", True)
    assert off.getvalue() == ""


def test_worker_protocol_round_trip() -> None:
    out = Outcome(Result.FAIL, "boom", float("inf"), "exact", {"nodes": {"Add": 1}}, mandatory=False)
    back, seconds = _decode(json.loads(json.dumps(_encode(out, 0.25))))
    assert back == out and seconds == 0.25


def test_run_suite_in_process() -> None:
    rep = run_suite("interpreter-primitives", "core", filters=["primitive/Gather/", "runtime/device"])
    assert rep.ok, "\n".join(rep.summary_lines())
    assert rep.partial and not rep.conformant  # -k: the selected cases pass, no conformance verdict
    assert rep.counts()["pass"] == len(rep.records) > 5


def test_partial_report_is_labelled_in_every_format_and_written_beside_the_full_one(tmp_path: Path) -> None:
    recs = [record(_case("primitive/Add/float32/odd", True), Outcome(Result.PASS, "", 0.0), 0.1, []),
            record(_case("primitive/Add/float32/unit", True), Outcome(Result.PASS, "", 0.0), 0.1, [])]
    full = _report(list(recs))
    full.total_cases = 2
    assert full.conformant and not full.partial and "CONFORMS (2 of 2 cases pass)" in full.verdict()
    full_paths = full.write(tmp_path)
    assert sorted(p.name for p in full_paths.values()) == ["report.json", "report.junit.xml", "report.md"]
    before = {p: p.read_bytes() for p in full_paths.values()}
    part = _report(recs[:1])
    part.total_cases, part.options = 2, {"filters": ["odd"]}
    assert part.partial and part.ok and not part.conformant
    verdict = part.verdict()
    assert "CONFORMS" not in verdict and "PASSES THE SELECTED CASES" in verdict
    assert "partial run: 1 of 2 cases, filter: odd" in verdict and part.summary_lines()[-1] == verdict
    paths = part.write(tmp_path)
    assert sorted(p.name for p in paths.values()) == ["report.partial.json", "report.partial.junit.xml",
                                                      "report.partial.md"]
    assert before == {p: p.read_bytes() for p in full_paths.values()}  # the full report is untouched
    data = json.loads(paths["json"].read_text())
    assert data["partial"] is True and data["verdict"]["conformant"] is False
    assert data["selection"] == {"filters": ["odd"], "run": 1, "total": 2}
    root = ET.parse(paths["junit"]).getroot()
    assert root.get("name") == "glow-conformance (partial run)"
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["partial"] == "true" and props["scope"] == "partial run: 1 of 2 cases, filter: odd"
    assert "> **Partial run: 1 of 2 cases, filter: odd.**" in paths["markdown"].read_text()
    failing = _report([record(_case("primitive/Add/float32/odd", True), Outcome(Result.FAIL, "wrong"), 0.1, [])])
    failing.total_cases = 2
    assert failing.verdict().endswith("DOES NOT CONFORM: 1 mandatory case(s) do not pass (partial run: 1 of 2 cases)")
    empty = _report([])
    assert not empty.ok and not empty.conformant and "NO VERDICT" in empty.verdict()


def test_no_selected_case_is_an_error() -> None:
    with pytest.raises(NoCasesError, match="no conformance case of backend 'interpreter' matches -k nosuchcase"):
        run_suite("interpreter", "core", filters=["nosuchcase"])


def test_an_unwritable_report_dir_fails_before_any_case_runs(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(GlowError, match="cannot write the conformance reports to .*: Not a directory"):
        check_report_dir(tmp_path / "file" / "sub")
    suite = Suite("interpreter-primitives", SuiteOptions(filters=["primitive/Gather/"]))
    with pytest.raises(GlowError, match="Not a directory") as err:
        suite.run(tmp_path / "file" / "sub")
    assert err.value.hint == "choose another --report-dir"
    assert suite.report.records == []  # no case ran
    assert check_report_dir(tmp_path / "new" / "dir").is_dir()  # created, writable


def test_interrupt_stops_in_one_exception_saying_how_far(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import glow_conformance.suite as suite_mod

    suite = Suite("interpreter-primitives", SuiteOptions(filters=["primitive/Gather/"]))
    calls = []

    def run_case(case: Case, ctx: Any) -> tuple[Outcome, float]:
        calls.append(case.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return Outcome(Result.PASS), 0.0

    monkeypatch.setattr(suite_mod, "run_case", run_case)
    with pytest.raises(KeyboardInterrupt, match=f"^after 2 of {len(suite.cases)} cases; no report written$"):
        suite.run(tmp_path / "r")
    assert list((tmp_path / "r").iterdir()) == []


def _pytest_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300, check=False)


def test_pytest_plugin_does_nothing_without_glow_backend(tmp_path: Path) -> None:
    """Loaded into every pytest session (entry point pytest11), it only declares its options."""
    (tmp_path / "test_other.py").write_text(
        "import sys\n\n"
        "def test_nothing_of_the_suite_or_glow_is_imported():\n"
        "    loaded = sorted(m for m in sys.modules if m.startswith(('glow_core', 'glow_conformance.')))\n"
        "    assert loaded == ['glow_conformance.pytest_plugin'], loaded\n\n"
        "def test_two():\n    pass\n")
    r = _pytest_run(["-q", "test_other.py"], tmp_path)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
    fixtures = _pytest_run(["--fixtures", "test_other.py"], tmp_path)
    assert fixtures.returncode == 0 and "glow_suite" not in fixtures.stdout and "glow_case" not in fixtures.stdout
    ids = [line for line in _pytest_run(["--collect-only", "-q", "test_other.py"], tmp_path).stdout.splitlines()
           if "::" in line]  # the node ids (the summary line carries a timing)
    without = _pytest_run(["--collect-only", "-q", "-p", "no:glow_conformance", "test_other.py"], tmp_path)
    assert ids == [line for line in without.stdout.splitlines() if "::" in line] and "test_other.py::test_two" in ids
    helptext = _pytest_run(["--help"], tmp_path).stdout
    assert "--glow-backend=NAME" in helptext  # the options are there
