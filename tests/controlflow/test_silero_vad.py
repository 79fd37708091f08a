"""Silero VAD itself (25 nested If nodes) against onnxruntime, when its wheel is in the benchmark cache.

The wheel comes from the package index (``python scripts/check_silero_vad.py`` or
``scripts/bench_trained_models.py`` fetch it into ``~/.cache/glow-bench``, or ``GLOW_BENCH_CACHE``);
CI may have no index, so this test is skipped without it. tests/controlflow/test_control_flow.py
builds the same control-flow patterns itself and always runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GLOW_BENCH_CACHE", Path.home() / ".cache" / "glow-bench"))


def _wheel() -> Path | None:
    found = sorted((CACHE / "wheels").glob("silero_vad-6.2.3-*.whl"))
    return found[0] if found else None


@pytest.mark.slow
@pytest.mark.skipif(_wheel() is None, reason=f"the silero-vad 6.2.3 wheel is not in {CACHE}/wheels")
def test_silero_vad_streams_like_onnxruntime() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import check_silero_vad

    assert check_silero_vad.main(["--cache", str(CACHE), "--chunks", "5", "--backends", "interpreter,cpu"]) == 0
