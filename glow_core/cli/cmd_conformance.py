"""``glow conformance --backend NAME``: run the conformance suite (distribution ``glow-conformance``).

The options are declared here so ``glow --help`` works without the suite; the
suite itself is a separate distribution that sits on top of glow (it drives
backends by name, like a user). This command reaches it by its module name,
``glow_conformance``, only when it runs, and says how to install it when it
is missing.
"""

from __future__ import annotations

import argparse
import importlib

from glow_core.cli.common import Command
from glow_core.errors import GlowError

SUITE_MODULE = "glow_conformance.cli"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--backend", required=True, metavar="NAME", help="the backend to test ('glow backends')")
    p.add_argument("--level", choices=("core", "full"), default="core",
                   help="core: the mandatory primitives, the models, runtime behaviour; full: also every element "
                        "kind the backend declares and every high-level kind (default: core)")
    p.add_argument("--report-dir", metavar="DIR", default=None,
                   help="where report.json, report.junit.xml and report.md go (default: conformance-reports/NAME)")
    p.add_argument("--waivers", metavar="FILE", default=None,
                   help="waiver file (CASE-ID-PATTERN: reason per line); default: the one the backend ships")
    p.add_argument("--onnx-node-tests", metavar="DIR", default=None,
                   help="also run the ONNX backend node tests found in DIR (test_*/model.onnx)")
    p.add_argument("-k", dest="filter", metavar="FILTER", action="append", default=[],
                   help="run only cases whose id contains FILTER (repeatable: any of them; ~FILTER excludes)")
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


def run(args: argparse.Namespace) -> int:
    try:
        suite = importlib.import_module(SUITE_MODULE)
    except ModuleNotFoundError as e:
        if e.name is not None and (SUITE_MODULE == e.name or SUITE_MODULE.startswith(e.name + ".")):
            raise GlowError("the conformance suite is not installed",
                            hint="pip install glow-conformance (from a checkout: pip install ./conformance)") from None
        raise
    code: int = suite.run(args)
    return code


COMMAND = Command(
    name="conformance",
    help="run the conformance suite on a backend: is it correct?",
    description="Run the glow conformance suite on the backend named by --backend: every primitive x element kind "
                "x shape family against the reference interpreter, every high-level kind through lowering "
                "(--level full), the light model zoo, runtime behaviour, optionally the ONNX node tests. Prints a "
                "progress bar and a summary by category, and writes JSON, JUnit XML and Markdown reports. Exit "
                "status 0 only when every mandatory case passes and no other case fails without a waiver.",
    epilog="examples:\n  glow conformance --backend xyz\n  glow conformance -b xyz --level full --report-dir out\n"
           "  glow conformance -b xyz -k primitive/Conv -k primitive/MatMul\n"
           "  glow conformance -b xyz --onnx-node-tests ../shared/onnx-node-tests",
    add_arguments=add_arguments,
    run=run,
)
