"""Compile LLVM IR text to object code in worker processes (the parallel compile of ``split.py``).

llvmlite runs LLVM's optimization and code generation of one module on one
core, so a big module is split into parts (``split.py``) and all but the first
are compiled by worker processes while the parent compiles the first.

A worker is ``python -m glow_backend_cpu.objworker``: a fresh interpreter (no
``multiprocessing``: a user's script is never re-imported) that imports only
llvmlite, reads one request from its standard input (a JSON header line with the
target, then the IR text), and writes the object code to its standard output.
Workers are started before the parent generates the IR (:func:`start`), so their
start-up overlaps IR generation; a worker that is not needed gets an empty request
and exits. A worker that fails (exit status, no output) is not an error: the parent
compiles that part itself (:func:`finish`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.binding as llvm

#: compile jobs (processes, the parent included) a big module is split into; 1: no split
JOBS_ENV = "GLOW_CPU_COMPILE_JOBS"
#: at most this many jobs by default (more parts duplicate more shared helpers)
MAX_DEFAULT_JOBS = 4
#: seconds a worker may take for its part before the parent gives up on it and compiles the part itself
WORKER_TIMEOUT = 600.0


def default_jobs() -> int:
    """``GLOW_CPU_COMPILE_JOBS``, else the cores this process may run on (at most :data:`MAX_DEFAULT_JOBS`)."""
    env = os.environ.get(JOBS_ENV, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover  (not Linux)
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_JOBS))


def run_pipeline(tm: llvm.TargetMachine, mod: llvm.ModuleRef, opt_level: int) -> None:
    """The optimization pipeline of every compile (in-process and in workers: the same code either way)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


@dataclass(frozen=True)
class Target:
    """What a worker needs to make the parent's target machine."""

    triple: str
    cpu_name: str
    features: str
    opt_level: int
    reloc: str
    codemodel: str


@dataclass
class Worker:
    """A started worker process; ``result`` is set by :func:`submit`'s thread."""

    proc: subprocess.Popen[bytes]
    thread: threading.Thread | None = None
    result: bytes | None = None


def start(n: int) -> list[Worker]:
    """Start ``n`` worker processes (they wait for their request); none when starting fails."""
    workers: list[Worker] = []
    for _ in range(max(0, n)):
        try:
            proc = subprocess.Popen([sys.executable, "-m", "glow_backend_cpu.objworker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError:
            break
        workers.append(Worker(proc))
    return workers


def submit(worker: Worker, target: Target, text: str) -> None:
    """Send a part to a worker; a thread waits for its object code (``worker.result``, None on failure)."""

    def talk() -> None:
        request = json.dumps(target.__dict__).encode() + b"\n" + text.encode()
        try:
            out, _ = worker.proc.communicate(request, timeout=WORKER_TIMEOUT)
        except (OSError, subprocess.SubprocessError, ValueError):
            worker.proc.kill()
            worker.proc.wait()
            return
        if worker.proc.returncode == 0 and out:
            worker.result = out

    worker.thread = threading.Thread(target=talk, name="glow-objworker", daemon=True)
    worker.thread.start()


def release(workers: list[Worker]) -> None:
    """Let workers that got no part exit (their input closed: an empty request); never waits for them."""
    for w in workers:
        if w.thread is None:
            try:
                if w.proc.stdin is not None:
                    w.proc.stdin.close()
            except OSError:
                pass
            threading.Thread(target=w.proc.wait, name="glow-objworker-reap", daemon=True).start()


def finish(workers: list[Worker], texts: list[str], fallback: Callable[[str], bytes]) -> list[bytes]:
    """The object code of each submitted part, in order; a part whose worker failed is compiled by ``fallback``."""
    out: list[bytes] = []
    for w, text in zip(workers, texts):
        assert w.thread is not None
        w.thread.join()
        out.append(w.result if w.result is not None else fallback(text))
    return out


def compile_text(target: Target, text: str) -> bytes:
    """IR text -> verified, optimized object code for ``target`` (what a worker does)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu_name, features=target.features, opt=target.opt_level, reloc=target.reloc,
        codemodel=target.codemodel)
    mod = llvm.parse_assembly(text)
    mod.verify()
    run_pipeline(tm, mod, target.opt_level)
    mod.verify()
    return bytes(tm.emit_object(mod))


def main() -> int:
    data = sys.stdin.buffer.read()
    if not data:
        return 0  # not needed
    header, _, text = data.partition(b"\n")
    target = Target(**json.loads(header))
    obj = compile_text(target, text.decode())
    sys.stdout.buffer.write(obj)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
