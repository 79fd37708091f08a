"""``glow conformance --backend NAME`` (and ``python -m glow_conformance --backend NAME``).

The options are declared by ``glow_core.cli.cmd_conformance`` (so ``glow
--help`` works without this package); :func:`run` carries them out. Exit
status: 0 when the backend conforms (every mandatory case passes, no other
case fails without a waiver), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from glow_conformance.model import SUITE_VERSION, Level
from glow_conformance.report import FILES
from glow_conformance.suite import Suite, SuiteOptions

DEFAULT_REPORT_ROOT = Path("conformance-reports")


def options_from_args(args: argparse.Namespace) -> SuiteOptions:
    progress = None if args.progress == "auto" else args.progress
    return SuiteOptions(level=Level(args.level), filters=tuple(args.filter or ()), waivers=args.waivers,
                        onnx_node_tests=args.onnx_node_tests, force_lowering=args.force_lowering, seed=args.seed,
                        reference=args.reference, progress=progress, isolate=not args.no_isolate)


def run(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    suite = Suite(args.backend, opts)
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
        print(f"{len(suite.cases)} cases")
        return 0
    print(f"running {len(suite.cases)} cases" + (f" (filter: {' '.join(opts.filters)})" if opts.filters else ""),
          flush=True)
    report_dir = Path(args.report_dir) if args.report_dir else DEFAULT_REPORT_ROOT / args.backend
    report = suite.run(report_dir)
    for line in report.summary_lines():
        print(line)
    print("reports: " + ", ".join(str(report_dir / f) for f in FILES.values()))
    return 0 if report.conformant else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m glow_conformance``: the same options as ``glow conformance``."""
    from glow_core.cli.main import main as glow_main

    return glow_main(["conformance", *(sys.argv[1:] if argv is None else argv)])


__all__ = ["main", "options_from_args", "run"]
