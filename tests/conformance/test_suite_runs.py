"""The conformance suite on real installations, through ``glow conformance`` like a vendor runs it.

- ``interpreter`` passes level ``full``; the JSON report records the suite version, the backend's name,
  version and distribution, the glow version, the platform and every case with its result and max error;
- ``cpu`` passes level ``full``, every case it does not pass waived by its shipped waiver file;
- those two whole-level runs are the exhaustive tier (marker ``full``, ``tox -e full``); the default run
  takes every :data:`SAMPLE`-th case of level ``full`` on both (``--sample``), which is partial;
- the example backend (``examples/glow-backend-example``), installed through its own pyproject into a
  temporary directory, passes level ``core``;
- a deliberately broken backend (``fixtures/wrong_add_backend``: Add is wrong for odd row lengths) does
  not conform, and every report names the primitive, the case and the error;
- waivers: mandatory cases cannot be waived, others can; a backend that crashes the process fails the
  case, not the suite; the pytest plugin runs one test per case; ``glow compare`` names the diverging node.
"""

from __future__ import annotations

from collections import Counter

import json
import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from glow_conformance import SUITE_VERSION
from onnx import TensorProto, helper, numpy_helper

from glow_core.ir.defs.symbolic import SYMBOLIC_ONLY_KINDS
from glow_core.ir.kinds import all_kinds
from glow_core.plugin_host import get_backend
from glow_sdk import SDK_API_VERSION
from tests.cliutil import Result, glow, save
from tests.conformance.pkgs import EXAMPLE, FIXTURES, pip_install

TIMEOUT = 900.0
#: the default tier runs every SAMPLE-th case of level full (the whole level is the `full` tier)
SAMPLE = 20


#: the tests that use ``site`` run on one worker (--dist loadgroup), which installs it once
ON_SITE = pytest.mark.xdist_group("conformance-site")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --target directory holding glow-backend-example and the broken glow-backend-wrongadd."""
    return pip_install([EXAMPLE, FIXTURES / "wrong_add_backend"], tmp_path_factory.mktemp("backends"))


def conformance(args: list[str], tmp: Path, site: Path | None = None, env: dict[str, str] | None = None) -> Result:
    return glow(["conformance", *args, "--report-dir", str(tmp / "report"), "--progress", "lines"],
                pythonpath=[site] if site else [], cwd=tmp, env=env, timeout=TIMEOUT)


def load_report(tmp: Path, partial: bool = False) -> dict[str, Any]:
    """The JSON report of a full run, or of a partial one (``-k``: ``report.partial.json``, labelled partial)."""
    data: dict[str, Any] = json.loads((tmp / "report" / f"report{'.partial' if partial else ''}.json").read_text())
    assert data["partial"] is partial and data["verdict"]["partial"] is partial
    return data


def by_id(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in data["cases"]}


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_sample_of_level_full_passes(backend: str, tmp_path: Path) -> None:
    """Every SAMPLE-th case of level full, each kind and category keeping its share: a partial run that passes."""
    listed = conformance(["--backend", backend, "--level", "full", "--list"], tmp_path)
    total = int(listed.stdout.splitlines()[-1].split(" of ")[1].split()[0])
    ids = [line.split()[0] for line in listed.stdout.splitlines()
           if line.strip() and "/" in line.split()[0] and not line.startswith(("glow-conformance", "waivers"))]
    per_category = Counter(i.split("/")[0] for i in ids)
    assert sum(per_category.values()) == total
    r = conformance(["--backend", backend, "--level", "full", "--sample", str(SAMPLE)], tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    run = sum(len(range(0, n, SAMPLE)) for n in per_category.values())  # every SAMPLE-th case of each category
    assert f"running {run} cases of {total} (partial run, sample: 1 case in {SAMPLE})" in r.stdout
    assert "PASSES THE SELECTED CASES" in r.stdout and "CONFORMS" not in r.stdout
    data = load_report(tmp_path, partial=True)
    s = data["summary"]
    assert s["fail"] == 0 and s["unsupported"] == 0 and s["total"] == run and s["pass"] + s["waived"] == run
    assert data["suite"]["options"]["sample"] == SAMPLE
    assert {c["category"] for c in data["cases"]} >= {"primitive", "high-level", "model"}


@pytest.mark.full
def test_interpreter_passes_full(tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    r = conformance(["--backend", "interpreter", "--level", "full"], tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert f"glow-conformance {SUITE_VERSION} (level full)" in r.stdout
    assert "backend 'interpreter' CONFORMS" in r.stdout
    assert "conformance: 100%" in r.stderr  # progress, as lines when stderr is not a terminal
    data = load_report(tmp_path)
    assert data["suite"] == {"name": "glow-conformance", "version": SUITE_VERSION, "level": "full",
                             "options": data["suite"]["options"]}
    b = data["backend"]
    assert (b["name"], b["distribution"], b["sdk_api_version"]) == ("interpreter", "glow-backend-interpreter", SDK_API_VERSION)
    assert b["version"] and b["distribution_version"] and data["glow"]["version"]
    assert data["platform"]["python"] and data["platform"]["numpy"] and data["platform"]["machine"]
    s = data["summary"]
    assert s["fail"] == 0 and s["unsupported"] == 0 and s["waived"] == 0 and s["pass"] == s["total"] > 4000
    # (the symbolic cases run for a backend that declares symbolic kinds; the interpreter declares none)
    symbolic = {"symbolic"} if get_backend("interpreter").symbolic_kinds() else set()
    assert set(data["categories"]) == {"primitive", "high-level", "model", "runtime"} | symbolic
    assert all("result" in c and "max_error" in c and "mandatory" in c for c in data["cases"])
    covered = {c["kind"] for c in data["cases"] if c.get("kind")}
    want = set(all_kinds()) - SYMBOLIC_ONLY_KINDS  # (made by compiles for symbolic dims: the symbolic cases)
    assert covered == want, f"kinds without a case: {sorted(want - covered)}"
    assert data["kinds_without_generator"] == []
    junit = ET.parse(tmp_path / "report" / "report.junit.xml").getroot()
    assert int(junit.get("tests", "0")) == s["total"] and junit.get("failures") == "0"
    assert "CONFORMS" in (tmp_path / "report" / "report.md").read_text()
    record_property("cases", s["total"])
    record_property("seconds", data["seconds"])
    # a filtered run into the same folder is labelled partial everywhere and leaves the full report alone
    full = {f: (tmp_path / "report" / f).read_bytes() for f in ("report.json", "report.junit.xml", "report.md")}
    part = conformance(["--backend", "interpreter", "--level", "full", "-k", "primitive/Add/float32"], tmp_path)
    assert part.returncode == 0, part.stdout[-4000:] + part.stderr[-4000:]
    assert f"running 6 cases of {s['total']} (partial run, filter: primitive/Add/float32)" in part.stdout
    verdict = part.stdout.splitlines()[-2]
    assert "PASSES THE SELECTED CASES" in verdict and f"partial run: 6 of {s['total']} cases" in verdict
    assert "CONFORMS" not in verdict and "not a conformance verdict" in verdict
    assert full == {f: (tmp_path / "report" / f).read_bytes() for f in full}
    pdata = load_report(tmp_path, partial=True)
    assert pdata["verdict"]["conformant"] is False and pdata["summary"]["total"] == 6
    assert pdata["selection"] == {"filters": ["primitive/Add/float32"], "run": 6, "total": s["total"]}
    pjunit = ET.parse(tmp_path / "report" / "report.partial.junit.xml").getroot()
    assert pjunit.get("name") == "glow-conformance (partial run)"
    assert {p.get("value") for p in pjunit.iter("property") if p.get("name") == "partial"} == {"true"}
    assert "Partial run: 6 of" in (tmp_path / "report" / "report.partial.md").read_text()


@pytest.mark.full
def test_cpu_passes_full_with_its_waivers_listed(tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    """The LLVM backend conforms at level full; what it does not pass is waived in its shipped waiver file."""
    r = conformance(["--backend", "cpu", "--level", "full"], tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "backend 'cpu' CONFORMS" in r.stdout
    data = load_report(tmp_path)
    s = data["summary"]
    assert s["fail"] == 0 and s["unsupported"] == 0 and s["pass"] + s["waived"] == s["total"] > 4000
    assert data["categories"]["model"] == {"total": 9, "pass": 9, "fail": 0, "unsupported": 0, "waived": 0,
                                           "mandatory": 9}
    waivers = data["waivers"]
    assert waivers["source"] == "shipped with backend cpu" and not waivers["unused"] and not waivers["rejected"]
    waived = [c for c in data["cases"] if c["result"] == "waived"]
    assert len(waived) == s["waived"] == sum(e["matched"] for e in waivers["entries"])
    assert all(not c["mandatory"] and c["message"] for c in waived)  # each with its reason
    record_property("cases", s["total"])
    record_property("waived", s["waived"])
    record_property("seconds", data["seconds"])


@ON_SITE
def test_example_backend_installed_from_its_pyproject_passes_core(site: Path, tmp_path: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import glow_backend_example as m; print(m.__file__)"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, check=True)
    assert Path(where.stdout.strip()).is_relative_to(site)  # the installed copy, not the source tree
    r = conformance(["--backend", "example"], tmp_path, site)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "backend 'example' CONFORMS" in r.stdout
    data = load_report(tmp_path)
    assert (data["backend"]["distribution"], data["backend"]["distribution_version"]) == ("glow-backend-example",
                                                                                         "0.1.0")
    assert data["suite"]["level"] == "core" and set(data["categories"]) == {"primitive", "model", "runtime"}
    # the optional quantized primitives the example declares run as non-mandatory core cases
    assert all(c["result"] == "pass" and (c["mandatory"] or c["id"].split("/")[1] in ("IntConv", "IntMatMul", "Requantize"))
               for c in data["cases"])
    assert data["categories"]["model"]["pass"] >= 6


@ON_SITE
def test_broken_backend_fails_and_the_reports_name_the_primitive_case_and_error(site: Path, tmp_path: Path) -> None:
    r = conformance(["--backend", "wrongadd", "-k", "primitive/Add/", "-k", "primitive/Mul/"], tmp_path, site)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "backend 'wrongadd' DOES NOT CONFORM" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "primitive/Add/float32/odd:" in ln)
    assert "FAIL (mandatory, primitive)" in line and "elements differ" in line and "expected" in line
    cases = by_id(load_report(tmp_path, partial=True))
    odd = cases["primitive/Add/float32/odd"]
    assert (odd["result"], odd["kind"], odd["elem"], odd["variant"]) == ("fail", "Add", "float32", "odd")
    assert odd["max_error"] == pytest.approx(1.0) and "got" in odd["message"] and "expected" in odd["message"]
    # wrong for some shapes only: scalars and size-1 dims are right, and so is every Mul
    assert cases["primitive/Add/float32/scalar"]["result"] == "pass"
    assert cases["primitive/Add/int64/unit"]["result"] == "pass"
    assert all(c["result"] == "pass" for i, c in cases.items() if i.startswith("primitive/Mul/"))
    junit = ET.parse(tmp_path / "report" / "report.partial.junit.xml").getroot()
    failed = {tc.get("name") for tc in junit.iter("testcase") if tc.find("failure") is not None}
    assert "primitive/Add/float32/odd" in failed and "primitive/Add/float32/scalar" not in failed
    md = (tmp_path / "report" / "report.partial.md").read_text()
    assert "`primitive/Add/float32/odd` | fail | yes |" in md
    assert not (tmp_path / "report" / "report.json").exists()  # a partial run never writes the full report


@ON_SITE
def test_mandatory_cases_cannot_be_waived_others_can(site: Path, tmp_path: Path) -> None:
    waivers = tmp_path / "waivers.txt"
    waivers.write_text("# known problems\nprimitive/Add/*: our adder is approximate\n"
                       "high-level/Softsign/*: lowered through the broken Add\nprimitive/Nope/*: stale entry\n")
    args = ["--backend", "wrongadd", "--level", "full", "--waivers", str(waivers), "-k", "high-level/Softsign/float32"]
    r = conformance([*args, "-k", "primitive/Add/float32"], tmp_path, site)
    assert r.returncode == 1, r.stdout + r.stderr
    data = load_report(tmp_path, partial=True)
    cases = by_id(data)
    soft = cases["high-level/Softsign/float32/basic"]
    assert soft["result"] == "waived" and soft["result_before_waiver"] == "fail"
    assert soft["waiver"] == "lowered through the broken Add"
    assert cases["primitive/Add/float32/odd"]["result"] == "fail"  # mandatory: the waiver does not apply
    assert "primitive/Add/float32/odd" in data["waivers"]["rejected"]
    assert data["waivers"]["unused"] == ["primitive/Nope/*"]
    assert "rejected (mandatory cases cannot be waived)" in r.stdout
    # the waived failures alone do not keep the backend from conforming
    r2 = conformance(args, tmp_path, site)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert load_report(tmp_path, partial=True)["summary"]["waived"] >= 1


@ON_SITE
def test_a_backend_that_crashes_the_process_fails_the_case_not_the_suite(site: Path, tmp_path: Path) -> None:
    r = conformance(["--backend", "wrongadd", "-k", "primitive/Sub/float32"], tmp_path, site,
                    env={"GLOW_FIXTURE_CRASH": "1"})
    assert r.returncode == 1, r.stdout + r.stderr
    cases = by_id(load_report(tmp_path, partial=True))
    large = cases["primitive/Sub/float32/large"]
    assert large["result"] == "fail" and "crashed the process" in large["message"] and "SIGSEGV" in large["message"]
    others = [c for i, c in cases.items() if i != "primitive/Sub/float32/large"]
    assert others and all(c["result"] == "pass" for c in others)  # the cases after the crash ran too


def _pytest(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=TIMEOUT, check=False)


@ON_SITE
def test_pytest_plugin_runs_one_test_per_case(site: Path, tmp_path: Path) -> None:
    bad = _pytest(["--glow-backend", "wrongadd", "--pyargs", "glow_conformance", "-k", "Add and float32"],
                  site, tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAILED" in bad.stdout and "primitive/Add/float32/odd" in bad.stdout
    assert "glow conformance" in bad.stdout and "DOES NOT CONFORM" in bad.stdout
    good = _pytest(["--glow-backend", "example", "--pyargs", "glow_conformance", "-k", "runtime or Conv"],
                   site, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert " passed" in good.stdout and "failed" not in good.stdout


def _affine_model() -> onnx.ModelProto:
    """x[3, 7] -> Mul(scale) -> Add(shift) -> Relu -> Sub(offset): Add's rows have odd length."""
    rng = np.random.default_rng(3)
    consts = [numpy_helper.from_array(rng.standard_normal(7).astype(np.float32), n) for n in ("s", "b", "c")]
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"], name="scale"),
             helper.make_node("Add", ["m", "b"], ["a"], name="shift"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Sub", ["r", "c"], ["y"], name="offset")]
    graph = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 7])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@ON_SITE
def test_compare_names_the_first_diverging_node(site: Path, tmp_path: Path) -> None:
    model = save(_affine_model(), tmp_path / "affine.onnx")
    r = glow(["compare", str(model), "--backend", "wrongadd", "--reference", "interpreter"], pythonpath=[site],
             cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    first = next(ln for ln in lines if ln.startswith("first divergence:"))
    assert "(Add" in first and "'shift'" in first
    i = lines.index(first)
    assert lines[i + 1].strip().startswith("wrongadd:") and "min" in lines[i + 1] and "mean" in lines[i + 1]
    assert lines[i + 2].strip().startswith("interpreter:") and "std" in lines[i + 2]
    assert "elements differ" in lines[i + 3]
    ok = glow(["compare", str(model), "--backend", "example"], pythonpath=[site], cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "no divergence: every value agrees" in ok.stdout


def test_unknown_backend_is_one_line(tmp_path: Path) -> None:
    r = conformance(["--backend", "nosuch"], tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.error_line().startswith("glow: error: unknown backend 'nosuch'; choose one of:")


def test_onnx_node_tests_are_optional_cases(tmp_path: Path) -> None:
    from glow_tools.nodetests import default_root

    root = default_root()
    if root is None or not root.is_dir():
        pytest.skip("the ONNX node tests are not beside the checkout (../shared/onnx-node-tests)")
    r = conformance(["--backend", "interpreter-primitives", "--onnx-node-tests", str(root), "-k", "onnx-node/test_relu",
                     "-k", "onnx-node/test_softmax_axis_0"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    cases = load_report(tmp_path, partial=True)["cases"]
    assert cases and all(c["category"] == "onnx-node" and not c["mandatory"] for c in cases)
    assert {c["id"] for c in cases} >= {"onnx-node/test_relu", "onnx-node/test_softmax_axis_0"}
    missing = conformance(["--backend", "interpreter", "--onnx-node-tests", str(tmp_path / "nope")], tmp_path)
    assert missing.returncode == 1 and "is not a directory" in missing.error_line()


def test_no_selected_case_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    r = conformance(["--backend", "interpreter", "-k", "nosuchcase"], tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "CONFORMS" not in r.stdout
    assert r.error_line() == ("glow: error: no conformance case of backend 'interpreter' matches -k nosuchcase "
                              "(of 969 cases at level core) ('glow conformance -b interpreter --list' lists the "
                              "case ids)")
    assert not (tmp_path / "report").exists()


def test_a_bad_report_dir_fails_before_the_first_case(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    r = glow(["conformance", "-b", "interpreter", "--report-dir", str(tmp_path / "file" / "reports"),
              "--progress", "lines"], cwd=tmp_path, timeout=TIMEOUT)
    assert r.returncode == 1 and "running" not in r.stdout and "conformance:" not in r.stderr
    assert r.error_line() == (f"glow: error: cannot write the conformance reports to '{tmp_path / 'file' / 'reports'}"
                              "': Not a directory (choose another --report-dir)")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        r = glow(["conformance", "-b", "interpreter", "--report-dir", str(locked), "--progress", "lines"],
                 cwd=tmp_path, timeout=TIMEOUT)
        assert r.returncode == 1 and "conformance:" not in r.stderr
        assert r.error_line().startswith(f"glow: error: cannot write the conformance reports to '{locked}': "
                                         "Permission denied")


def _default_sigint() -> None:
    """A child gets Python's KeyboardInterrupt only if SIGINT is not ignored when it starts, and a pytest-xdist
    worker ignores it (its controller handles Ctrl-C): restore the default, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_exit_130_and_writes_no_report(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it (the worker process included)."""
    env = {k: v for k, v in os.environ.items() if k != "GLOW_TRACEBACK"}
    proc = subprocess.Popen([sys.executable, "-m", "glow_cli", "conformance", "-b", "interpreter", "--level",
                             "full", "--report-dir", str(tmp_path / "report"), "--progress", "lines"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                            start_new_session=True, preexec_fn=_default_sigint)
    assert proc.stderr is not None
    seen = []
    while not (seen and seen[-1].startswith("conformance:")):  # the first progress line: cases run, in the worker
        seen.append(proc.stderr.readline())
        assert seen[-1], "".join(seen)
    assert seen[-1].startswith("conformance:  10%"), seen
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, out + err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("conformance:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    m = re.fullmatch(r"glow: interrupted after (\d+) of (\d+) cases; no report written", lines[0])
    assert m is not None and 0 < int(m.group(1)) < int(m.group(2)), lines[0]
    assert list((tmp_path / "report").iterdir()) == []
