"""The ONNX backend node tests (optional: ``--onnx-node-tests DIR``), through ``glow_tools.nodetests.run_case``.

Each ``test_*`` folder (``model.onnx`` + ``test_data_set_*``) is one case,
``onnx-node/<name>``, compared with the expected outputs shipped with it as
ONNX's runner compares. ``pass`` -> pass, ``unsupported`` (a deliberate
refusal by glow or the backend) -> unsupported, ``wrong`` and ``error`` -> fail.
Not mandatory: they measure coverage of the ONNX operator set.
"""

from __future__ import annotations

import functools
from pathlib import Path

from glow_conformance.model import Case, Context, Level, Outcome, Result
from glow_core.errors import GlowError

_STATUS = {"pass": Result.PASS, "unsupported": Result.UNSUPPORTED, "wrong": Result.FAIL, "error": Result.FAIL}


def node_test_cases(root: Path) -> list[Case]:
    from glow_tools.nodetests import list_cases

    if not root.is_dir():
        raise GlowError(f"--onnx-node-tests '{root}' is not a directory",
                        hint="give the folder holding the test_* case folders")
    folders = list_cases(root)
    if not folders:
        raise GlowError(f"--onnx-node-tests '{root}' holds no test_*/model.onnx case folders")
    return [Case(f"onnx-node/{p.name}", "onnx-node", Level.CORE, False,
                 functools.partial(_run, p)) for p in folders]


def _run(path: Path, ctx: Context) -> Outcome:
    return run_node_test(ctx, path)


def run_node_test(ctx: Context, path: Path) -> Outcome:
    from glow_tools.nodetests import run_case

    r = run_case(path, ctx.backend_name, timeout=ctx.node_test_timeout)
    label = {"wrong": "wrong answer: ", "error": "error: "}.get(r.status, "")
    return Outcome(_STATUS[r.status], label + r.message, r.max_error if r.status != "unsupported" else None,
                   "onnx runner: rtol 1e-3, atol 1e-7")


__all__ = ["node_test_cases", "run_node_test"]
