"""docs/dynamic-shapes.md, run: its ``$ glow`` samples are compared with the page (tests/docs/mdblocks.py's
wildcards) and its Python blocks are executed, in a folder holding the files they name: ``bert.onnx``
(``bert_like(layers=1, hidden=16, heads=2, ffn=32, vocab=50)``), ``ocr.onnx`` and ``ids.npy`` /
``mask.npy`` (a batch of 1 sequence of 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.docs.mdblocks import DOCS, ROOT, Sample, code_blocks, matches, samples
from tests.dynamic.models import bert_feeds, bert_like, ocr_like

DOC = DOCS / "dynamic-shapes.md"
SAMPLES = samples(DOC)
PYTHON_BLOCKS = [(first, lines) for first, lines, _ in code_blocks(DOC)
                 if lines and any(line.startswith(("import ", "net = ")) for line in lines)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("dynamic-doc")
    onnx.save(bert_like(layers=1, hidden=16, heads=2, ffn=32, vocab=50), str(d / "bert.onnx"))
    onnx.save(ocr_like(), str(d / "ocr.onnx"))
    for name, a in bert_feeds(1, 8, vocab=50).items():
        np.save(d / f"{name}.npy", a)
    return d


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GLOW_TRACEBACK", "PYTHONPATH")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_the_page_has_samples_and_python() -> None:
    assert {s.args[0] for s in SAMPLES} >= {"run", "dump", "compile"} and PYTHON_BLOCKS


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_sample_output_matches_the_page(sample: Sample, workdir: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "glow_cli", *sample.args], cwd=workdir, env=_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    assert matches(sample.expected, proc.stdout), (
        f"docs/dynamic-shapes.md line {sample.line}: '{sample.command}' printed\n{proc.stdout}")
    is_error = any(line.startswith("glow: error: ") for line in sample.expected)
    assert (proc.returncode != 0) == is_error and "Traceback" not in proc.stdout


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"line {first}" for first, _ in PYTHON_BLOCKS])
def test_python_block_runs(block: tuple[int, list[str]], workdir: Path) -> None:
    first, lines = block
    proc = subprocess.run([sys.executable, "-c", "\n".join(lines)], cwd=workdir, env=_env(), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"docs/dynamic-shapes.md line {first}:\n{proc.stderr}"
