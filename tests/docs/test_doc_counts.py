"""Counts and signatures the docs quote, compared with the code.

- docs/python-api.md: the ``glow_core.compile`` signature block equals ``inspect.signature``; the session's
  method table names exactly the public methods of ``InferenceSession`` (with their parameters), its
  ``SessionOptions`` table the dataclass's fields and defaults; the session example runs.
- docs/vendor-guide.md and docs/conformance.md: the mandatory primitives, the scaffold's kinds and its
  conformance case counts per level and category (collected from the suite for the scaffold's backend,
  without running a case); the full level's pass / unsupported figures come from a run, so the exhaustive
  tier (``tox -e full``) checks them.
- docs/architecture.md: the number of light zoo models.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import inspect
import re
from typing import Any

import pytest

import glow_core
from glow_core import api, zoo
from glow_core.session import InferenceSession, SessionOptions
from tests.docs.mdblocks import DOCS

PYTHON_API = (DOCS / "python-api.md").read_text(encoding="utf-8")
GUIDE = (DOCS / "vendor-guide.md").read_text(encoding="utf-8")
CONFORMANCE = (DOCS / "conformance.md").read_text(encoding="utf-8")


# -- docs/python-api.md ----------------------------------------------------------------------------------
def documented_signature(text: str, call: str) -> list[tuple[str, str | None, bool]]:
    """(name, default text or None, keyword-only) per parameter of the ``call(...)`` block of a page."""
    body = text[text.index(f"```python\n{call}(\n") + len(f"```python\n{call}(\n"):]
    body = body[:body.index("\n)")]
    params: list[tuple[str, str | None, bool]] = []
    keyword_only = False
    for line in body.splitlines():
        item = line.split("#")[0].strip().rstrip(",")
        if item == "*":
            keyword_only = True
        elif item:
            name, _, default = item.partition("=")
            params.append((name.strip(), default.strip() or None, keyword_only))
    return params


def test_the_compile_signature_in_the_docs_is_the_code() -> None:
    live = [(p.name, None if p.default is p.empty else repr(p.default), p.kind is p.KEYWORD_ONLY)
            for p in inspect.signature(api.compile).parameters.values()]
    assert documented_signature(PYTHON_API, "glow_core.compile") == live
    assert glow_core.compile is api.compile  # help(glow_core.compile) shows this signature


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of the Markdown table whose header row starts with ``header``."""
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_the_session_methods_in_the_docs_are_the_code() -> None:
    documented = {}
    for cells in _table_rows(PYTHON_API, "| method | what it does |"):
        m = re.fullmatch(r"`(\w+)\((.*?)\)(?: -> .*)?`", cells[0])
        assert m, cells[0]
        documented[m.group(1)] = [p.split("=")[0].strip() for p in m.group(2).split(",") if p.strip()]
    public = {n: f for n, f in inspect.getmembers(InferenceSession, inspect.isfunction) if not n.startswith("_")}
    assert set(documented) == set(public)
    for name, params in documented.items():
        assert params == list(inspect.signature(public[name]).parameters)[1:], name


def test_the_session_options_in_the_docs_are_the_code() -> None:
    documented = {c[0].strip("`"): c[1].strip("`") for c in _table_rows(PYTHON_API, "| field | default | meaning |")}
    fields = {f.name: f.default for f in dataclasses.fields(SessionOptions)}
    assert set(documented) == set(fields)
    for name, default in fields.items():
        shown = documented[name]
        named = shown.endswith(f".{getattr(default, 'name', '-')}")  # GraphOptimizationLevel.ORT_ENABLE_ALL
        assert named or ast.literal_eval(shown) == default, (name, shown)


def test_the_session_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("glow_backend_cpu")
    blocks = [b.split("```", 1)[0] for b in PYTHON_API.split("```python\n")[1:]]
    (example,) = [b for b in blocks if "glow_core.InferenceSession(\"zoo:digits\"" in b]
    namespace: dict[str, Any] = {}
    exec(compile(example, "docs/python-api.md", "exec"), namespace)  # noqa: S102  (our own doc's example)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "image tensor(float) [1, 1, 8, 8]"  # the comment in the example says so
    assert namespace["probs"].shape == (1, 10) and out[1] == str(namespace["probs"].argmax())


# -- docs/vendor-guide.md, docs/conformance.md -------------------------------------------------------------
def suite_counts(level: str) -> tuple[dict[str, int], dict[str, int]]:
    """(total, mandatory) cases per category of the scaffold's backend at ``level``, "all" included."""
    from glow_conformance.model import Level
    from glow_conformance.suite import model_cases, node_cases, runtime_cases
    from glow_tools.scaffold.backend import TemplateBackend

    cases = runtime_cases() + node_cases(TemplateBackend(), Level(level), []) + model_cases(Level(level))
    total = collections.Counter(c.category for c in cases)
    mandatory = collections.Counter(c.category for c in cases if c.mandatory)
    total["all"], mandatory["all"] = len(cases), sum(mandatory.values())
    return dict(total), dict(mandatory)


def summary_tables(text: str) -> list[dict[str, list[int]]]:
    """Every ``CATEGORY TOTAL PASS FAIL UNSUPPORTED WAIVED MANDATORY`` table of a page: category -> numbers."""
    tables = []
    for block in re.findall(r"CATEGORY +TOTAL +PASS.*?\n((?:[a-z-]+ +[\d ]+\n)+)", text):
        tables.append({ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in block.splitlines()})
    return tables


def test_the_guide_counts_kinds_as_the_sdk_and_the_scaffold_do() -> None:
    from glow_sdk.primitives import mandatory_primitives, optional_primitives
    from glow_tools.scaffold.backend import TemplateBackend

    mandatory, optional = len(mandatory_primitives()), len(optional_primitives())
    scaffold = len(TemplateBackend().capabilities())
    assert f"**mandatory primitive set** ({mandatory} kinds, listed by `glow sdk info`" in GUIDE
    assert f"the {optional} optional quantized primitives (IntConv, IntMatMul, Requantize): {scaffold} kinds" in GUIDE
    assert re.search(rf"# xyz +ok +{scaffold} +glow-backend-xyz", GUIDE)


def test_the_core_counts_of_the_guide_and_the_conformance_page() -> None:
    total, mandatory = suite_counts("core")
    for page in (GUIDE, CONFORMANCE):
        core = summary_tables(page)[0]
        assert set(core) == set(total)
        for category, numbers in core.items():
            assert (numbers[0], numbers[1], numbers[-1]) == (total[category], total[category],
                                                             mandatory.get(category, 0)), category
    n = total["all"]
    assert f"running {n} cases" in GUIDE and f"CONFORMS ({n} of {n} cases pass)" in GUIDE
    assert f"still conforms ({n} of {n} cases)" in GUIDE
    quoted = re.findall(r"running (\d+) cases|of (\d+) cases at level core|\((\d+) of \d+ cases pass|"
                        r"\"total\": (\d+)\}|\"run\": (\d+), \"total\": (\d+)", CONFORMANCE)
    assert {int(x) for found in quoted for x in found if x} - {6} == {n}, quoted  # (6: a partial run's share)


def test_the_full_level_counts_of_the_guide() -> None:
    core, _ = suite_counts("core")
    total, mandatory = suite_counts("full")
    full = summary_tables(GUIDE)[1]
    assert {c: (v[0], v[-1]) for c, v in full.items()} == {c: (total[c], mandatory.get(c, 0)) for c in total}
    for numbers in full.values():
        assert numbers[1] + numbers[2] + numbers[3] + numbers[4] == numbers[0]  # pass + fail + unsupported + waived
    assert f"MatMul on int32 and int64, {total['primitive'] - core['primitive']} cases" in GUIDE
    assert f"({total['high-level']} cases for the scaffold)" in GUIDE
    unsupported, passed = full["all"][3], full["all"][1]
    assert f"with {unsupported} cases reported\n`unsupported` ({passed} of {total['all']} pass)" in GUIDE


@pytest.mark.full
def test_the_full_level_outcomes_of_the_guide(tmp_path: Any) -> None:
    """The full level run on the scaffold's backend: the guide's pass / unsupported figures (minutes)."""
    from glow_conformance.suite import run_suite
    from glow_core import plugin_host
    from glow_sdk import BackendSpec, hookimpl
    from glow_tools.scaffold.backend import SDK_API, TemplateBackend

    class Plugin:
        @hookimpl
        def glow_backends(self) -> list[BackendSpec]:
            return [BackendSpec("doc-scaffold", TemplateBackend, sdk_api_version=SDK_API)]

    plugin_host.registry().register_plugin(Plugin(), "doc-scaffold")
    try:
        report = run_suite("doc-scaffold", "full", progress="off")
    finally:
        plugin_host.reset_registry()
    got = {c: [v["total"], v["pass"], v["fail"], v["unsupported"], v["waived"], v["mandatory"]]
           for c, v in report.by_category().items()}
    got["all"] = [sum(v[i] for v in got.values()) for i in range(6)]
    assert summary_tables(GUIDE)[1] == got
    eight_bit = sum(1 for r in report.records if r.result.value == "unsupported"
                    and str(getattr(r.case.elem, "value", r.case.elem)) in ("int8", "uint8"))
    assert f"in 8-bit integers ({eight_bit} cases)" in GUIDE


# -- docs/architecture.md ----------------------------------------------------------------------------------
def test_the_architecture_page_counts_the_zoo_models() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    assert f"the {len(zoo.MODELS)} light model-zoo models" in text
