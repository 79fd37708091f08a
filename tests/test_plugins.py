"""The plugin host: discovery through entry points, and every way a plugin can fail.

Two layers:

- in-process :class:`~glow_core.plugin_host.Registry` tests with plugin objects
  (incompatible SDK API version, a raising hook, duplicate names, malformed
  records, ``GLOW_BLOCK_PLUGINS``, ``GLOW_DISABLE_PLUGIN_AUTOLOAD``, unknown names);
- real installations: the fixture packages under ``tests/fixtures`` are
  pip-installed into a temporary ``--target`` directory and ``glow`` runs in a
  subprocess with that directory on ``PYTHONPATH``, like a user's environment
  holding a broken plugin.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from glow_core.errors import PluginError, UnknownBackendError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import Registry, describe_exception, registry, root_cause
from glow_sdk import SDK_API_VERSION, Backend, BackendSpec, CompiledFunction, CompileOptions, hookimpl
from glow_sdk.version import supported_text
from tests.cliutil import add_relu_model, glow, save

FIXTURES = Path(__file__).resolve().parent / "fixtures"


# -- a toy backend and plugin objects ------------------------------------------------
class _Exe(CompiledFunction):
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}


class ToyBackend(Backend):
    name = "toy"

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return {"Add": frozenset({ElemKind.FLOAT32})}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return _Exe(function)


class Plugin:
    """A plugin object providing one backend spec."""

    def __init__(self, name: str = "toy", api: Any = SDK_API_VERSION, factory: Any = ToyBackend) -> None:
        self.spec = BackendSpec(name=name, factory=factory, sdk_api_version=api, version="1.0")

    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [self.spec]


class RaisingPlugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        raise ValueError("vendor SDK not configured")


class MalformedPlugin:
    @hookimpl
    def glow_backends(self) -> list[Any]:
        return ["not a spec"]


class NoHookPlugin:
    def glow_backends(self) -> list[BackendSpec]:  # no @hookimpl marker
        return []


class UnknownHookPlugin:
    @hookimpl
    def glow_frobnicate(self) -> None:  # not in the hook specifications
        return None


def _status(reg: Registry, name: str) -> str:
    rec = reg.record(name)
    assert rec is not None, f"no record for {name}"
    return rec.status


# -- in-process registry ---------------------------------------------------------------
def test_good_plugin_registers_and_creates_backend_once() -> None:
    reg = Registry()
    reg.register_plugin(Plugin(), "toy-plugin", "glow-backend-toy", "1.0")
    assert reg.names() == ["toy"]
    a = reg.get("toy")
    assert isinstance(a, ToyBackend) and reg.get("toy") is a
    rec = reg.record("toy")
    assert rec is not None and rec.origin == "glow-backend-toy 1.0" and rec.plugin == "toy-plugin"


@pytest.mark.parametrize("api, todo", [(SDK_API_VERSION + 98, "upgrade glow"),
                                       (0, "upgrade glow-backend-old")])
def test_incompatible_sdk_api_version_is_reported_with_what_to_upgrade(api: int, todo: str) -> None:
    reg = Registry()
    reg.register_plugin(Plugin("old", api=api), "old", "glow-backend-old", "0.1")
    reg.register_plugin(Plugin("toy"), "toy")
    rec = reg.record("old")
    assert rec is not None and rec.status == "incompatible"
    assert f"version {api}" in rec.error and f"supports {supported_text()}" in rec.error
    assert todo in rec.error
    assert reg.names() == ["toy"]
    with pytest.raises(PluginError, match="incompatible"):
        reg.get("old")


def test_hook_that_raises_is_recorded_and_skipped() -> None:
    reg = Registry()
    reg.register_plugin(RaisingPlugin(), "raiser", "glow-backend-raiser", "2.0")
    reg.register_plugin(Plugin(), "toy")
    assert _status(reg, "raiser") == "error"
    rec = reg.record("raiser")
    assert rec is not None
    assert "ValueError: vendor SDK not configured" in rec.error and "Traceback" in rec.cause
    assert reg.names() == ["toy"] and isinstance(reg.get("toy"), ToyBackend)


def test_duplicate_backend_name_keeps_the_first() -> None:
    reg = Registry()
    reg.register_plugin(Plugin(), "first", "glow-backend-first", "1")
    reg.register_plugin(Plugin(factory=lambda: None), "second", "glow-backend-second", "2")
    dup = [r for r in reg.failed if r.name == "toy"]
    assert len(dup) == 1 and dup[0].status == "error"
    assert "duplicate backend name 'toy'" in dup[0].error and "glow-backend-first 1" in dup[0].error
    assert dup[0].distribution == "glow-backend-second"
    assert isinstance(reg.get("toy"), ToyBackend)


def test_duplicate_plugin_name_is_reported() -> None:
    reg = Registry()
    reg.register_plugin(Plugin("a"), "same", "dist-a")
    reg.register_plugin(Plugin("b"), "same", "dist-b")
    assert reg.names() == ["a"]
    assert any("already registered" in r.error for r in reg.failed)


@pytest.mark.parametrize("plugin, text", [
    (MalformedPlugin(), "expected glow_sdk.BackendSpec"),
    (NoHookPlugin(), "implements no glow_backends() hook"),
    (UnknownHookPlugin(), "does not fit the glow hook specifications"),
])
def test_malformed_plugins_are_recorded(plugin: object, text: str) -> None:
    reg = Registry()
    reg.register_plugin(plugin, "bad")
    reg.register_plugin(Plugin(), "toy")
    assert _status(reg, "bad") == "error"
    rec = reg.record("bad")
    assert rec is not None and text in rec.error
    assert reg.names() == ["toy"]


def test_factory_failure_marks_the_backend_broken() -> None:
    def factory() -> Backend:
        raise OSError("device /dev/xyz0 not found")

    reg = Registry()
    reg.register_plugin(Plugin("dev", factory=factory), "dev")
    with pytest.raises(PluginError, match="failed to start.*device /dev/xyz0 not found"):
        reg.get("dev")
    assert _status(reg, "dev") == "error" and reg.names() == []
    with pytest.raises(PluginError, match="unavailable"):
        reg.get("dev")


def test_factory_returning_a_non_backend() -> None:
    reg = Registry()
    reg.register_plugin(Plugin("odd", factory=lambda: object()), "odd")
    with pytest.raises(PluginError, match="not a glow_sdk.Backend"):
        reg.get("odd")


def test_unknown_backend_says_choose_one_of() -> None:
    reg = Registry()
    reg.register_plugin(Plugin("toy"), "toy")
    reg.register_plugin(Plugin("abc"), "abc")
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'nope'; choose one of: abc, toy"):
        reg.get("nope")
    empty = Registry()
    with pytest.raises(UnknownBackendError, match=r"choose one of: \(none installed\)"):
        empty.get("nope")


def _ep(name: str, value: str) -> md.EntryPoint:
    return md.EntryPoint(name=name, value=value, group="glow.backends")


def test_entry_point_that_fails_to_import_keeps_the_root_cause() -> None:
    reg = Registry()
    reg.load_entry_points([_ep("ghost", "glow_fixture_no_such_module.plugin"),
                           _ep("interpreter", "glow_backend_interpreter.plugin")])
    rec = reg.record("ghost")
    assert rec is not None and rec.status == "error"
    assert "failed to import glow_fixture_no_such_module.plugin" in rec.error
    assert "ModuleNotFoundError" in rec.error and "ModuleNotFoundError" in rec.cause
    assert "interpreter" in reg.names()


def test_block_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOW_BLOCK_PLUGINS", "interpreter, other")
    reg = Registry()
    reg.load_entry_points([_ep("interpreter", "glow_backend_interpreter.plugin")])
    assert reg.names() == [] and _status(reg, "interpreter") == "blocked"
    with pytest.raises(PluginError, match="blocked"):
        reg.get("interpreter")
    # a blocked name stays blocked for in-process registration too
    reg.register_plugin(Plugin(), "interpreter")
    assert reg.names() == []


@pytest.mark.parametrize("value, loads", [("1", False), ("true", False), ("0", True), ("", True)])
def test_disable_autoload(monkeypatch: pytest.MonkeyPatch, value: str, loads: bool) -> None:
    monkeypatch.setenv("GLOW_DISABLE_PLUGIN_AUTOLOAD", value)
    reg = Registry()
    reg.load_entry_points([_ep("interpreter", "glow_backend_interpreter.plugin")])
    assert ("interpreter" in reg.names()) is loads
    reg.register_plugin(Plugin(), "toy")  # in-process registration still works
    assert "toy" in reg.names()


def test_root_cause_walks_the_chain() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'drv'")
        except ImportError as e:
            raise RuntimeError("driver missing") from e
    except RuntimeError as e:
        assert isinstance(root_cause(e), ModuleNotFoundError)
        assert describe_exception(e) == ("RuntimeError: driver missing "
                                         "(caused by ModuleNotFoundError: No module named 'drv')")


def test_process_registry_has_the_interpreter_from_its_entry_point() -> None:
    rec = registry().record("interpreter")
    assert rec is not None and rec.ok
    assert rec.distribution == "glow-backend-interpreter" and rec.plugin == "interpreter"
    assert rec.spec is not None and rec.spec.sdk_api_version == SDK_API_VERSION


# -- real installations: broken and incompatible plugin packages ------------------------
def _build_tools_missing() -> str:
    missing = [m for m in ("setuptools", "wheel") if importlib.util.find_spec(m) is None]
    return ", ".join(missing)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --target directory holding the fixture plugins glow-backend-broken and glow-backend-future."""
    missing = _build_tools_missing()
    if missing:
        pytest.fail(f"installing the fixture plugins needs {missing} in the test environment "
                    "(tox installs them; otherwise: pip install setuptools wheel)")
    base = tmp_path_factory.mktemp("plugins")
    target = base / "site"
    sources = []
    for name in ("broken_plugin", "incompatible_plugin"):
        src = base / name  # build from a copy: the build leaves build/ and *.egg-info behind
        shutil.copytree(FIXTURES / name, src)
        sources.append(str(src))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(target), *sources],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, f"pip install of the fixture plugins failed:\n{proc.stdout}\n{proc.stderr}"
    assert (target / "glow_backend_broken").is_dir()
    save(add_relu_model(), base / "addrelu.onnx")
    return target


def test_installed_broken_plugin_is_listed_with_its_root_cause(plugin_env: Path) -> None:
    r = glow(["backends"], pythonpath=[plugin_env], cwd=plugin_env.parent)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = {ln.split()[0]: ln.split() for ln in lines[1:] if ln and not ln.startswith(" ") and ":" not in ln}
    assert rows["interpreter"][1] == "ok"
    assert rows["broken"][1:5] == ["error", "-", "glow-backend-broken", "0.0.1"]
    assert rows["future"][1:5] == ["incompatible", "-", "glow-backend-future", "9.0.0"]
    cause = lines[lines.index(next(ln for ln in lines if ln.startswith("broken "))) + 1]
    assert cause.strip().startswith("cause: failed to import glow_backend_broken.plugin")
    assert "RuntimeError: the XYZ accelerator driver is not installed" in cause
    assert "ModuleNotFoundError: No module named 'glow_fixture_missing_device_driver'" in cause
    future = lines[lines.index(next(ln for ln in lines if ln.startswith("future "))) + 1]
    assert "SDK API version 99" in future and f"supports {supported_text()}" in future and "upgrade glow" in future
    assert "Traceback" not in r.stdout + r.stderr


def test_installed_broken_plugin_full_traceback_with_verbose(plugin_env: Path) -> None:
    r = glow(["backends", "--verbose"], pythonpath=[plugin_env], cwd=plugin_env.parent)
    assert r.returncode == 0, r.stderr
    assert "| Traceback (most recent call last):" in r.stdout
    assert "glow_backend_broken/plugin.py" in r.stdout.replace("\\", "/")


def test_interpreter_still_runs_beside_a_broken_plugin(plugin_env: Path) -> None:
    r = glow(["run", "addrelu.onnx", "--backend", "interpreter"], pythonpath=[plugin_env], cwd=plugin_env.parent)
    assert r.returncode == 0, r.stderr
    assert "output out: float32[1,10]" in r.stdout
    # the skipped plugins are visible, one warning line each, never a traceback
    warnings = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert all(ln.startswith("glow: warning: ") for ln in warnings) and len(warnings) == 2
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("backend, text", [
    ("broken", "the XYZ accelerator driver is not installed"),
    ("future", "SDK API version 99"),
    ("nosuch", "choose one of: "),
])
def test_choosing_a_failed_or_unknown_backend_is_one_line(plugin_env: Path, backend: str, text: str) -> None:
    r = glow(["run", "addrelu.onnx", "--backend", backend], pythonpath=[plugin_env], cwd=plugin_env.parent)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    line = r.error_line()
    assert line.startswith("glow: error: ") and text in line
    if backend == "nosuch":
        choices = line.split("choose one of: ")[1]
        assert "interpreter" in choices.replace(",", " ").split()


def test_blocking_the_broken_plugin(plugin_env: Path) -> None:
    r = glow(["backends"], pythonpath=[plugin_env], cwd=plugin_env.parent, env={"GLOW_BLOCK_PLUGINS": "broken"})
    assert r.returncode == 0
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("broken "))
    assert row.split()[1] == "blocked"
    assert "XYZ accelerator" not in r.stdout
