"""``scripts/fuzz_campaign.py``: run a campaign, replay a reproduction, print a campaign's table."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from glow_tools.fuzz import MUTATORS
from glow_tools.fuzz.campaign import Settings, drop_findings, elapsed, read_rows, replay, run_campaign, table
from glow_tools.fuzz.cases import generate, write_case
from glow_tools.fuzz.isolate import Limits
from glow_tools.fuzz.runners import FINDINGS
from glow_tools.fuzz.seeds import seed_names


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="scripts/fuzz_campaign.py", description=__doc__)
    ap.add_argument("--out", type=Path, help="the campaign's folder (results-w*.jsonl, repros/, summary.md)")
    ap.add_argument("--count", type=int, default=100, help="cases to run (default 100)")
    ap.add_argument("--start", type=int, default=0, help="index of the first case (default 0)")
    ap.add_argument("--seed", type=int, default=0, help="the campaign seed (default 0)")
    ap.add_argument("--backends", default="interpreter,cpu", help="comma-separated (default interpreter,cpu)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cpu-seconds", type=int, default=30, help="CPU seconds per child before 'hang' (default 30)")
    ap.add_argument("--wall-seconds", type=float, default=180.0, help="wall-clock seconds per child (default 180)")
    ap.add_argument("--memory", type=float, default=3.0, help="GiB of address space per child over the worker's (default 3)")
    ap.add_argument("--no-onnxruntime", action="store_true", help="do not run onnxruntime beside the reference")
    ap.add_argument("--no-zoo", action="store_true", help="node tests only as seeds")
    ap.add_argument("--replay", type=Path, metavar="DIR", help="run one reproduction folder again and print its class")
    ap.add_argument("--recheck", action="store_true",
                    help="first drop the findings and unjudged cases of --out (rows, repros) so they run again (after a fix)")
    ap.add_argument("--write-case", type=int, metavar="INDEX",
                    help="write case INDEX (of --seed) to OUT/cases/INDEX, to inspect or --replay it")
    ap.add_argument("--summary", type=Path, metavar="OUT", help="print the table of a campaign folder")
    return ap


def _settings(args: argparse.Namespace, worker: int) -> Settings:
    limits = Limits(cpu_seconds=args.cpu_seconds, wall_seconds=args.wall_seconds,
                    memory_bytes=int(args.memory * (1 << 30)))
    return Settings(out=args.out, backends=tuple(b for b in args.backends.split(",") if b), seed=args.seed,
                    limits=limits, onnxruntime=not args.no_onnxruntime, worker=worker, jobs=max(1, args.jobs))


def _progress(t0: float, counter: list[int]) -> Any:
    def show(row: dict[str, Any]) -> None:
        counter[0] += 1
        if row["class"] in FINDINGS:
            print(f"[{row['backend']}] case {row['index']}: {row['class']}: {row['message'][:200]}", flush=True)
        if counter[0] % 100 == 0:
            print(f"... {counter[0]} results in {elapsed(t0)}", flush=True)
    return show


def _run_jobs(args: argparse.Namespace, argv: list[str]) -> int:
    procs = [subprocess.Popen([sys.executable, sys.argv[0], *argv, "--worker", str(k)]) for k in range(args.jobs)]
    codes = [p.wait() for p in procs]
    print(table(read_rows(args.out)))
    return max(codes)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.summary is not None:
        print(table(read_rows(args.summary)))
        return 0
    if args.replay is not None:
        backends = [b for b in args.backends.split(",") if b] if "--backends" in argv else None
        args.out = args.replay
        rows = replay(args.replay, backends, _settings(args, 0))
        for row in rows:
            print(json.dumps({k: row[k] for k in ("backend", "class", "message", "seed_model", "mutators")}, indent=1))
        return 1 if any(r["class"] in FINDINGS for r in rows) else 0
    if args.out is None:
        _parser().error("--out is required (or --replay / --summary)")
    if args.write_case is not None:
        case = generate(args.seed, args.write_case, seed_names(with_zoo=not args.no_zoo), MUTATORS)
        folder = args.out / "cases" / f"{args.write_case:06d}"
        write_case(case, folder)
        print(f"{folder}: {case.seed_model}; " + "; ".join(case.mutators))
        return 0
    if args.recheck and args.worker is None:
        dropped = drop_findings(args.out)
        print(f"{len(dropped)} case(s) with findings or unjudged will run again", flush=True)
        argv = [a for a in argv if a != "--recheck"]
    if args.jobs > 1 and args.worker is None:
        return _run_jobs(args, argv)
    names = seed_names(with_zoo=not args.no_zoo)
    t0 = time.monotonic()
    rows = run_campaign(_settings(args, args.worker or 0), range(args.start, args.start + args.count), names,
                        MUTATORS, _progress(t0, [0]))
    if args.worker is None:
        all_rows = read_rows(args.out)
        text = table(all_rows)
        (args.out / "summary.md").write_text(text + "\n", encoding="utf-8")
        print(text)
    print(f"{len(rows)} new result(s) in {elapsed(t0)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
