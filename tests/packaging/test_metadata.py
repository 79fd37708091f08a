"""The distributions' declared metadata: names, the core-version/SDK-API relation, honest minimums, license.

Static checks of the pyproject.toml files (and the scaffold's output), fast; the wheels built from them
are installed and run in ``test_wheels.py``.
"""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import glow_core
from glow_tools.scaffold import BackendNames, render
from glow_sdk.version import CORE_DISTRIBUTION, SDK_API_VERSION, core_requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before Python 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
#: folder -> distribution name: everything this repository publishes
DISTRIBUTIONS = {
    ".": "glow-compiler",
    "plugins/interpreter": "glow-backend-interpreter",
    "plugins/cpu": "glow-backend-cpu",
    "plugins/openvino": "glow-backend-openvino",
    "conformance": "glow-conformance",
    "examples/glow-backend-example": "glow-backend-example",
}
#: the ones whose pages are this repository's (the example is what the scaffold writes for a vendor)
FIRST_PARTY = [d for d in DISTRIBUTIONS if not d.startswith("examples/")]
HOME = "https://github.com/glow-compiler/glow"
#: names on the package index that belong to unrelated projects
FOREIGN = {"glow", "glow-sdk"}


def _project(folder: str) -> dict:
    return tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]


def _requirements(project: dict) -> list[Requirement]:
    return [Requirement(r) for r in project.get("dependencies", [])]


def _core_range(api: int) -> SpecifierSet:
    return SpecifierSet(f">=0.{api},<0.{api + 1}")


def test_core_requirement_matches_the_sdk_api_version() -> None:
    req = Requirement(core_requirement())
    assert req.name == CORE_DISTRIBUTION == "glow-compiler"
    assert req.specifier == _core_range(SDK_API_VERSION)
    assert Requirement(core_requirement(7)).specifier == SpecifierSet(">=0.7,<0.8")


def test_core_version_is_zero_dot_sdk_api_dot_patch() -> None:
    project = _project(".")
    assert project["name"] == CORE_DISTRIBUTION
    # the version is glow_core.version.__version__ (one source, re-exported as glow_core.__version__),
    # read by setuptools
    assert "version" in project.get("dynamic", []) and "version" not in project
    setuptools_cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools_cfg["dynamic"]["version"] == {"attr": "glow_core.version.__version__"}
    version = Version(glow_core.__version__)
    assert (version.major, version.minor) == (0, SDK_API_VERSION), \
        f"glow_core.__version__ {version} must be 0.{SDK_API_VERSION}.PATCH (SDK API version {SDK_API_VERSION})"
    assert version in _core_range(SDK_API_VERSION)


@pytest.mark.parametrize("folder", [d for d in DISTRIBUTIONS if d != "."])
def test_every_distribution_requires_the_core_range_of_this_sdk_api(folder: str) -> None:
    project = _project(folder)
    assert project["name"] == DISTRIBUTIONS[folder]
    cores = [r for r in _requirements(project) if r.name == CORE_DISTRIBUTION]
    assert len(cores) == 1, f"{folder}/pyproject.toml must depend on {core_requirement()}"
    assert cores[0].specifier == _core_range(SDK_API_VERSION), \
        f"{folder}/pyproject.toml: {cores[0]} is not {core_requirement()} (SDK API {SDK_API_VERSION})"


def test_scaffold_output_requires_the_core_range() -> None:
    text = render(BackendNames.of("xyz"))["pyproject.toml"]
    project = tomllib.loads(text)["project"]
    cores = [r for r in _requirements(project) if r.name == CORE_DISTRIBUTION]
    assert [c.specifier for c in cores] == [_core_range(SDK_API_VERSION)]
    assert project["license"] and project["description"] and project["readme"] == "README.md"


def test_no_pyproject_depends_on_a_foreign_distribution() -> None:
    pyprojects = [p for p in REPO.rglob("pyproject.toml") if ".tox" not in p.parts and ".git" not in p.parts]
    assert len(pyprojects) >= len(DISTRIBUTIONS)
    scaffolded = tomllib.loads(render(BackendNames.of("xyz"))["pyproject.toml"])["project"]
    for name, project in [(str(p), tomllib.loads(p.read_text())["project"]) for p in pyprojects] + \
            [("scaffold", scaffolded)]:
        extras = [r for deps in project.get("optional-dependencies", {}).values() for r in deps]
        names = {Requirement(r).name.lower() for r in project.get("dependencies", []) + extras}
        assert not names & FOREIGN, f"{name} depends on {names & FOREIGN}, an unrelated project on the index"


@pytest.mark.parametrize("folder", list(DISTRIBUTIONS))
def test_license_description_readme_and_urls(folder: str) -> None:
    project = _project(folder)
    assert project["license"] == "Apache-2.0"
    assert len(project["description"]) > 20
    if (REPO / folder / "README.md").exists():
        assert project["readme"] == "README.md"
    if folder in FIRST_PARTY:
        assert project["license-files"] == ["LICENSE"]
        assert (REPO / folder / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
        urls = project["urls"]
        assert set(urls) >= {"Homepage", "Documentation", "Source", "Issues"}
        assert all(u.startswith(HOME) for u in urls.values()), urls


def test_license_file_is_the_full_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "9. Accepting Warranty or Additional Liability." in text and "END OF TERMS AND CONDITIONS" in text
    assert "Copyright 2026 The Glow authors" in text and "[yyyy]" not in text
    assert len(text) > 11000


def test_ml_dtypes_is_declared_since_glow_core_imports_it() -> None:
    pattern = re.compile(r"^\s*(?:import|from) (\w+)", flags=re.MULTILINE)
    imported = {name for f in (REPO / "glow_core").rglob("*.py") for name in pattern.findall(f.read_text())}
    assert "ml_dtypes" in imported
    declared = {r.name for r in _requirements(_project("."))}
    assert {"numpy", "onnx", "pluggy", "ml_dtypes"} <= declared


def _declared_minimums() -> dict[str, Version]:
    """Every run-time dependency of every distribution -> its declared lower bound (the highest if several)."""
    mins: dict[str, Version] = {}
    for folder in DISTRIBUTIONS:
        for req in _requirements(_project(folder)):
            if req.name == CORE_DISTRIBUTION:
                continue
            lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
            assert lows, f"{folder}: {req} declares no minimum version"
            mins[req.name] = max([*lows, mins.get(req.name, lows[0])])
    return mins


def _tox_min_pins() -> dict[str, Version]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    pins = {}
    for line in tox["testenv:min"]["deps"].splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-")):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"tox -e min: {line} is not a pin"
            pins[req.name.replace("_", "-").lower()] = Version(spec.version)
    return pins


def test_tox_min_installs_exactly_the_declared_minimums() -> None:
    mins = _declared_minimums()
    assert set(mins) >= {"numpy", "onnx", "pluggy", "ml_dtypes", "llvmlite"}
    pins = _tox_min_pins()
    for name, low in mins.items():
        key = name.replace("_", "-").lower()
        assert key in pins, f"tox -e min does not pin {name}"
        assert pins[key] == low, f"tox -e min installs {name} {pins[key]}, the pyproject files declare >={low}"


def test_constraints_pin_every_test_time_dependency() -> None:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line} is not a pin"
            pins[name.replace("_", "-").lower()] = version
    wanted = set(_declared_minimums())
    for extra in _project(".")["optional-dependencies"].values():
        wanted |= {Requirement(r).name for r in extra}
    wanted |= {"tox", "protobuf"}
    missing = {w for w in wanted if w.replace("_", "-").lower() not in pins}
    assert not missing, f"constraints.txt pins no version of {sorted(missing)}"


def test_plugin_guide_shows_the_current_core_range() -> None:
    text = (REPO / "docs" / "plugins.md").read_text()
    assert f'dependencies = ["{core_requirement()}"]' in text
    assert "glow-compiler glow-backend-interpreter glow-conformance" in (REPO / "docs" / "vendor-guide.md").read_text()
    readme = (REPO / "README.md").read_text()
    assert "python3 -m pip install -c constraints.txt " in readme and "https://github.com/glow-compiler/glow" in readme


#: what the README's first command may install besides glow's own distributions: the run-time dependencies
#: and tox (the test tooling is the [test] extra, which tox installs in its own environment)
LEAN = {"numpy", "onnx", "pluggy", "ml-dtypes", "llvmlite"}


def test_the_quickstart_installs_only_what_running_glow_needs() -> None:
    """The README's first command: no extra (no Ray, onnxruntime or test tooling), tox, then the digits run;
    the second runs tox. The distributions it installs declare only the lean run-time dependencies."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Quickstart"):readme.index("If your system Python refuses")]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    assert [b.strip() for b in blocks[1:]] == ["tox"] and len(blocks) == 2, blocks
    first = blocks[0].strip()
    assert first.startswith("python3 -m pip install -c constraints.txt ") and "[" not in first
    assert first.endswith("tox && glow run zoo:digits --backend cpu")
    folders = [w.removeprefix("./") for w in first.split("&&")[0].split()[6:] if w != "tox"]
    assert folders == [".", "plugins/interpreter", "plugins/cpu", "conformance"], folders
    for folder in folders:
        deps = {Requirement(r).name.replace("_", "-").lower() for r in _project(folder).get("dependencies", [])}
        assert deps - {"glow-compiler"} <= LEAN, (folder, deps - LEAN)
    assert "ray" not in str(_project(".")["dependencies"]) and "onnxruntime" not in str(_project(".")["dependencies"])
