"""Run one function in a forked child under limits, and observe how it ended.

The parent (a campaign worker that imported glow, onnx and the backends once)
forks a child per step: forking a warm process costs milliseconds, where a
fresh interpreter importing onnx costs over 100 ms. The child:

- gets an address-space limit (``RLIMIT_AS``: the parent's current virtual size
  plus ``Limits.memory_bytes``) and a CPU-time limit (``RLIMIT_CPU``);
- writes its stderr (and a faulthandler traceback on a fatal signal) to a file;
- sends back the function's (pickled) return value through a pipe.

The parent also enforces a wall-clock limit (a child blocked without using CPU,
reading a FIFO for instance, is killed). :class:`Outcome` says how it ended:
``ok`` (returned), ``raised`` (an exception escaped the function), ``memory``
(a ``MemoryError`` escaped, or native code reported it ran out of memory),
``crash`` (killed by a signal), ``hang`` (over a time limit).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: texts in a crashed child's stderr that mean native code ran out of memory (LLVM, C++)
OOM_MARKERS = ("std::bad_alloc", "out of memory", "Cannot allocate memory", "MemoryError")


@dataclass(frozen=True)
class Limits:
    """What a child may use: CPU seconds, wall-clock seconds, bytes of address space over the parent's."""

    cpu_seconds: int = 30
    wall_seconds: float = 180.0
    memory_bytes: int = 3 << 30


@dataclass
class Outcome:
    """How a child ended. ``value`` is the function's return value when ``status == "ok"``."""

    status: str  # ok | raised | memory | crash | hang
    value: Any = None
    message: str = ""
    seconds: float = 0.0


def _virtual_size() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _child(fn: Callable[..., Any], args: tuple[Any, ...], limits: Limits, wfd: int, errpath: str) -> None:
    """In the child: limits, stderr to a file, run, send the result, exit without cleanup."""
    code = 0
    try:
        err = os.open(errpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(err, 2)
        os.close(err)
        faulthandler.enable(file=sys.stderr, all_threads=True)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        budget = _virtual_size() + limits.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
        cpu = max(1, int(limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        try:
            payload = pickle.dumps(("ok", fn(*args)))
        except MemoryError:
            payload = pickle.dumps(("memory", "MemoryError escaped"))
        except BaseException as e:  # noqa: BLE001  (reported to the parent, whatever it is)
            tb = "".join(traceback.format_exception(e)[-4:])
            payload = pickle.dumps(("raised", f"{type(e).__name__}: {e} | {tb}"))
        view = memoryview(payload)
        while view:
            n = os.write(wfd, view[: 1 << 16])
            view = view[n:]
    except BaseException:  # noqa: BLE001
        code = 3
    finally:
        os._exit(code)


def _read_all(rfd: int, pid: int, deadline: float) -> tuple[bytes, bool]:
    """Read the pipe until EOF; (data, timed_out)."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([rfd], [], [], min(left, 1.0))
        if not ready:
            continue
        data = os.read(rfd, 1 << 16)
        if not data:
            return b"".join(chunks), False
        chunks.append(data)


def _tail(path: str, limit: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", "replace").strip()


def run_forked(fn: Callable[..., Any], args: tuple[Any, ...] = (), limits: Limits = Limits()) -> Outcome:
    """Run ``fn(*args)`` in a forked child under ``limits``; never raises for what the child does."""
    rfd, wfd = os.pipe()
    fd, errpath = tempfile.mkstemp(prefix="glow-fuzz-", suffix=".err")
    os.close(fd)
    t0 = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child never returns)
        os.close(rfd)
        _child(fn, args, limits, wfd, errpath)
    os.close(wfd)
    try:
        data, timed_out = _read_all(rfd, pid, t0 + limits.wall_seconds)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        seconds = time.monotonic() - t0
        stderr = _tail(errpath)
    finally:
        os.close(rfd)
        os.unlink(errpath)
    if timed_out:
        return Outcome("hang", message=f"over the wall-clock limit of {limits.wall_seconds:g} s", seconds=seconds)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return Outcome("hang", message=f"over the CPU limit of {limits.cpu_seconds} s", seconds=seconds)
        name = signal.Signals(sig).name
        if any(m in stderr for m in OOM_MARKERS):
            return Outcome("memory", message=f"killed by {name} out of memory: {stderr[-300:]}", seconds=seconds)
        return Outcome("crash", message=f"killed by {name}: {stderr[-800:]}", seconds=seconds)
    try:
        kind, value = pickle.loads(data)
    except Exception:  # noqa: BLE001  (a child that exited without a complete answer)
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        return Outcome("crash", message=f"exited with status {code} without an answer: {stderr[-800:]}",
                       seconds=seconds)
    if kind == "ok":
        return Outcome("ok", value=value, seconds=seconds)
    return Outcome(kind, message=str(value), seconds=seconds)
