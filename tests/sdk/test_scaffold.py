"""``glow sdk new-backend``: the scaffolded package, the examples/ copy of it, and the round trip
scaffold -> pip install -> glow backends -> glow conformance -> the package's own tests."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from glow_sdk.version import SDK_API_VERSION
from glow_tools.scaffold import BackendNames, ScaffoldError, new_backend, render
from tests.cliutil import glow
from tests.conformance.pkgs import EXAMPLE, pip_install


@pytest.mark.parametrize("name, dist, package, cls", [
    ("xyz", "glow-backend-xyz", "glow_backend_xyz", "XyzBackend"),
    ("acme-npu", "glow-backend-acme-npu", "glow_backend_acme_npu", "AcmeNpuBackend"),
    ("v2_chip", "glow-backend-v2-chip", "glow_backend_v2_chip", "V2ChipBackend"),
])
def test_names(name: str, dist: str, package: str, cls: str) -> None:
    assert BackendNames.of(name) == BackendNames(name, dist, package, cls)


@pytest.mark.parametrize("bad", ["Xyz", "2fast", "a--b", "a b", "", "x-", "interpreter", "cpu"])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ScaffoldError):
        BackendNames.of(bad)


def test_the_package_files(tmp_path: Path) -> None:
    sc = new_backend("xyz", tmp_path / "pkg")
    rel = sorted(str(f.relative_to(sc.root)) for f in sc.files)
    assert rel == sorted(["pyproject.toml", "README.md", "glow_backend_xyz/__init__.py", "glow_backend_xyz/plugin.py",
                          "glow_backend_xyz/backend.py", "glow_backend_xyz/kernels.py",
                          "glow_backend_xyz/conformance_waivers.txt", "tests/test_conformance.py",
                          "tests/test_kernels.py"])
    for f in sc.files:
        if f.suffix == ".py":
            py_compile.compile(str(f), doraise=True)
    pyproject = (sc.root / "pyproject.toml").read_text()
    assert 'name = "glow-backend-xyz"' in pyproject and 'xyz = "glow_backend_xyz.plugin"' in pyproject
    backend = (sc.root / "glow_backend_xyz/backend.py").read_text()
    assert 'BACKEND_NAME = "xyz"' in backend and "class XyzBackend(Backend)" in backend
    for f in sc.files:  # plugins never import each other
        assert "glow_backend_interpreter" not in f.read_text() and "glow_conformance" not in f.read_text() \
            or f.parent.name == "tests"
    with pytest.raises(ScaffoldError, match="already exists and is not an empty directory"):
        new_backend("xyz", tmp_path / "pkg")


def test_examples_hold_what_the_scaffold_writes() -> None:
    want = render(BackendNames.of("example"))
    got = {str(p.relative_to(EXAMPLE)): p.read_text() for p in EXAMPLE.rglob("*")
           if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)}
    assert set(got) == set(want), "regenerate: glow sdk new-backend example examples/glow-backend-example"
    stale = [name for name in want if got[name] != want[name]]
    assert not stale, (f"examples/glow-backend-example is stale in {stale}; regenerate it with "
                       "'glow sdk new-backend example examples/glow-backend-example' (after removing it)")


def test_scaffold_install_conform_round_trip(tmp_path: Path) -> None:
    r = glow(["sdk", "new-backend", "acme-npu", str(tmp_path / "glow-backend-acme-npu")], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "glow conformance --backend acme-npu" in r.stdout
    site = pip_install([tmp_path / "glow-backend-acme-npu"], tmp_path)
    listed = glow(["backends"], pythonpath=[site], cwd=tmp_path)
    row = next(ln for ln in listed.stdout.splitlines() if ln.startswith("acme-npu "))
    assert row.split()[1] == "ok" and "glow-backend-acme-npu" in row
    conf = glow(["conformance", "--backend", "acme-npu", "--report-dir", str(tmp_path / "report"), "--progress",
                 "off"], pythonpath=[site], cwd=tmp_path, timeout=900)
    assert conf.returncode == 0, conf.stdout[-4000:] + conf.stderr[-4000:]
    assert "backend 'acme-npu' CONFORMS" in conf.stdout
    caps = glow(["sdk", "capabilities", "acme-npu"], pythonpath=[site], cwd=tmp_path)
    assert caps.returncode == 0 and "missing" in caps.stdout and "0 missing" in caps.stdout
    # the package's own tests (kernels against the reference, the conformance suite), on the installed copy
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(tmp_path / "glow-backend-acme-npu" / "tests")],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900, check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "7 passed" in tests.stdout


def test_sdk_info_and_capabilities_json() -> None:
    info = glow(["sdk", "info"])
    assert info.returncode == 0 and info.stdout.startswith(f"SDK API version {SDK_API_VERSION}")
    assert "Add" in info.stdout and "float32, int32, int64" in info.stdout
    caps = glow(["sdk", "capabilities", "interpreter", "--json"])
    import json

    data = json.loads(caps.stdout)
    assert data["backend"] == "interpreter" and data["missing_mandatory"] == {}
    bad = glow(["sdk", "new-backend", "Bad Name"])
    assert bad.returncode == 1 and bad.error_line().startswith("glow: error: 'Bad Name' is not a valid backend name")
