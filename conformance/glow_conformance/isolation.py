"""Run the cases in a worker process, so a backend that crashes the process fails a case, not the suite.

A native backend can die on a bad case (a segmentation fault in generated
code). ``glow conformance`` therefore runs the cases in a child process
(``python -m glow_conformance.isolation``) that reports each outcome as a JSON
line; when the child dies, the case it was running is recorded as ``fail``
with the signal, and a new child carries on with the next case.

Protocol: the parent writes one JSON object to the child's stdin (backend,
options, the ids of the cases to run); the child writes ``{"start": i}``
before case ``i`` and ``{"done": i, ...outcome}`` after it, one object per
line, on a private copy of its stdout (anything the backend prints goes to
stderr).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from glow_conformance.model import Case, Outcome, Result

#: cases after which a crashed worker is not restarted (a backend that crashes on everything)
MAX_CRASHES = 50


def _encode(out: Outcome, seconds: float) -> dict[str, Any]:
    d = {"result": out.result.value, "message": out.message, "tolerance": out.tolerance, "seconds": seconds,
         "max_error": None if out.max_error is None else (str(out.max_error) if not math.isfinite(out.max_error)
                                                          else out.max_error),
         "mandatory": out.mandatory}
    nodes = out.details.get("nodes") if isinstance(out.details, dict) else None
    if nodes:
        d["nodes"] = nodes
    return d


def _decode(d: dict[str, Any]) -> tuple[Outcome, float]:
    err = d.get("max_error")
    max_error = float(err) if err is not None else None
    details = {"nodes": d["nodes"]} if d.get("nodes") else {}
    return Outcome(Result(d["result"]), d.get("message", ""), max_error, d.get("tolerance", ""), details,
                   d.get("mandatory")), float(d.get("seconds", 0.0))


def options_to_json(options: Any) -> dict[str, Any]:
    d = asdict(options)
    d["level"] = options.level.value
    d["filters"] = list(options.filters)
    for key in ("waivers", "onnx_node_tests"):
        d[key] = None if d[key] is None else str(d[key])
    d["progress"] = "off"
    d.pop("extra", None)
    return d


def run_isolated(backend: str, options: Any, cases: list[Case],
                 on_done: Callable[[Case, Outcome, float], None]) -> None:
    """Run ``cases`` in worker processes, calling ``on_done`` for each in order (crashes included)."""
    index = 0
    crashes = 0
    while index < len(cases):
        request = {"backend": backend, "options": options_to_json(options), "ids": [c.id for c in cases[index:]]}
        # its own session: Ctrl-C on the terminal interrupts this process only, which then stops the worker
        proc = subprocess.Popen([sys.executable, "-m", "glow_conformance.isolation"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            running, code = _drive(proc, request, index, cases, on_done)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if running is None:
            if code != 0:
                raise RuntimeError(f"the conformance worker exited with status {code} between cases")
            return
        crashes += 1
        on_done(cases[running], Outcome(Result.FAIL, f"the backend crashed the process while running this case "
                                                     f"({_describe_exit(code)}); the suite went on in a new process"),
                0.0)
        index = running + 1
        if crashes >= MAX_CRASHES:
            for case in cases[index:]:
                on_done(case, Outcome(Result.FAIL, f"not run: the backend crashed the process {crashes} times"), 0.0)
            return


def _drive(proc: subprocess.Popen[str], request: dict[str, Any], index: int, cases: list[Case],
           on_done: Callable[[Case, Outcome, float], None]) -> tuple[int | None, int]:
    """Feed the worker its request and record its outcomes; the case it was running when it ended, its status."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(request))
    proc.stdin.close()
    running: int | None = None
    for line in proc.stdout:
        msg = json.loads(line)
        if "start" in msg:
            running = index + int(msg["start"])
        elif "done" in msg:
            i = index + int(msg["done"])
            out, seconds = _decode(msg)
            on_done(cases[i], out, seconds)
            running = None
        elif "error" in msg:  # the worker could not set up (it reports why, the parent stops)
            proc.wait()
            raise RuntimeError(msg["error"])
    return running, proc.wait()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _worker() -> int:  # pragma: no cover  (runs in the child)
    from glow_conformance.model import Level
    from glow_conformance.suite import SuiteOptions, collect, run_case

    out_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the backend prints goes to stderr
    sys.stdout = sys.stderr
    results = os.fdopen(out_fd, "w", buffering=1)

    def send(obj: dict[str, Any]) -> None:
        results.write(json.dumps(obj) + "\n")
        results.flush()

    try:
        request = json.loads(sys.stdin.read())
        o = dict(request["options"])
        o["level"] = Level(o["level"])
        o["filters"] = ()  # the parent chose the cases: run exactly those ids
        options = SuiteOptions(**o)
        all_cases, ctx, _ = collect(request["backend"], options)
        by_id = {c.id: c for c in all_cases}
        todo = [by_id[i] for i in request["ids"]]
    except Exception as e:  # noqa: BLE001
        send({"error": f"the conformance worker failed to start: {type(e).__name__}: {e}"})
        return 1
    for i, case in enumerate(todo):
        send({"start": i})
        out, seconds = run_case(case, ctx)
        send({"done": i, **_encode(out, seconds)})
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_worker())
