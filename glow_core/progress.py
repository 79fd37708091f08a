"""Progress of long work: one line on a terminal, rewritten in place, for anything over ~2 s.

The compile stages report what they are doing (``with progress.stage("optimize"):``); nothing is
drawn for work that ends within :data:`DELAY` seconds, and nothing at all when stderr is not a
terminal or progress is turned off (``glow --quiet``, :func:`configure`). The line names the
outermost piece of work, the stage running now and the time since the work began::

    glow: compiling model.onnx: backend codegen (part 3 of 8) ... 12.4 s

A background thread redraws it a few times a second while a stage runs, and clears it when the
outermost stage ends, so what a command prints afterwards starts on a clean line.

This module imports nothing of ours: every layer may report to it (docs/architecture.md).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

#: seconds of work before the line appears
DELAY = 2.0
#: seconds between redraws
TICK = 0.25


@dataclass
class _Entry:
    label: str
    start: float
    detail: str = ""


class Reporter:
    """The stages running now and the line that shows them (thread-safe; one per process)."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None, delay: float = DELAY) -> None:
        self._stream = stream
        #: None: draw only when the stream is a terminal
        self.enabled = enabled
        self.delay = delay
        self._stack: list[_Entry] = []
        self._lock = threading.Lock()
        self._drawn = False
        self._thread: threading.Thread | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def active(self) -> bool:
        """Whether anything would be drawn (enabled, or a terminal when left to the default)."""
        if self.enabled is not None:
            return self.enabled
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):  # a closed or unusual stream
            return False

    def push(self, label: str) -> _Entry:
        entry = _Entry(label, time.monotonic())
        with self._lock:
            self._stack.append(entry)
            if self._thread is None and self.active():
                self._thread = threading.Thread(target=self._ticker, name="glow-progress", daemon=True)
                self._thread.start()
        return entry

    def pop(self, entry: _Entry) -> None:
        with self._lock:
            if entry in self._stack:
                self._stack.remove(entry)
            if not self._stack and self._drawn:
                self._write("\r\x1b[K")
                self._drawn = False

    def line(self) -> str:
        """The text of the line for the stages running now ("" when none runs)."""
        with self._lock:
            if not self._stack:
                return ""
            first, last = self._stack[0], self._stack[-1]
            elapsed = time.monotonic() - first.start
            what = last.label + (f" ({last.detail})" if last.detail else "")
            head = first.label if last is not first else ""
            return f"glow: {head + ': ' if head else ''}{what} ... {elapsed:.1f} s"

    def _ticker(self) -> None:
        while True:
            time.sleep(TICK)
            with self._lock:
                if not self._stack:  # idle: the next stage starts a new thread
                    self._thread = None
                    return
                due = time.monotonic() - self._stack[0].start >= self.delay
            if due and self.active():
                text = self.line()
                with self._lock:
                    if self._stack:
                        self._write("\r" + text[:200] + "\x1b[K")
                        self._drawn = True

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream: progress is never worth an error
            pass


_reporter = Reporter()


def configure(enabled: bool | None) -> None:
    """Turn progress on (``True``), off (``False``, ``glow --quiet``) or back to automatic (``None``: only when
    stderr is a terminal)."""
    _reporter.enabled = enabled


@contextmanager
def stage(label: str) -> Iterator[_Entry]:
    """Report ``label`` while the block runs; ``entry.detail`` may be updated ("part 3 of 8")."""
    entry = _reporter.push(label)
    try:
        yield entry
    finally:
        _reporter.pop(entry)


__all__ = ["DELAY", "Reporter", "configure", "stage"]
