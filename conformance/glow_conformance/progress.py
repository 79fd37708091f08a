"""Progress on stderr: a live bar on a terminal, a line per tenth of the run otherwise."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


class Progress:
    """``update`` after each case. ``mode``: ``bar`` (a terminal), ``lines`` (logs, CI) or ``off``."""

    def __init__(self, total: int, mode: str | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        if mode is None:
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode = mode
        self.total = max(total, 1)
        self.done = 0
        self.failed = 0
        self.t0 = time.perf_counter()
        self._next_tenth = 1
        self._last_draw = 0.0

    def update(self, case_id: str, failed: bool) -> None:
        self.done += 1
        self.failed += int(failed)
        if self.mode == "bar":
            now = time.perf_counter()
            if now - self._last_draw >= 0.05 or self.done == self.total:
                self._last_draw = now
                self._draw(case_id)
        elif self.mode == "lines":
            while self.done * 10 >= self._next_tenth * self.total and self._next_tenth <= 10:
                self.stream.write(f"conformance: {self._next_tenth * 10:3d}% ({self.done}/{self.total} cases, "
                                  f"{self.failed} failed, {time.perf_counter() - self.t0:.0f} s)\n")
                self.stream.flush()
                self._next_tenth += 1

    def _draw(self, case_id: str) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        frac = self.done / self.total
        bar_w = 24
        filled = int(frac * bar_w)
        head = f"[{'#' * filled}{'.' * (bar_w - filled)}] {self.done}/{self.total} {frac:4.0%}"
        head += f" {self.failed} failed" if self.failed else ""
        room = max(width - len(head) - 2, 0)
        tail = case_id if len(case_id) <= room else "..." + case_id[-(room - 3):] if room > 3 else ""
        self.stream.write("\r" + (head + "  " + tail).ljust(width - 1)[: width - 1])
        self.stream.flush()

    def close(self) -> None:
        if self.mode == "bar":
            self.stream.write("\r" + " " * (shutil.get_terminal_size((100, 20)).columns - 1) + "\r")
            self.stream.flush()


__all__ = ["Progress"]
