"""``glow conformance --backend NAME`` (and ``python -m glow_conformance --backend NAME``).

This module is the ``conformance`` subcommand of ``glow``: the distribution
registers :data:`COMMAND` in the entry-point group ``glow.commands``, and
the core CLI loads it from there (glow itself never imports this package).
It stays light to import (the suite is imported only when the command runs),
since ``glow`` loads it on every invocation.

Exit status: 0 when the backend conforms (every mandatory case passes, no
other case fails without a waiver) or, for a partial run (``-k``), when every
selected case passes; 1 otherwise or on an error (no case selected, an
unwritable report directory); 130 when interrupted (no report written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glow_cli.common import Command

DEFAULT_REPORT_ROOT = Path("conformance-reports")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--backend", required=True, metavar="NAME", help="the backend to test ('glow backends')")
    p.add_argument("--level", choices=("core", "full"), default="core",
                   help="core: the mandatory primitives, the models, runtime behaviour; full: also every element "
                        "kind the backend declares and every high-level kind (default: core)")
    p.add_argument("--report-dir", metavar="DIR", default=None,
                   help="where report.json, report.junit.xml and report.md go (default: conformance-reports/NAME); "
                        "a partial run (-k) writes report.partial.* instead")
    p.add_argument("--waivers", metavar="FILE", default=None,
                   help="waiver file (CASE-ID-PATTERN: reason per line); default: the one the backend ships")
    p.add_argument("--onnx-node-tests", metavar="DIR", default=None,
                   help="also run the ONNX backend node tests found in DIR (test_*/model.onnx)")
    p.add_argument("-k", dest="filter", metavar="FILTER", action="append", default=[],
                   help="run only cases whose id contains FILTER (repeatable: any of them; ~FILTER excludes); "
                        "a run that leaves cases out is partial: no conformance verdict")
    p.add_argument("--sample", metavar="N", type=_positive, default=1,
                   help="run every N-th selected case only (a quick check of a whole level; a partial run)")
    p.add_argument("--force-lowering", action="store_true",
                   help="lower every high-level kind, even those the backend declares natively")
    p.add_argument("--reference", metavar="NAME", default=None,
                   help="the reference backend (default: interpreter, or GLOW_REFERENCE_BACKEND)")
    p.add_argument("--seed", metavar="N", type=int, default=0, help="varies the random operands (default 0)")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "off"), default="auto",
                   help="progress on stderr: a bar on a terminal, a line per 10%% otherwise (default: auto)")
    p.add_argument("--list", action="store_true", help="list the selected cases without running them")
    p.add_argument("--no-isolate", action="store_true",
                   help="run the cases in this process (faster to debug; by default they run in a worker process, "
                        "so a backend that crashes the process fails a case instead of the whole suite)")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _selection(opts: Any) -> str:
    """How a partial run chose its cases: ``filter: a b``, ``every 8th case``."""
    parts = [f"filter: {' '.join(opts.filters)}"] if opts.filters else []
    if opts.sample > 1:
        parts.append(f"sample: 1 case in {opts.sample}")
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    from glow_conformance.model import SUITE_VERSION, Level
    from glow_conformance.report import check_report_dir, report_paths
    from glow_conformance.suite import Suite, SuiteOptions, no_cases_error

    progress = None if args.progress == "auto" else args.progress
    opts = SuiteOptions(level=Level(args.level), filters=tuple(args.filter or ()), waivers=args.waivers,
                        onnx_node_tests=args.onnx_node_tests, force_lowering=args.force_lowering, seed=args.seed,
                        reference=args.reference, progress=progress, isolate=not args.no_isolate,
                        sample=args.sample)
    suite = Suite(args.backend, opts)
    if not suite.cases:
        raise no_cases_error(args.backend, opts, suite.total_cases)
    rep = suite.report
    b = rep.backend
    print(f"glow-conformance {SUITE_VERSION} (level {opts.level.value}): backend '{b['name']}' {b['version']} "
          f"({b['distribution']} {b['distribution_version']}, SDK API {b['sdk_api_version']}); "
          f"reference '{rep.reference['name']}'; glow {rep.glow_version}")
    if suite.waivers:
        print(f"waivers: {len(suite.waivers)} from {suite.waiver_source}")
    if args.list:
        for c in suite.cases:
            print(f"{c.id}{'  (mandatory)' if c.mandatory else ''}")
        print(f"{len(suite.cases)} of {suite.total_cases} cases")
        return 0
    report_dir = Path(args.report_dir) if args.report_dir else DEFAULT_REPORT_ROOT / args.backend
    check_report_dir(report_dir)  # before the first case, not after the last
    partial = len(suite.cases) < suite.total_cases
    print(f"running {len(suite.cases)} cases"
          + (f" of {suite.total_cases} (partial run, {_selection(opts)})" if partial else ""),
          flush=True)
    report = suite.run(report_dir)
    for line in report.summary_lines():
        print(line)
    print("reports: " + ", ".join(str(p) for p in report_paths(report_dir, report.partial).values()))
    return 0 if report.ok else 1


COMMAND = Command(
    name="conformance",
    help="run the conformance suite on a backend: is it correct?",
    description="Run the glow conformance suite on the backend named by --backend: every primitive x element kind "
                "x shape family against the reference interpreter, every high-level kind through lowering "
                "(--level full), the light model zoo, runtime behaviour, optionally the ONNX node tests. Prints a "
                "progress bar and a summary by category, and writes JSON, JUnit XML and Markdown reports. Exit "
                "status 0 only when every mandatory case passes and no other case fails without a waiver. A run "
                "that leaves cases out (-k) is partial: it gives no conformance verdict and writes report.partial.* "
                "(never over the full report).",
    epilog="examples:\n  glow conformance --backend xyz\n  glow conformance -b xyz --level full --report-dir out\n"
           "  glow conformance -b xyz -k primitive/Conv -k primitive/MatMul\n"
           "  glow conformance -b xyz --onnx-node-tests ../shared/onnx-node-tests",
    add_arguments=add_arguments,
    run=run,
)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m glow_conformance``: the same options as ``glow conformance``."""
    from glow_cli.main import main as glow_main

    return glow_main(["conformance", *(sys.argv[1:] if argv is None else argv)])


__all__ = ["COMMAND", "add_arguments", "main", "run"]
