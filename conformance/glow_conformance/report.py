"""The report of a conformance run: verdict, summary by category, every case; JSON, JUnit XML and Markdown.

The JSON report (``report.json``) is the complete record (see
docs/conformance.md for its schema): the suite version and level, the
backend's name, version and distribution, the glow version, the platform,
and every case with its result, whether it is mandatory, its max error, the
tolerance it was held to and its message.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glow_conformance.model import CATEGORIES, RESULTS, CaseRecord, Result
from glow_core.errors import GlowError

#: report file names inside the report directory (a full run)
FILES = {"json": "report.json", "junit": "report.junit.xml", "markdown": "report.md"}
#: report file names of a partial run (``-k``): never over the full run's reports
PARTIAL_FILES = {"json": "report.partial.json", "junit": "report.partial.junit.xml", "markdown": "report.partial.md"}


def report_paths(directory: str | Path, partial: bool) -> dict[str, Path]:
    """The paths the reports of a run (full or partial) are written to."""
    d = Path(directory)
    return {fmt: d / name for fmt, name in (PARTIAL_FILES if partial else FILES).items()}


def check_report_dir(directory: str | Path) -> Path:
    """Create ``directory`` if needed and make sure files can be written there; a one-line GlowError if not."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d, prefix=".glow-conformance-", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        why = e.strerror or type(e).__name__
        where = f" ('{e.filename}')" if e.filename and str(e.filename) != str(d) else ""
        raise GlowError(f"cannot write the conformance reports to '{d}': {why}{where}",
                        hint="choose another --report-dir") from None
    return d
#: failures listed in the terminal summary
SHOW_FAILURES = 25


@dataclass
class Report:
    suite_version: str
    level: str
    backend: dict[str, Any]
    reference: dict[str, Any]
    glow_version: str
    platform: dict[str, str]
    started: str
    seconds: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)
    records: list[CaseRecord] = field(default_factory=list)
    waivers: dict[str, Any] = field(default_factory=dict)
    #: kinds of the kind table the suite has no generator for (a suite gap, reported, never passed)
    kinds_without_generator: list[str] = field(default_factory=list)
    #: how many cases the level holds before ``-k`` (None: as many as were recorded)
    total_cases: int | None = None

    # -- verdict -------------------------------------------------------------------
    @property
    def blockers(self) -> list[CaseRecord]:
        """The cases that keep the backend from conforming: mandatory ones not passing, unwaived failures."""
        return [r for r in self.records if r.blocks_conformance]

    @property
    def ok(self) -> bool:
        """Every recorded case passes or is excused (the exit status of a run, partial or not)."""
        return bool(self.records) and not self.blockers

    @property
    def partial(self) -> bool:
        """Fewer cases were run than the level holds (``-k``, pytest deselection): no conformance verdict."""
        return self.total_cases is not None and len(self.records) < self.total_cases

    @property
    def conformant(self) -> bool:
        """The verdict: a full run in which nothing keeps the backend from conforming."""
        return self.ok and not self.partial

    def scope(self) -> str:
        """``partial run: N of M cases (filter: ...)`` or empty for a full run."""
        if not self.partial:
            return ""
        filters = self.options.get("filters") or []
        how = f", filter: {' '.join(filters)}" if filters else ""
        sample = int(self.options.get("sample") or 1)
        how += f", sample: 1 case in {sample}" if sample > 1 else ""
        return f"partial run: {len(self.records)} of {self.total_cases} cases{how}"

    def counts(self) -> dict[str, int]:
        c = Counter(r.result.value for r in self.records)
        return {res.value: c.get(res.value, 0) for res in RESULTS}

    def by_category(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for cat in CATEGORIES:
            recs = [r for r in self.records if r.case.category == cat]
            if not recs:
                continue
            c = Counter(r.result.value for r in recs)
            out[cat] = {"total": len(recs), **{res.value: c.get(res.value, 0) for res in RESULTS},
                        "mandatory": sum(1 for r in recs if r.mandatory)}
        return out

    def verdict(self) -> str:
        name = self.backend.get("name", "?")
        head = f"glow-conformance {self.suite_version}, level {self.level}: backend '{name}'"
        if not self.records:
            return f"{head}: NO VERDICT (no case was run)"
        if self.ok and self.partial:
            return (f"{head} PASSES THE SELECTED CASES ({self.counts()['pass']} of {len(self.records)} pass; "
                    f"{self.scope()}): not a conformance verdict")
        if self.conformant:
            return f"{head} CONFORMS ({self.counts()['pass']} of {len(self.records)} cases pass)"
        mand = sum(1 for r in self.blockers if r.mandatory)
        other = len(self.blockers) - mand
        why = []
        if mand:
            why.append(f"{mand} mandatory case(s) do not pass")
        if other:
            why.append(f"{other} other case(s) fail without a waiver")
        tail = f" ({self.scope()})" if self.partial else ""
        return f"{head} DOES NOT CONFORM: " + ", ".join(why) + tail

    # -- text --------------------------------------------------------------------------
    def summary_lines(self) -> list[str]:
        cols = ("CATEGORY", "TOTAL", "PASS", "FAIL", "UNSUPPORTED", "WAIVED", "MANDATORY")
        rows = [(cat, str(c["total"]), str(c["pass"]), str(c["fail"]), str(c["unsupported"]), str(c["waived"]),
                 str(c["mandatory"])) for cat, c in self.by_category().items()]
        totals = self.counts()
        rows.append(("all", str(len(self.records)), str(totals["pass"]), str(totals["fail"]),
                     str(totals["unsupported"]), str(totals["waived"]),
                     str(sum(1 for r in self.records if r.mandatory))))
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(cols)]
        fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        lines = [fmt(cols)] + [fmt(r) for r in rows]
        blockers = self.blockers
        if blockers:
            lines += ["", f"cases that keep the backend from conforming ({len(blockers)}):"]
            for r in blockers[:SHOW_FAILURES]:
                tag = "mandatory, " if r.mandatory else ""
                lines.append(f"  {r.result.value.upper()} ({tag}{r.case.category}) {r.case.id}: {r.message}")
            if len(blockers) > SHOW_FAILURES:
                lines.append(f"  ... and {len(blockers) - SHOW_FAILURES} more (see the reports)")
        if self.kinds_without_generator:
            lines += ["", "note: the suite has no case generator for: " + ", ".join(self.kinds_without_generator)]
        for key, what in (("rejected", "rejected (mandatory cases cannot be waived)"), ("unused", "unused")):
            items = self.waivers.get(key) or []
            if items:
                lines.append(f"note: {len(items)} waiver(s) {what}: " + ", ".join(items[:5])
                             + (" ..." if len(items) > 5 else ""))
        lines += ["", self.verdict()]
        return lines

    # -- JSON ------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        return {
            "suite": {"name": "glow-conformance", "version": self.suite_version, "level": self.level,
                      "options": self.options},
            "backend": self.backend,
            "reference": self.reference,
            "glow": {"version": self.glow_version},
            "platform": self.platform,
            "started": self.started,
            "seconds": round(self.seconds, 3),
            "partial": self.partial,
            "selection": {"filters": list(self.options.get("filters") or []), "run": len(self.records),
                          "total": self.total_cases if self.total_cases is not None else len(self.records)},
            "verdict": {"conformant": self.conformant, "partial": self.partial, "text": self.verdict(),
                        "blocking_cases": [r.case.id for r in self.blockers]},
            "summary": {"total": len(self.records), **self.counts(),
                        "mandatory": sum(1 for r in self.records if r.mandatory)},
            "categories": self.by_category(),
            "waivers": self.waivers,
            "kinds_without_generator": self.kinds_without_generator,
            "cases": [_case_dict(r) for r in self.records],
        }

    def write(self, directory: str | Path) -> dict[str, Path]:
        """Write report.json, report.junit.xml and report.md (a partial run: report.partial.*); return the paths."""
        check_report_dir(directory)
        paths = report_paths(directory, self.partial)
        try:
            paths["json"].write_text(json.dumps(self.as_dict(), indent=1, default=str) + "\n")
            paths["junit"].write_bytes(self.junit_xml())
            paths["markdown"].write_text(self.markdown())
        except OSError as e:
            raise GlowError(f"cannot write the conformance report '{e.filename}': {e.strerror or e}",
                            hint="choose another --report-dir") from None
        return paths

    # -- JUnit XML -----------------------------------------------------------------------------
    def junit_xml(self) -> bytes:
        root = ET.Element("testsuites", name="glow-conformance (partial run)" if self.partial else "glow-conformance",
                          tests=str(len(self.records)),
                          failures=str(len(self.blockers)), time=f"{self.seconds:.3f}")
        for cat in CATEGORIES:
            recs = [r for r in self.records if r.case.category == cat]
            if not recs:
                continue
            fails = sum(1 for r in recs if r.blocks_conformance)
            skipped = sum(1 for r in recs if not r.blocks_conformance and r.result is not Result.PASS)
            suite = ET.SubElement(root, "testsuite", name=f"glow-conformance.{cat}", tests=str(len(recs)),
                                  failures=str(fails), skipped=str(skipped), errors="0",
                                  time=f"{sum(r.seconds for r in recs):.3f}")
            props = ET.SubElement(suite, "properties")
            for k, v in (("suite_version", self.suite_version), ("level", self.level),
                         ("backend", self.backend.get("name", "")), ("backend_version", self.backend.get("version", "")),
                         ("distribution", self.backend.get("distribution", "")), ("glow_version", self.glow_version),
                         ("partial", str(self.partial).lower()), ("scope", self.scope() or "full run")):
                ET.SubElement(props, "property", name=k, value=str(v))
            for r in recs:
                tc = ET.SubElement(suite, "testcase", classname=f"glow_conformance.{cat}", name=r.case.id,
                                   time=f"{r.seconds:.4f}")
                if r.blocks_conformance:
                    label = "mandatory " if r.mandatory else ""
                    f = ET.SubElement(tc, "failure", message=f"{label}{r.result.value}: {r.message}"[:1000],
                                      type=r.result.value)
                    f.text = r.message
                elif r.result is Result.WAIVED:
                    ET.SubElement(tc, "skipped", message=f"waived: {r.waiver} ({r.raw.value if r.raw else ''}: "
                                                         f"{r.message})"[:1000])
                elif r.result is Result.UNSUPPORTED:
                    ET.SubElement(tc, "skipped", message=f"unsupported: {r.message}"[:1000])
        ET.indent(root)
        return ET.tostring(root, encoding="utf-8", xml_declaration=True)

    # -- Markdown ------------------------------------------------------------------------------
    def markdown(self) -> str:
        b = self.backend
        lines = [f"# glow-conformance {self.suite_version}: backend `{b.get('name')}`", "",
                 f"**{self.verdict()}**", "",
                 *([f"> **{self.scope()[:1].upper()}{self.scope()[1:]}.** Only the selected cases ran: this is not a conformance "
                    "report (a full run writes `report.md`).", ""] if self.partial else []),
                 "| | |", "|---|---|",
                 f"| suite | glow-conformance {self.suite_version}, level `{self.level}` |",
                 (f"| backend | `{b.get('name')}` {b.get('version', '')} ({b.get('distribution', '')} "
                  f"{b.get('distribution_version', '')}), SDK API {b.get('sdk_api_version', '')} |"),
                 f"| reference | `{self.reference.get('name')}` {self.reference.get('version', '')} |",
                 f"| glow | {self.glow_version} |",
                 (f"| platform | {self.platform.get('python', '')}, {self.platform.get('system', '')} "
                  f"{self.platform.get('machine', '')}, numpy {self.platform.get('numpy', '')} |"),
                 f"| started | {self.started} ({self.seconds:.1f} s) |", "",
                 "## Summary", "", "| category | total | pass | fail | unsupported | waived | mandatory |",
                 "|---|---:|---:|---:|---:|---:|---:|"]
        for cat, c in self.by_category().items():
            lines.append(f"| {cat} | {c['total']} | {c['pass']} | {c['fail']} | {c['unsupported']} | "
                         f"{c['waived']} | {c['mandatory']} |")
        blockers = self.blockers
        if blockers:
            lines += ["", f"## Cases that keep the backend from conforming ({len(blockers)})", "",
                      "| case | result | mandatory | max error | message |", "|---|---|---|---:|---|"]
            lines += [f"| `{r.case.id}` | {r.result.value} | {'yes' if r.mandatory else 'no'} | "
                      f"{_num(r.max_error)} | {_md(r.message)} |" for r in blockers]
        waived = [r for r in self.records if r.result is Result.WAIVED]
        if waived:
            lines += ["", f"## Waived ({len(waived)})", "", "| case | was | reason | message |", "|---|---|---|---|"]
            lines += [f"| `{r.case.id}` | {r.raw.value if r.raw else ''} | {_md(r.waiver)} | {_md(r.message)} |"
                      for r in waived]
        unsupported = [r for r in self.records if r.result is Result.UNSUPPORTED and not r.blocks_conformance]
        if unsupported:
            groups = Counter("/".join(r.case.id.split("/")[:3]) for r in unsupported)
            lines += ["", f"## Unsupported ({len(unsupported)} cases; never counted as passing)", "",
                      "| kind / element kind | cases |", "|---|---:|"]
            lines += [f"| `{g}` | {n} |" for g, n in sorted(groups.items())]
        if self.kinds_without_generator:
            lines += ["", "No case generator for: " + ", ".join(self.kinds_without_generator)]
        lines += ["", f"Every case, with its max error and tolerance: `{FILES['json']}`.", ""]
        return "\n".join(lines)


def _num(x: float | None) -> str:
    return "" if x is None else ("inf" if math.isinf(x) else f"{x:.3g}")


def _md(text: str) -> str:
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= 300 else flat[:297] + "..."


def _case_dict(r: CaseRecord) -> dict[str, Any]:
    c = r.case
    d: dict[str, Any] = {"id": c.id, "category": c.category, "result": r.result.value, "mandatory": r.mandatory,
                         "level": c.level.value}
    for key, val in (("kind", c.kind), ("elem", c.elem), ("variant", c.variant)):
        if val:
            d[key] = val
    d["max_error"] = None if r.max_error is None or math.isnan(r.max_error) else (
        "inf" if math.isinf(r.max_error) else r.max_error)
    if r.tolerance:
        d["tolerance"] = r.tolerance
    if r.message:
        d["message"] = r.message
    if r.waiver:
        d["waiver"] = r.waiver
        d["result_before_waiver"] = r.raw.value if r.raw else None
    nodes = r.details.get("nodes")
    if nodes:
        d["nodes"] = nodes
    d["seconds"] = round(r.seconds, 4)
    return d


__all__ = ["FILES", "Report"]
