"""Collect the cases for a backend and a level, run them, apply waivers, build the report.

    from glow_conformance import run_suite
    report = run_suite("xyz", level="core")            # -> Report
    report.conformant, report.summary_lines(), report.write("reports/")

The backend is reached by name through the plugin registry, like a user
reaches it; the reference is ``interpreter`` (or ``GLOW_REFERENCE_BACKEND``).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glow_conformance.cases_models import model_cases
from glow_conformance.cases_nodetests import node_test_cases
from glow_conformance.cases_ops import node_cases
from glow_conformance.cases_runtime import runtime_cases
from glow_conformance.cases_symbolic import symbolic_cases
from glow_conformance.model import SUITE_VERSION, Case, CaseRecord, Context, Level, Outcome, Result
from glow_conformance.progress import Progress
from glow_conformance.report import Report, check_report_dir
from glow_conformance.waivers import Waiver, find_waiver, load_waivers, parse_waivers
from glow_core.errors import GlowError, UnsupportedError


@dataclass
class SuiteOptions:
    level: Level = Level.CORE
    #: substrings of case ids; a case runs when its id contains any of them ("~x" excludes ids containing x)
    filters: Sequence[str] = ()
    #: a waiver file; None: the backend's own (``Backend.conformance_waivers()``), if it ships one
    waivers: str | Path | None = None
    onnx_node_tests: str | Path | None = None
    #: lower every high-level kind, even those the backend runs natively (tests the lowering path)
    force_lowering: bool = False
    seed: int = 0
    reference: str | None = None
    #: progress on stderr: None (auto: a bar on a terminal, lines otherwise), "bar", "lines", "off"
    progress: str | None = "off"
    node_test_timeout: float = 60.0
    #: run the cases in worker processes: a backend that crashes the process fails the case, not the suite
    isolate: bool = False
    #: run every ``sample``-th selected case only (1: all); a sampled run is partial
    sample: int = 1
    extra: dict[str, object] = field(default_factory=dict)


def select(cases: list[Case], filters: Sequence[str], sample: int = 1) -> list[Case]:
    """``-k`` filtering: keep ids containing any positive filter (all if none), drop ids containing a ``~`` one;
    then every ``sample``-th case of each category of what is left, from its first (in suite order: each kind
    keeps its share, and a small category, such as the 9 models, is never left out by where the stride falls)."""
    pos = [f for f in filters if f and not f.startswith("~")]
    neg = [f[1:] for f in filters if f.startswith("~") and len(f) > 1]
    kept = [c for c in cases if (not pos or any(p in c.id for p in pos)) and not any(n in c.id for n in neg)]
    if sample <= 1:
        return kept
    seen: dict[str, int] = {}
    out = []
    for c in kept:
        i = seen[c.category] = seen.get(c.category, -1) + 1
        if i % sample == 0:
            out.append(c)
    return out


def collect(backend_name: str, options: SuiteOptions) -> tuple[list[Case], Context, list[str]]:
    """The cases of ``options.level`` for the backend (filtered), the context to run them, kinds without generator."""
    cases, ctx, missing = collect_all(backend_name, options)
    return select(cases, options.filters, options.sample), ctx, missing


def collect_all(backend_name: str, options: SuiteOptions) -> tuple[list[Case], Context, list[str]]:
    """Every case of ``options.level`` for the backend (before ``-k``), the context, kinds without generator."""
    from glow_core.plugin_host import REFERENCE_BACKEND, get_backend

    backend = get_backend(backend_name)
    ref_name = options.reference or REFERENCE_BACKEND
    reference = get_backend(ref_name)
    missing: list[str] = []
    cases = runtime_cases() + (symbolic_cases() if backend.symbolic_kinds() else []) + \
        node_cases(backend, options.level, missing) + model_cases(options.level)
    if options.onnx_node_tests is not None:
        cases += node_test_cases(Path(options.onnx_node_tests))
    ctx = Context(backend, reference, backend_name=backend_name, reference_name=ref_name,
                  force_lowering=options.force_lowering, seed=options.seed,
                  node_test_timeout=options.node_test_timeout)
    return cases, ctx, missing


class NoCasesError(GlowError):
    """The options select no case: nothing would be tested, so nothing may be reported as conforming."""


def no_cases_error(backend: str, options: SuiteOptions, total: int) -> NoCasesError:
    if options.filters:
        return NoCasesError(f"no conformance case of backend '{backend}' matches -k {' -k '.join(options.filters)} "
                            f"(of {total} cases at level {options.level.value})",
                            hint=f"'glow conformance -b {backend} --list' lists the case ids")
    return NoCasesError(f"the conformance suite has no case for backend '{backend}' at level {options.level.value}")


def run_case(case: Case, ctx: Context) -> tuple[Outcome, float]:
    """Run one case; any exception is an outcome (a broken backend never stops the suite)."""
    t0 = time.perf_counter()
    try:
        with np.errstate(all="ignore"):
            out = case.run(ctx)
    except UnsupportedError as e:
        out = Outcome(Result.UNSUPPORTED, e.one_line())
    except GlowError as e:
        out = Outcome(Result.FAIL, f"{type(e).__name__}: {e.one_line()}")
    except Exception as e:  # noqa: BLE001
        last = traceback.extract_tb(e.__traceback__)[-1:] or []
        where = f" (at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
        out = Outcome(Result.FAIL, f"{type(e).__name__}: {' '.join(str(e).split())}{where}")
    return out, time.perf_counter() - t0


def record(case: Case, out: Outcome, seconds: float, waivers: list[Waiver]) -> CaseRecord:
    mandatory = case.mandatory if out.mandatory is None else out.mandatory
    rec = CaseRecord(case, out.result, mandatory, out.message, out.max_error, out.tolerance, seconds,
                     details=out.details)
    if out.result in (Result.FAIL, Result.UNSUPPORTED):
        w = find_waiver(waivers, case.id)
        if w is not None:
            if mandatory:
                w.rejected.append(case.id)
            else:
                w.matched.append(case.id)
                rec.raw, rec.result, rec.waiver = out.result, Result.WAIVED, w.reason
    return rec


def _waivers(backend_name: str, options: SuiteOptions) -> tuple[list[Waiver], str]:
    if options.waivers is not None:
        return load_waivers(options.waivers), str(options.waivers)
    from glow_core.plugin_host import get_backend

    text = get_backend(backend_name).conformance_waivers()
    if text:
        return parse_waivers(text, f"<waivers of {backend_name}>"), f"shipped with backend {backend_name}"
    return [], ""


def _identity(name: str) -> dict[str, object]:
    from glow_core.plugin_host import get_backend, registry

    rec = registry().record(name)
    be = get_backend(name)
    return {"name": name, "version": str(getattr(be, "version", "")),
            "distribution": rec.distribution if rec is not None else "",
            "distribution_version": rec.dist_version if rec is not None else "",
            "sdk_api_version": rec.spec.sdk_api_version if rec is not None and rec.spec is not None else None,
            "description": rec.spec.description if rec is not None and rec.spec is not None else ""}


def _platform() -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return ""

    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "system": platform.system(), "release": platform.release(), "machine": platform.machine(),
            "processor": platform.processor(), "numpy": np.__version__, "onnx": version("onnx"),
            "executable": sys.executable}


def run_suite(backend: str, level: str | Level = Level.CORE, *, filters: Sequence[str] = (),
              waivers: str | Path | None = None, onnx_node_tests: str | Path | None = None,
              report_dir: str | Path | None = None, progress: str | None = "off", force_lowering: bool = False,
              seed: int = 0, reference: str | None = None, isolate: bool = False) -> Report:
    """Run the suite on backend ``backend`` (by registry name); write the reports when ``report_dir`` is given."""
    opts = SuiteOptions(Level(level), tuple(filters), waivers, onnx_node_tests, force_lowering, seed, reference,
                        progress, isolate=isolate)
    return Suite(backend, opts).run(report_dir)


class Suite:
    def __init__(self, backend: str, options: SuiteOptions) -> None:
        from glow_core import __version__ as glow_version

        self.backend_name = backend
        self.options = options
        every, self.ctx, self.missing = collect_all(backend, options)
        #: the number of cases at this level before ``-k``: a run of fewer is partial
        self.total_cases = len(every)
        self.cases = select(every, options.filters, options.sample)
        self.waivers, self.waiver_source = _waivers(backend, options)
        self.report = Report(SUITE_VERSION, options.level.value, _identity(backend),
                             _identity(self.ctx.reference_name), glow_version, _platform(),
                             _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                             options={"filters": list(options.filters), "sample": options.sample,
                                      "force_lowering": options.force_lowering,
                                      "seed": options.seed, "onnx_node_tests": str(options.onnx_node_tests or ""),
                                      "waivers": self.waiver_source, "isolate": options.isolate},
                             kinds_without_generator=sorted(self.missing), total_cases=self.total_cases)

    def run(self, report_dir: str | Path | None = None) -> Report:
        """Run the selected cases; write the reports into ``report_dir`` (``report.partial.*`` for a partial run).

        Raises :class:`NoCasesError` when no case is selected, a ``GlowError``
        before the first case when ``report_dir`` cannot be written, and
        ``KeyboardInterrupt("after N of M cases; no report written")`` when
        interrupted (nothing is written then).
        """
        if not self.cases:
            raise no_cases_error(self.backend_name, self.options, self.total_cases)
        if report_dir is not None:
            check_report_dir(report_dir)
        t0 = time.perf_counter()
        prog = Progress(len(self.cases), self.options.progress)

        def done(case: Case, out: Outcome, seconds: float) -> None:
            rec = record(case, out, seconds, self.waivers)
            self.report.records.append(rec)
            prog.update(case.id, rec.blocks_conformance)

        try:
            if self.options.isolate:
                from glow_conformance.isolation import run_isolated

                run_isolated(self.backend_name, self.options, self.cases, done)
            else:
                for case in self.cases:
                    done(case, *run_case(case, self.ctx))
        except KeyboardInterrupt:
            prog.close()
            raise KeyboardInterrupt(f"after {len(self.report.records)} of {len(self.cases)} cases; "
                                    "no report written") from None
        prog.close()
        self.report.seconds = time.perf_counter() - t0
        self.report.waivers = {
            "source": self.waiver_source,
            "entries": [{"pattern": w.pattern, "reason": w.reason, "source": w.source, "matched": len(w.matched),
                         "rejected": w.rejected} for w in self.waivers],
            "unused": [w.pattern for w in self.waivers if not w.matched and not w.rejected],
            "rejected": sorted({c for w in self.waivers for c in w.rejected}),
        }
        if report_dir is not None:
            self.report.write(report_dir)
        return self.report


__all__ = ["NoCasesError", "Suite", "SuiteOptions", "collect", "collect_all", "no_cases_error", "record", "run_case",
           "run_suite", "select"]
