"""Waiver files: cases a backend may fail, each with a reason.

Format: one waiver per line, ``CASE-ID-PATTERN: reason``; ``*`` in the
pattern matches any text (``fnmatch``), ``#`` starts a comment, blank lines
are ignored::

    # float16 transcendental functions run on the device's fast path
    primitive/Exp/float16/*: the XYZ exp unit is accurate to 3 ulps
    high-level/LSTM/*: not yet; tracked as XYZ-123

A waiver turns a ``fail`` (or an ``unsupported``) into ``waived``. Mandatory
cases cannot be waived: a waiver that matches one is reported as rejected and
the case keeps its result. Waivers that match no case are reported as unused.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from glow_core.errors import GlowError


class WaiverError(GlowError):
    """A waiver file that cannot be used (bad line, missing reason)."""


@dataclass
class Waiver:
    pattern: str
    reason: str
    source: str  # file:line
    matched: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # mandatory cases it tried to waive

    def matches(self, case_id: str) -> bool:
        return fnmatch.fnmatchcase(case_id, self.pattern)


def parse_waivers(text: str, source: str = "<waivers>") -> list[Waiver]:
    out: list[Waiver] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pattern, sep, reason = line.partition(":")
        pattern, reason = pattern.strip(), reason.strip()
        if not sep or not pattern:
            raise WaiverError(f"{source}:{no}: '{raw.strip()}' is not of the form CASE-ID-PATTERN: reason")
        if not reason:
            raise WaiverError(f"{source}:{no}: the waiver of '{pattern}' gives no reason",
                              hint="every waiver needs a reason after the colon")
        out.append(Waiver(pattern, reason, f"{source}:{no}"))
    return out


def load_waivers(path: str | Path) -> list[Waiver]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise WaiverError(f"cannot read the waiver file '{p}': {e.strerror or e}") from None
    return parse_waivers(text, str(p))


def find_waiver(waivers: list[Waiver], case_id: str) -> Waiver | None:
    return next((w for w in waivers if w.matches(case_id)), None)


__all__ = ["Waiver", "WaiverError", "find_waiver", "load_waivers", "parse_waivers"]
