"""A fuzz campaign: cases ``start .. start + count`` of a campaign seed, on each backend.

For every case: write it to a work folder, run glow on each backend in its own
forked child, and, when glow answered on some backend, run the reference (and
onnxruntime, for information) in children too. One JSON line per (case,
backend) is appended to ``OUT/results-wK.jsonl`` as soon as it is known, so a
stopped campaign resumes where it stopped (cases already in the files are
skipped). Every finding (:data:`~glow_tools.fuzz.runners.FINDINGS`) is written
again as a reproduction folder, ``OUT/repros/BACKEND/INDEX-CLASS/``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glow_tools.fuzz.cases import Case, generate, read_meta, write_case, write_meta
from glow_tools.fuzz.float64 import own_spread, run_reference_float64, undetermined_reason
from glow_tools.fuzz.float64_rounded import run_reference_rounded
from glow_tools.fuzz.isolate import Limits, Outcome, run_forked
from glow_tools.fuzz.runners import (
    CLASSES,
    FINDINGS,
    classify,
    compare_outputs,
    onnxruntime_note,
    run_glow,
    run_onnxruntime,
    run_reference,
    warm_up,
)

GlowRunner = Callable[[str, str], dict[str, Any]]


@dataclass
class Settings:
    out: Path
    backends: Sequence[str] = ("interpreter", "cpu")
    seed: int = 0
    limits: Limits = Limits()
    #: the reference gets its own limits (its Python kernels are slow on the zoo models)
    reference_limits: Limits = Limits(cpu_seconds=60, wall_seconds=300.0)
    #: the float64 re-evaluation (seven evaluations of the model) when glow and the reference disagree
    float64_limits: Limits = Limits(cpu_seconds=420, wall_seconds=900.0)
    onnxruntime: bool = True
    save_repros: bool = True
    glow_runner: GlowRunner = run_glow
    worker: int = 0
    jobs: int = 1


def run_case(case: Case, folder: Path, settings: Settings, backends: Sequence[str]) -> list[dict[str, Any]]:
    """Run one written case on ``backends``; one result row per backend."""
    glow: dict[str, Outcome] = {b: run_forked(settings.glow_runner, (str(folder), b), settings.limits)
                                for b in backends}
    answered = any(o.status == "ok" and o.value.get("kind") == "outputs" for o in glow.values())
    ref = run_forked(run_reference, (str(folder),), settings.reference_limits) if answered else None
    ort = None
    if settings.onnxruntime and ref is not None and ref.status == "ok":
        ort = run_forked(run_onnxruntime, (str(folder),), settings.reference_limits)
    note = onnxruntime_note(ort, ref)
    classes = {b: classify(outcome, ref) for b, outcome in glow.items()}
    if ref is not None and any(c == "wrong" for c, _ in classes.values()):
        classes = _rejudge_in_float64(classes, glow, ref, folder, settings, ort)
    rows = []
    for b, outcome in glow.items():
        cls, message = classes[b]
        row = {**case.meta(), "backend": b, "class": cls, "message": message[:1500],
               "seconds": round(outcome.seconds, 3), "onnxruntime": note}
        if cls == "unjudged":
            row["vs_interpreter"] = _vs_interpreter(glow, b)
        rows.append(row)
    return rows


def _rejudge_in_float64(classes: dict[str, tuple[str, str]], glow: dict[str, Outcome], ref: Outcome, folder: Path,
                        settings: Settings, ort: Outcome | None = None) -> dict[str, tuple[str, str]]:
    """The ``wrong`` classes again, after the float64 rule (``glow_tools.fuzz.float64``): ``unjudged`` where
    every disputed element is not determined in float32 (never one on which onnxruntime agrees with the
    reference)."""
    wide = run_forked(run_reference_float64, (str(folder),), settings.float64_limits)
    if wide.status != "ok":
        return classes
    ort_outputs = ort.value if ort is not None and ort.status == "ok" else None
    rounded = None
    if ort_outputs is not None:  # for elements on which onnxruntime agrees with the reference
        nodewise = run_forked(run_reference_rounded, (str(folder),), settings.float64_limits)
        rounded = nodewise.value if nodewise.status == "ok" else None
    try:
        own = own_spread(str(folder), wide.value[0]) if rounded is not None else None
    except Exception:  # noqa: BLE001  (no own spread: the node-wise value must then be met exactly)
        own = None
    out = dict(classes)
    for b, (cls, message) in classes.items():
        if cls == "wrong":
            why = undetermined_reason(ref.value, glow[b].value["outputs"], *wide.value, onnxruntime=ort_outputs,
                                      rounded=rounded, own=own)
            out[b] = ("unjudged", f"{why} (against the float32 reference: {message})") if why else (cls, message)
    return out


def _outputs(o: Outcome | None) -> list[Any] | None:
    return o.value["outputs"] if o is not None and o.status == "ok" and o.value.get("kind") == "outputs" else None


def _vs_interpreter(glow: dict[str, Outcome], backend: str) -> str:
    """Without a judge, how a backend's answer compares with the interpreter's ('' if not both ran)."""
    mine, spec = _outputs(glow.get(backend)), _outputs(glow.get("interpreter"))
    if backend == "interpreter" or mine is None or spec is None:
        return ""
    return compare_outputs(spec, mine) or "agrees"


def _done(out: Path) -> set[tuple[int, str]]:
    done: set[tuple[int, str]] = set()
    for path in sorted(out.glob("results-w*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                done.add((int(row["index"]), str(row["backend"])))
            except (ValueError, KeyError):
                continue  # a line cut by a kill: the case runs again
    return done


def drop_findings(out: Path) -> list[int]:
    """Remove the rows of findings and unjudged cases, and the reproductions (to run those cases again
    after a fix, or with a corrected judge); their indices."""
    dropped: set[int] = set()
    for path in sorted(out.glob("results-w*.jsonl")):
        keep = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("class") in (*FINDINGS, "unjudged"):
                dropped.add(int(row["index"]))
            else:
                keep.append(line)
        path.write_text("".join(k + "\n" for k in keep), encoding="utf-8")
    shutil.rmtree(out / "repros", ignore_errors=True)
    return sorted(dropped)


def save_repro(case: Case, row: dict[str, Any], out: Path) -> Path:
    folder = out / "repros" / row["backend"] / f"{case.index:06d}-{row['class']}"
    write_case(case, folder)
    write_meta(folder, {**row, "replay": f"python scripts/fuzz_campaign.py --replay {folder}"})
    return folder


def run_campaign(settings: Settings, indices: Iterable[int], names: Sequence[str], mutators: dict[str, Any],
                 progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run the cases ``indices`` (those of this worker, not yet done); returns the new rows."""
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    results = out / f"results-w{settings.worker}.jsonl"
    work = out / f"work-w{settings.worker}"
    rows_all: list[dict[str, Any]] = []
    if settings.glow_runner is run_glow:
        warm_up(settings.backends, settings.onnxruntime)
    for index in indices:
        if index % settings.jobs != settings.worker:
            continue
        todo = [b for b in settings.backends if (index, b) not in done]
        if not todo:
            continue
        try:
            case = generate(settings.seed, index, names, mutators)
            write_case(case, work)
        except Exception as e:  # noqa: BLE001  (a fuzzer bug: logged, the campaign goes on)
            with (out / "skipped.txt").open("a", encoding="utf-8") as f:
                f.write(f"{index}: the case could not be made: {type(e).__name__}: {e}\n")
            continue
        rows = run_case(case, work, settings, todo)
        with results.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        for row in rows:
            if settings.save_repros and row["class"] in FINDINGS:
                row["repro"] = str(save_repro(case, row, out))
            if progress is not None:
                progress(row)
        rows_all += rows
    shutil.rmtree(work, ignore_errors=True)
    return rows_all


def replay(folder: Path, backends: Sequence[str] | None = None, settings: Settings | None = None) -> list[dict[str, Any]]:
    """Run a reproduction folder again (its backend, or ``backends``); returns the rows."""
    meta = read_meta(folder)
    backends = backends or [meta.get("backend", "interpreter")]
    settings = settings or Settings(out=folder)
    fake = Case(int(meta.get("index", -1)), int(meta.get("campaign_seed", -1)), meta.get("seed_model", "?"),
                list(meta.get("mutators", [])), None)  # type: ignore[arg-type]
    return run_case(fake, folder, settings, backends)


def read_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(out.glob("results-w*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: cases per class, one row per backend; then the findings and onnxruntime notes."""
    by_backend: dict[str, Counter[str]] = {}
    for r in rows:
        by_backend.setdefault(r["backend"], Counter())[r["class"]] += 1
    lines = ["| backend | cases | " + " | ".join(CLASSES) + " |", "|---|---:|" + "---:|" * len(CLASSES)]
    for b, c in sorted(by_backend.items()):
        lines.append(f"| {b} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in CLASSES) + " |")
    findings = [r for r in rows if r["class"] in FINDINGS]
    if findings:
        lines += ["", "findings:"]
        lines += [f"- {r['backend']} case {r['index']} ({r['seed_model']}; {'; '.join(r['mutators'])}): "
                  f"{r['class']}: {r['message'][:300]}" for r in sorted(findings, key=lambda r: (r['backend'], r['index']))]
    apart = [r for r in rows if r.get("vs_interpreter", "") not in ("", "agrees")]
    if apart:
        lines += ["", f"unjudged cases where a backend differs from the interpreter: {len(apart)}"]
        lines += [f"- {r['backend']} case {r['index']}: {r['vs_interpreter'][:200]}" for r in apart[:50]]
    ort = sorted({(r["index"], r["onnxruntime"]) for r in rows
                  if r["class"] == "match" and r.get("onnxruntime", "").startswith("onnxruntime")})
    if ort:
        lines += ["", f"onnxruntime differs from the reference where glow matches it (not counted): {len(ort)} case(s)"]
        lines += [f"- case {i}: {note[:200]}" for i, note in ort[:50]]
    return "\n".join(lines)


def elapsed(t0: float) -> str:
    return f"{time.monotonic() - t0:.0f} s"
