"""Reading the shell blocks of the Markdown docs, and matching sample output with ``...`` wildcards.

A fenced code block of a doc is a *shell block* when one of its lines starts
with ``glow `` or ``$ glow ``:

- ``$ glow ARGS`` is a *sample*: the lines after it, up to the next ``$`` line
  or the end of the block, are its expected output (stdout and stderr as a
  terminal shows them). Tests run it and compare.
- ``glow ARGS`` (no ``$``) is an example command shown without output: tests
  check that the parsers accept it.

An HTML comment ``<!-- sample-env: NAME -->`` on the line before a block names
an environment the block's samples need (see ``test_cli_samples.py``).

In expected output, ``...`` on a line of its own matches any number of lines,
``...`` inside a line matches any text, and a run of spaces matches any run of
spaces or tabs; everything else is literal. Trailing spaces are ignored.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(```|~~~)")
_ENV = re.compile(r"<!--\s*sample-env:\s*([\w, -]+?)\s*-->")


@dataclass
class Sample:
    """``$ glow ARGS`` with the output shown after it."""

    doc: str
    line: int
    command: str
    expected: list[str] = field(default_factory=list)
    env: tuple[str, ...] = ()

    @property
    def args(self) -> list[str]:
        return shlex.split(self.command, comments=True)[1:]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}:{self.command}"


@dataclass
class Example:
    """``glow ARGS`` shown without output (one segment of a line such as ``a && glow b``)."""

    doc: str
    line: int
    command: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}:{self.command}"


def code_blocks(path: Path) -> list[tuple[int, list[str], tuple[str, ...]]]:
    """``(first line number, lines, sample-env names)`` of every fenced block of ``path``."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if _FENCE.match(lines[i]):
            env: tuple[str, ...] = ()
            m = _ENV.search(lines[i - 1]) if i > 0 else None
            if m:
                env = tuple(e.strip() for e in m.group(1).split(",") if e.strip())
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                j += 1
            blocks.append((i + 2, lines[i + 1:j], env))
            i = j + 1
        else:
            i += 1
    return blocks


def samples(path: Path) -> list[Sample]:
    out: list[Sample] = []
    for first, lines, env in code_blocks(path):
        current: Sample | None = None
        for k, text in enumerate(lines):
            if text.startswith("$ "):
                current = None
                if text.startswith("$ glow ") or text == "$ glow":
                    current = Sample(path.name, first + k, text[2:].strip(), env=env)
                    out.append(current)
            elif current is not None:
                current.expected.append(text)
    return out


def examples(path: Path) -> list[Example]:
    """The ``glow ...`` commands of blocks without samples (a sample block's other lines are output).

    Not examples: usage synopses (any line with ``[``, as in ``glow run [-h] ...``)
    and output lines such as ``glow 0.1.0``. Shell redirections, ``&&``, ``|``
    and ``# comments`` are cut off.
    """
    out = []
    for first, lines, _ in code_blocks(path):
        if any(text.startswith("$ ") for text in lines):
            continue
        for k, text in enumerate(lines):
            if "[" in text:
                continue
            for segment in re.split(r"&&|\|\||;|\||>", text.split(" #")[0]):
                words = segment.split()
                if words[:1] == ["glow"] and not (len(words) > 1 and words[1][:1].isdigit()):
                    out.append(Example(path.name, first + k, segment.strip()))
    return out


def _line_pattern(line: str) -> str:
    parts = []
    for piece in re.split(r"(\.\.\.|[ \t]+)", line.rstrip()):
        if piece == "...":
            parts.append(".*?")
        elif piece and piece.isspace():
            parts.append(r"[ \t]+")
        else:
            parts.append(re.escape(piece))
    return "".join(parts)


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    """The regular expression a sample's whole output must match."""
    pieces = []
    for line in expected:
        if line.strip() == "...":
            pieces.append(r"(?:[^\n]*\n)*?")
        else:
            pieces.append(_line_pattern(line) + r"[ \t]*\n")
    return re.compile("".join(pieces))


def matches(expected: list[str], actual: str) -> bool:
    text = "".join(ln.rstrip() + "\n" for ln in actual.splitlines())
    return output_pattern(expected).fullmatch(text) is not None
