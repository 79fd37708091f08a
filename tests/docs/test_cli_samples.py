"""The sample sessions of docs/cli.md, run and compared with what the page shows.

Every ``$ glow ARGS`` line of a code block is run (as ``python -m glow_cli``)
in a scratch folder holding the files the samples name, and its output (stdout
and stderr interleaved, as a terminal shows them) must match the lines shown
after it, with the wildcards of :mod:`tests.docs.mdblocks` (``...``). A sample
whose shown output has a ``glow...: error:`` line must exit non-zero; any other
sample must exit 0.

Files in the scratch folder: ``add_relu.onnx`` and ``model.onnx`` (``out =
Relu(x + y)``, x and y float32[1,10]), ``broken.onnx`` (that model truncated),
``custom.onnx`` (two ``com.example::Frobnicate`` nodes, frob1 and frob2),
``x.npy`` (float32[1,10]) and ``y.npy`` (float64[1,10]).

Environments a block can ask for with ``<!-- sample-env: NAME -->`` just before it:

- ``fixture-plugins``: the broken and incompatible plugin packages of
  ``tests/fixtures`` pip-installed into a folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cliutil import add_relu_model, save, unsupported_op_model
from tests.docs.mdblocks import DOCS, ROOT, Sample, matches, output_pattern, samples

SAMPLES = samples(DOCS / "cli.md")
KNOWN_ENVS = {"fixture-plugins"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli-samples")
    save(add_relu_model(), d / "add_relu.onnx")
    save(add_relu_model(), d / "model.onnx")
    data = (d / "model.onnx").read_bytes()
    (d / "broken.onnx").write_bytes(data[: len(data) // 2])
    save(unsupported_op_model(), d / "custom.onnx")
    np.save(d / "x.npy", np.ones((1, 10), np.float32))
    np.save(d / "y.npy", np.ones((1, 10), np.float64))
    return d


@pytest.fixture(scope="module")
def fixture_plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --target folder holding glow-backend-broken and glow-backend-future (as tests/test_plugins.py does)."""
    base = tmp_path_factory.mktemp("sample-plugins")
    sources = []
    for name in ("broken_plugin", "incompatible_plugin"):
        shutil.copytree(ROOT / "tests" / "fixtures" / name, base / name)
        sources.append(str(base / name))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--target", str(base / "site"), *sources],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, f"pip install of the fixture plugins failed (needs setuptools, wheel):\n{proc.stderr}"
    return base / "site"


def _run(sample: Sample, cwd: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    for key in ("GLOW_TRACEBACK", "GLOW_BLOCK_PLUGINS", "GLOW_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH"):
        env.pop(key, None)
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleaved in the order they are written
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    return subprocess.run([sys.executable, "-m", "glow_cli", *sample.args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)


def test_cli_md_has_samples() -> None:
    assert len(SAMPLES) >= 8
    assert {s.args[0] for s in SAMPLES} >= {"backends", "run", "dump", "compile"}
    for s in SAMPLES:
        assert s.expected, f"{s.id}: a '$ glow' sample must show its output"
        assert set(s.env) <= KNOWN_ENVS, f"{s.id}: unknown sample-env {s.env}"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_sample_output_matches_the_doc(sample: Sample, workdir: Path, request: pytest.FixtureRequest) -> None:
    pythonpath = [request.getfixturevalue("fixture_plugins")] if "fixture-plugins" in sample.env else []
    proc = _run(sample, workdir, pythonpath)
    shown = "\n".join(sample.expected)
    assert matches(sample.expected, proc.stdout), (
        f"docs/cli.md line {sample.line}: the output of '{sample.command}' differs from the page.\n"
        f"--- shown (... matches anything)\n{shown}\n--- actual (exit {proc.returncode})\n{proc.stdout}")
    is_error = any(": error: " in line and line.startswith("glow") for line in sample.expected)
    assert (proc.returncode != 0) == is_error, f"{sample.command}: exit {proc.returncode}\n{proc.stdout}"
    assert "Traceback" not in proc.stdout


# -- the matcher itself --------------------------------------------------------------------
def test_wildcards_match_what_they_should_and_nothing_else() -> None:
    shown = ["model  zoo:x (...)", "...", "run      ... ms"]
    assert matches(shown, "model zoo:x (/a/b.onnx)\nrun 1.5 ms\n")
    assert matches(shown, "model   zoo:x (/a/b.onnx)\nline one\nline two\nrun   2 ms\n")
    assert not matches(shown, "model zoo:y (/a/b.onnx)\nrun 1.5 ms\n")  # literal text must be equal
    assert not matches(shown, "model zoo:x (/a/b.onnx)\nrun 1.5 s\n")
    assert not matches(shown, "model zoo:x (/a/b.onnx)\nrun 1.5 ms\nextra line\n")  # no trailing extras
    assert not matches(["a b"], "ab\n")  # a space in the doc needs a space in the output
    assert not matches(["x"], "")
    assert matches([], "")
    assert output_pattern(["a.b"]).fullmatch("axb\n") is None  # '.' is literal
