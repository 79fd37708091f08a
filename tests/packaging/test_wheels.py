"""Wheels of every distribution, installed into a fresh virtual environment the way a user installs them.

The module fixture copies each distribution's sources to a temporary directory, builds its wheel there
(a setuptools build leaves build/ and NAME.egg-info beside its pyproject.toml), creates a virtual
environment outside the source tree, and pip-installs the five wheels into it, the run-time dependencies
resolved from the package index under constraints.txt. The tests then run the installed ``glow`` from a
temporary working directory: nothing of the checkout is importable there.
"""

from __future__ import annotations

import os
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from glow_sdk.version import CORE_DISTRIBUTION, SDK_API_VERSION, core_requirement

from .test_metadata import DISTRIBUTIONS, HOME, REPO
from .wheelhouse import Wheelhouse, _run, build_artefacts

#: one worker builds and installs the wheels once (with --dist loadgroup; spread over both workers, each built
#: them: 2 x 25 s in CI), for the whole session: a module-scoped fixture was built again whenever the worker ran
#: another module's test between two of these
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheels")]

class Installed:
    def __init__(self, base: Path, wheels: list[Path], python: Path, env: dict[str, str], before: list[Path]):
        self.base, self.wheels, self.python, self.env, self.before = base, wheels, python, env, before
        self.bin = python.parent
        self.cwd = base / "work"
        self.cwd.mkdir()

    def glow(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return _run([str(self.bin / "glow"), *args], self.cwd, self.env, timeout)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Wheelhouse) -> Installed:
    before = wheelhouse.artefacts_before  # (the wheels are built once per session: tests/conftest.py)
    base = tmp_path_factory.mktemp("wheels")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env["GLOW_CACHE_DIR"] = str(base / "glow-cache")
    wheels = wheelhouse.wheels

    venv.EnvBuilder(with_pip=True).create(base / "venv")
    python = base / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    proc = _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "-c", str(REPO / "constraints.txt"), *map(str, wheels)], base, env)
    assert proc.returncode == 0, f"installing the wheels failed:\n{proc.stdout}\n{proc.stderr}"
    return Installed(base, wheels, python, env, before)


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return z.read(name).decode()


def test_wheels_carry_names_the_core_range_license_and_urls(installed: Installed) -> None:
    by_name = {}
    for wheel in installed.wheels:
        meta = _metadata(wheel)
        name = next(line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Name: "))
        by_name[name] = meta
    assert set(by_name) == set(DISTRIBUTIONS.values())
    core_version = next(line.split(": ", 1)[1] for line in by_name[CORE_DISTRIBUTION].splitlines()
                        if line.startswith("Version: "))
    assert core_version.startswith(f"0.{SDK_API_VERSION}.")
    for name, meta in by_name.items():
        lines = meta.splitlines()
        assert "License-Expression: Apache-2.0" in lines, name
        requires = [Requirement(line.split(": ", 1)[1]) for line in lines if line.startswith("Requires-Dist: ")]
        assert not [r for r in requires if r.name in ("glow", "glow-sdk")], name
        if name != CORE_DISTRIBUTION:
            (core,) = [r for r in requires if r.name == CORE_DISTRIBUTION]
            assert core.specifier == Requirement(core_requirement()).specifier and core_version in core.specifier
        if name != "glow-backend-example":
            assert f"Project-URL: Homepage, {HOME}" in lines, name
            assert any(line.startswith("License-File: LICENSE") for line in lines), name
    assert "Requires-Dist: ml_dtypes>=0.5.4" in by_name[CORE_DISTRIBUTION].splitlines()


def test_installed_environment_is_consistent_and_outside_the_checkout(installed: Installed) -> None:
    proc = _run([str(installed.python), "-m", "pip", "check"], installed.cwd, installed.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = "import glow_core, glow_backend_cpu; print(glow_core.__file__); print(glow_backend_cpu.__file__)"
    proc = _run([str(installed.python), "-c", where], installed.cwd, installed.env)
    assert proc.returncode == 0, proc.stderr
    for path in proc.stdout.split():
        assert Path(path).resolve().is_relative_to(installed.base.resolve()), path
        assert not Path(path).resolve().is_relative_to(REPO), path


def test_glow_version_and_backends(installed: Installed) -> None:
    r = installed.glow("--version")
    assert r.returncode == 0 and CORE_DISTRIBUTION in r.stdout and f"SDK API version {SDK_API_VERSION}" in r.stdout
    r = installed.glow("backends")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:] if line.strip()}
    for name, dist in [("cpu", "glow-backend-cpu"), ("interpreter", "glow-backend-interpreter"),
                       ("example", "glow-backend-example")]:
        assert rows[name][1] == "ok" and rows[name][3] == dist, r.stdout


def test_zoo_model_runs_on_cpu(installed: Installed) -> None:
    r = installed.glow("run", "zoo:squeezenet", "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    assert "backend  cpu (glow-backend-cpu" in r.stdout and "output softmaxout_1: float32[1,1000,1,1]" in r.stdout


def test_a_sample_of_conformance_core_on_cpu_passes(installed: Installed) -> None:
    """The installed wheels run the suite (1 case in 10 of level core; the whole level is the `full` tier)."""
    r = installed.glow("conformance", "--backend", "cpu", "--level", "core", "--sample", "10",
                       "--report-dir", str(installed.base / "sample-reports"), timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "PASSES THE SELECTED CASES" in r.stdout and "sample: 1 case in 10" in r.stdout
    assert (installed.base / "sample-reports" / "report.partial.json").is_file()


@pytest.mark.full
def test_conformance_core_on_cpu_conforms(installed: Installed) -> None:
    r = installed.glow("conformance", "--backend", "cpu", "--level", "core",
                       "--report-dir", str(installed.base / "reports"), timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "'cpu' CONFORMS" in r.stdout
    assert (installed.base / "reports" / "report.json").is_file()


def test_builds_leave_no_artefacts_in_the_source_tree(installed: Installed) -> None:
    assert build_artefacts() == installed.before, "building the wheels left build/ or *.egg-info in the checkout"
    if os.environ.get("TOX_ENV_NAME"):
        # tox's editable installs (pip's build isolation writes NAME.egg-info; commands_pre removes it)
        assert installed.before == [], f"build artefacts in the checkout after tox's install: {installed.before}"
