"""Installing backend packages the way a user does: through their own pyproject, into a temporary directory.

``pip install --no-deps --no-build-isolation --no-index --target DIR`` (the
test environment holds setuptools and wheel; tox installs them), from a copy
of the source (a build leaves build/ and *.egg-info behind). The packages are
then used by ``glow`` subprocesses with ``PYTHONPATH=DIR``.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "glow-backend-example"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pip_install(sources: list[Path], base: Path, target_name: str = "site") -> Path:
    """Install the packages at ``sources`` into ``base/target_name``; returns that directory."""
    missing = [m for m in ("setuptools", "wheel") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"installing backend packages needs {', '.join(missing)} in the test environment "
                    "(tox installs them; otherwise: pip install setuptools wheel)")
    target = base / target_name
    copies = []
    for src in sources:
        dst = base / f"src-{src.name}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        copies.append(str(dst))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--target", str(target), *copies],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    return target
