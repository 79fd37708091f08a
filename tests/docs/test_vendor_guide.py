"""docs/vendor-guide.md, executed: from an empty directory in a fresh virtual environment to a conforming backend.

Every fenced block of the guide carries a marker comment on the line before it, which says what a reader
does with it:

- ``<!-- guide: run -->``: shell commands, run one line at a time in the guide's working directory
  (an empty temporary directory) with the fresh environment first on PATH; each must exit 0;
- ``<!-- guide: apply FILE append|replace-def -->``: a Python snippet the reader puts into FILE (its
  first line, a ``# file`` comment, is not part of it): appended, or replacing the function of the
  same name;
- ``<!-- guide: show ... -->``: output, a file listing or a file line: nothing to run;
- ``<!-- guide: skip REASON -->``: not run here, and the reason says why.

A block without a marker fails the test, so the guide cannot grow a command that is never run. The
guide's ``pip install glow-compiler ...`` must find this repository's distributions: their wheels are
built (the session's ``wheelhouse`` fixture, shared with tests/packaging/test_wheels.py) and offered to pip through ``PIP_FIND_LINKS``, every
other dependency comes from the package index under constraints.txt (``PIP_CONSTRAINT``).
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.test_metadata import REPO
from tests.packaging.wheelhouse import Wheelhouse

pytestmark = pytest.mark.slow

GUIDE = REPO / "docs" / "vendor-guide.md"
MARKER = re.compile(r"<!-- guide: (run|apply|show|skip)\b ?(.*?) ?-->")
FENCE = re.compile(r"^```")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    action: str
    arg: str
    text: str


def guide_blocks(text: str) -> list[Block]:
    """The fenced blocks of the guide with their markers; an unmarked block is an error."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        start = i
        j = i + 1
        while not FENCE.match(lines[j]):
            j += 1
        m = MARKER.fullmatch(lines[start - 1].strip()) if start else None
        if m is None:
            raise AssertionError(f"docs/vendor-guide.md line {start + 1}: a fenced block without a "
                                 "'<!-- guide: run|apply|show|skip ... -->' marker on the line before it")
        blocks.append(Block(start + 1, m.group(1), m.group(2), "\n".join(lines[start + 1:j])))
        i = j + 1
    return blocks


def apply_snippet(root: Path, block: Block) -> None:
    """Put a Python snippet into the file the marker names, as the guide tells the reader to."""
    rel, mode = block.arg.split()
    target = root / rel
    body = textwrap.dedent("\n".join(line for line in block.text.splitlines()[1:]))  # first line: "# file"
    source = target.read_text(encoding="utf-8")
    if mode == "append":
        target.write_text(source.rstrip("\n") + "\n\n\n" + body + "\n", encoding="utf-8")
        return
    assert mode == "replace-def", block
    name = re.search(r"^def (\w+)\(", body, re.M)
    assert name, f"line {block.line}: replace-def needs a function"
    lines = source.splitlines()
    (at,) = [k for k, line in enumerate(lines) if re.match(rf"\s*def {name.group(1)}\(", line)]
    indent = len(lines[at]) - len(lines[at].lstrip())
    end = at + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > at + 1 and not lines[end - 1].strip():
        end -= 1
    new = textwrap.indent(body, " " * indent).splitlines()
    target.write_text("\n".join(lines[:at] + new + lines[end:]) + "\n", encoding="utf-8")


def test_every_block_of_the_guide_is_marked() -> None:
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert [b for b in blocks if b.action == "run"], "the guide runs nothing"
    for b in blocks:
        assert b.action != "skip" or b.arg, f"line {b.line}: a skipped block must say why"
        assert b.action != "apply" or len(b.arg.split()) == 2, f"line {b.line}: apply FILE append|replace-def"


def test_a_block_without_a_marker_is_refused() -> None:
    with pytest.raises(AssertionError, match="without a"):
        guide_blocks("text\n\n```\nglow backends\n```\n")


def test_replace_def_swaps_exactly_one_method(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("class A:\n    def capabilities(self):\n        return 1\n\n    def other(self):\n        return 2\n")
    apply_snippet(tmp_path, Block(1, "apply", "m.py replace-def", "# m.py\ndef capabilities(self):\n    return 3"))
    ns: dict = {}
    exec(f.read_text(), ns)  # noqa: S102  (our own generated test file)
    assert ns["A"]().capabilities() == 3 and ns["A"]().other() == 2


@pytest.mark.xdist_group("wheels")  # (the worker that builds the wheels for the packaging tests)
def test_the_vendor_guide_runs_from_an_empty_directory(tmp_path: Path, wheelhouse: Wheelhouse) -> None:
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env["GLOW_CACHE_DIR"] = str(tmp_path / "glow-cache")
    wheels = wheelhouse.wheels
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    bin_dir = tmp_path / "venv" / "bin"
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(tmp_path / "venv"),
               PIP_FIND_LINKS=str(wheels[0].parent), PIP_CONSTRAINT=str(REPO / "constraints.txt"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    work = tmp_path / "work"
    work.mkdir()
    ran: list[str] = []
    outputs: list[str] = []
    skipped: list[str] = []
    for block in guide_blocks(GUIDE.read_text(encoding="utf-8")):
        if block.action == "apply":
            apply_snippet(work, block)
            ran.append(f"apply {block.arg}")
        elif block.action == "skip":
            skipped.append(f"line {block.line}: {block.arg}")
        elif block.action == "run":
            for command in block.text.splitlines():
                if not command.strip() or command.lstrip().startswith("#"):
                    continue
                proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                                      timeout=1800, check=False)
                assert proc.returncode == 0, (f"docs/vendor-guide.md line {block.line}: {command!r} exited "
                                              f"{proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
                ran.append(command)
                outputs.append(proc.stdout + proc.stderr)
    conformance = [o for c, o in zip([r for r in ran if not r.startswith("apply")], outputs)
                   if re.fullmatch(r"glow conformance --backend xyz", c.split("#")[0].strip())]
    assert len(conformance) == 2, ran  # as scaffolded, and after the capability step
    for out in conformance:
        m = re.search(r"level core: backend 'xyz' CONFORMS \((\d+) of (\d+) cases pass\)", out)
        assert m and m.group(1) == m.group(2), out[-2000:]
    assert "Gelu" in next(o for c, o in zip([r for r in ran if not r.startswith("apply")], outputs)
                          if c.startswith("glow sdk capabilities xyz"))
    print(f"vendor guide: {len(ran)} steps run, {len(skipped)} blocks skipped in {time.monotonic() - t0:.0f} s")
    for s in skipped:
        print("  skipped", s)
