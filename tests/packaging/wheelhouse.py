"""Building the wheels of every distribution from copies of their sources (shared by the packaging
test and the executed vendor guide, tests/docs/test_vendor_guide.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .test_metadata import DISTRIBUTIONS, REPO

#: what the root distribution's wheel is built from (the rest of the checkout is not part of it)
ROOT_FILES = ["pyproject.toml", "README.md", "LICENSE", "glow_core", "glow_sdk", "glow_tools", "glow_cli"]
IGNORE = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc")


@dataclass(frozen=True)
class Wheelhouse:
    """The session's wheels (``tests/conftest.py``) and the build artefacts the checkout held before they were
    built (``build_artefacts``)."""

    wheels: list[Path]
    artefacts_before: list[Path]


def build_artefacts(root: Path = REPO) -> list[Path]:
    """build/ and *.egg-info folders in the source tree (outside hidden folders: .git, .tox, virtual environments)."""
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        # hidden folders (.git, .tox, .venv, .ci-venv: environments hold installed packages) are not the tree
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
        for d in dirnames:
            if d == "build" or d.endswith(".egg-info"):
                found.append(Path(dirpath, d).relative_to(root))
    return sorted(found)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _copy_sources(folder: str, dst: Path) -> Path:
    src = REPO / folder
    if folder == ".":
        dst.mkdir(parents=True)
        for name in ROOT_FILES:
            item = src / name
            if item.is_dir():
                shutil.copytree(item, dst / name, ignore=IGNORE)
            else:
                shutil.copy2(item, dst / name)
    else:
        shutil.copytree(src, dst, ignore=IGNORE)
    return dst


def build_wheels(base: Path, env: dict[str, str]) -> list[Path]:
    """Wheels of the five distributions in ``base / "dist"``, each built from a copy of its sources under
    ``base / "src"`` by the test environment's setuptools (pinned in constraints.txt), as in
    tests/test_plugins.py."""
    copies = [_copy_sources(folder, base / "src" / DISTRIBUTIONS[folder]) for folder in DISTRIBUTIONS]
    out = base / "dist"
    proc = _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                 "--disable-pip-version-check", "--wheel-dir", str(out), *map(str, copies)], base, env)
    assert proc.returncode == 0, f"building the wheels failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == len(DISTRIBUTIONS), wheels
    return wheels
