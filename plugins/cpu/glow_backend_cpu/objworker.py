"""Compile LLVM IR text to object code in worker processes (the parallel compile of ``split.py``).

llvmlite runs LLVM's optimization and code generation of one module on one
core, so a big module is compiled in parts (``split.py``) by this process and
worker processes at once. The parts go through one queue (:class:`PartQueue`):
each process takes the next part when it is free, and parts may be queued while
the module is still being generated, so the workers compile the first kernels
while this process generates the others.

A worker is ``python -m glow_backend_cpu.objworker``: a fresh interpreter (no
``multiprocessing``: a user's script is never re-imported) that imports only
llvmlite and compiles requests from its standard input (each a length-prefixed
JSON header line with the target, then the IR text), writing each object to its
standard output, until its input ends. Workers are started before the parent
generates the IR (:func:`start`), so their start-up overlaps LIR generation; a
worker that is not needed has its input closed and exits. A worker that fails
(exits, no output) is not an error: its part goes back to the queue and another
process compiles it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import llvmlite.binding as llvm

#: compile jobs (processes, the parent included) a big module is split into; 1: no split
JOBS_ENV = "GLOW_CPU_COMPILE_JOBS"
#: at most this many jobs by default (more parts duplicate more shared helpers)
MAX_DEFAULT_JOBS = 4
#: seconds a worker may take for its part before the parent gives up on it and compiles the part itself
WORKER_TIMEOUT = 600.0
#: a worker's niceness (added to the parent's): with a free core it changes nothing; on a busy machine the
#: parent's IR generation (the compile's critical path) goes first instead of sharing its core with a worker
WORKER_NICE = 10


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
    """A started worker process: it compiles requests until its input is closed."""

    proc: subprocess.Popen[bytes]
    #: False once it failed: it gets no more requests
    alive: bool = True


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


def _write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "little"))
    stream.write(data)
    stream.flush()


def _read_frame(stream: BinaryIO) -> bytes | None:
    """One length-prefixed frame; None at the end of the stream (or a truncated frame)."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    n = int.from_bytes(head, "little")
    data = stream.read(n)
    return data if len(data) == n else None


def request(worker: Worker, target: Target, text: str) -> bytes | None:
    """One part's object code from ``worker``; None (and the worker is dropped) when it fails."""
    proc = worker.proc
    try:
        assert proc.stdin is not None and proc.stdout is not None
        _write_frame(proc.stdin, json.dumps(target.__dict__).encode() + b"\n" + text.encode())
        obj = _read_frame(proc.stdout)
    except (OSError, ValueError):
        obj = None
    if not obj:
        worker.alive = False
        proc.kill()
    return obj or None


def release(workers: list[Worker]) -> None:
    """Close the workers' input (they exit at its end); reaped by a thread, never waited for."""
    for w in workers:
        try:
            if w.proc.stdin is not None:
                w.proc.stdin.close()
        except OSError:
            pass
        threading.Thread(target=w.proc.wait, name="glow-objworker-reap", daemon=True).start()


class PartQueue:
    """Parts of a module to compile, taken one at a time, in the order they were added, by whichever process
    is free: a thread per worker feeds its worker from the moment the queue exists (parts may be added while
    the module is still being generated), and this process takes parts in :meth:`finish`. A part whose worker
    fails goes back to the queue for another taker."""

    def __init__(self, workers: list[Worker], target: Target) -> None:
        self.workers = workers
        self.target = target
        self.texts: list[str] = []
        self.objects: list[bytes | None] = []
        self._todo: list[int] = []
        self._closed = False
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._serve, args=(w,), name="glow-objworker", daemon=True)
                         for w in workers]
        for t in self._threads:
            t.start()

    def add(self, text: str) -> None:
        with self._cond:
            self.texts.append(text)
            self.objects.append(None)
            self._todo.append(len(self.texts) - 1)
            self._cond.notify()

    def abort(self) -> None:
        """No part is needed any more (the module is compiled whole, or its generation failed)."""
        with self._cond:
            self._closed = True
            self._todo.clear()
            self._cond.notify_all()
        for w in self.workers:
            w.alive = False
            w.proc.kill()
        release(self.workers)

    def _take(self, wait: bool) -> int | None:
        with self._cond:
            while wait and not self._todo and not self._closed:
                self._cond.wait()
            return self._todo.pop(0) if self._todo else None

    def _serve(self, worker: Worker) -> None:
        while worker.alive and (i := self._take(wait=True)) is not None:
            obj = request(worker, self.target, self.texts[i])
            if obj is None:  # the worker failed: the part goes back
                with self._cond:
                    self._todo.insert(0, i)
                    self._cond.notify()
                return
            self.objects[i] = obj

    def finish(self, local: Callable[[str], bytes], timings: dict[str, float],
               idle: Callable[[], None] | None = None) -> list[bytes]:
        """Every part's object code, in order: no more parts come; this process takes parts (``local``) until
        none are left, does ``idle``, then waits for the workers (``timings["wait"]``) and compiles what a
        failed one left."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        while (i := self._take(wait=False)) is not None:
            self.objects[i] = local(self.texts[i])
        if idle is not None:
            idle()
        t0 = time.perf_counter()
        for w, t in zip(self.workers, self._threads):
            t.join(WORKER_TIMEOUT)
            if t.is_alive():  # hung: its part is compiled here
                w.alive = False
                w.proc.kill()
        timings["wait"] = time.perf_counter() - t0
        release(self.workers)
        return [obj if obj is not None else local(text) for obj, text in zip(list(self.objects), self.texts)]


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
    """Compile requests (each a length-prefixed JSON header line and IR text) until the input ends."""
    try:
        os.nice(WORKER_NICE)
    except (AttributeError, OSError):  # pragma: no cover  (no nice on this platform)
        pass
    while (data := _read_frame(sys.stdin.buffer)) is not None:
        header, _, text = data.partition(b"\n")
        _write_frame(sys.stdout.buffer, compile_text(Target(**json.loads(header)), text.decode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
