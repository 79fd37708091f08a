"""The shell commands of docs/bundles.md, run as written (from a copy of the repository's example folder)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import glow_core
from tests.bundle.util import EXAMPLE, ROOT

DOC = ROOT / "docs" / "bundles.md"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs a C compiler and make")


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)


def test_doc_commands_run(tmp_path: Path) -> None:
    blocks = sh_blocks()
    assert len(blocks) == 2
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "bundle")
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    outputs = []
    for block in blocks:
        proc = subprocess.run(["bash", "-e", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{block}\n{proc.stderr}"
        outputs.append(proc.stdout)
    assert "output softmaxout_1: float32, 4000 bytes -> build/softmaxout_1.bin" in outputs[0]
    assert "latency: median" in outputs[0]
    assert outputs[1].strip().splitlines()[-1] == "aarch64"
    # the example's output equals load_bundle's on the same input
    x = np.fromfile(tmp_path / "build" / "data_0.bin", dtype=np.float32).reshape(1, 3, 224, 224)
    got = np.fromfile(tmp_path / "build" / "softmaxout_1.bin", dtype=np.float32).reshape(1, 1000, 1, 1)
    assert np.array_equal(glow_core.load_bundle(tmp_path / "build").run({"data_0": x})["softmaxout_1"], got)
