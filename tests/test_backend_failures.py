"""One place wraps backend failures (glow_core/pipeline/guard.py): a backend that raises a plain
``RuntimeError`` makes every command end in one line naming the backend, a non-zero exit code and no
traceback -- ``glow compile``, ``glow profile``, ``glow compare --quantize``, ``glow bundle`` and a run
through the runtime's host manager (``glow run --devices``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from glow_backend_interpreter.backend import InterpreterBackend

from glow_cli.main import main
from glow_core import plugin_host
from glow_core.ir.graph import Function
from glow_sdk import BackendSpec, CompiledFunction, CompileOptions, hookimpl
from glow_sdk.backend import BundleOptions
from glow_sdk.version import SDK_API_VERSION
from tests.cliutil import add_relu_model

#: what the faulty backend breaks: "compile", "run", "bundle" or nothing
FAULT: dict[str, str] = {"where": ""}


class _FailingExe(CompiledFunction):
    def __init__(self, inner: CompiledFunction) -> None:
        super().__init__(inner.function)
        self.inner = inner

    def execute(self, feeds: Any) -> dict[str, np.ndarray]:
        if FAULT["where"] == "run":
            raise RuntimeError("kaboom while running")
        return self.inner.execute(feeds)


class FaultyBackend(InterpreterBackend):
    """The interpreter with a switchable plain-Python bug."""

    name = "faulty"

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        if FAULT["where"] == "compile":
            raise RuntimeError("kaboom while compiling")
        return _FailingExe(super().compile(function, options))

    def save_bundle(self, function: Function, options: CompileOptions, bundle: BundleOptions,
                    out_dir: Path) -> list[Path]:
        raise RuntimeError("kaboom while writing a bundle")


class _Plugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [BackendSpec(name="faulty", factory=FaultyBackend, sdk_api_version=SDK_API_VERSION)]


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[Path]:
    plugin_host.reset_registry()
    plugin_host.registry().register_plugin(_Plugin(), "faulty-plugin")
    model = tmp_path / "m.onnx"
    onnx.save(add_relu_model(), model)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((4, 1, 10), dtype=np.float32),
             y=rng.standard_normal((4, 1, 10), dtype=np.float32))
    FAULT["where"] = ""
    try:
        yield model
    finally:
        FAULT["where"] = ""
        plugin_host.reset_registry()


def _fails_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("glow: error: "), err
    for w in ("backend 'faulty'", *words):
        assert w in lines[0], err
    return lines[0]


def test_compile(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FAULT["where"] = "compile"
    _fails_in_one_line(["compile", str(faulty), "--backend", "faulty"], capsys, "RuntimeError: kaboom while compiling")


def test_profile(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FAULT["where"] = "compile"
    _fails_in_one_line(["profile", str(faulty), "--backend", "faulty", "--data", str(faulty.parent / "data.npz"),
                        "-o", str(faulty.parent / "p.json")], capsys, "kaboom while compiling")


def test_compare_quantize(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, prof = str(faulty.parent / "data.npz"), str(faulty.parent / "p.json")
    assert main(["profile", str(faulty), "--backend", "faulty", "--data", data, "-o", prof]) == 0
    FAULT["where"] = "compile"
    _fails_in_one_line(["compare", str(faulty), "--backend", "faulty", "--quantize", prof, "--data", data], capsys,
                       "kaboom while compiling")


def test_bundle(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_in_one_line(["bundle", str(faulty), "--backend", "faulty", "-o", str(faulty.parent / "b")], capsys,
                       "failed to write the bundle", "kaboom while writing a bundle")


def test_host_manager_run(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FAULT["where"] = "run"
    _fails_in_one_line(["run", str(faulty), "--devices", "faulty:1"], capsys, "kaboom while running")


def test_host_manager_compile(faulty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FAULT["where"] = "compile"
    _fails_in_one_line(["run", str(faulty), "--devices", "faulty:1"], capsys, "kaboom while compiling")
