"""``--dim`` on the command line (glow_cli/common.py): parsing, and reaching every input that names the dim."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
import pytest

from glow_cli.common import DimArg, dim_spec, shapes_from_args
from glow_core.errors import ImportShapeError
from glow_core.importer.symbols import DimBound
from tests.cliutil import glow
from tests.dynamic.models import conv_net, ocr_like


def test_dim_specs_parse_sizes_and_bounds() -> None:
    assert dim_spec("sequence=128") == DimArg("sequence", 128)
    assert dim_spec("sequence=1:512") == DimArg("sequence", DimBound(1, 512))
    assert dim_spec("batch=2:") == DimArg("batch", DimBound(2, None))
    for bad in ("sequence", "=3", "s=x", "s=-1", "s=5:2", "s="):
        with pytest.raises(argparse.ArgumentTypeError):
            dim_spec(bad)
    shapes = shapes_from_args([("x", (1, 2)), DimArg("batch", 1), DimArg("batch", 1)])
    assert dict(shapes) == {"x": (1, 2)} and shapes.dims == {"batch": 1}
    assert shapes_from_args([DimArg("batch", 1)])  # dims alone are an argument
    with pytest.raises(ImportShapeError, match="--dim gives two values for 'batch'"):
        shapes_from_args([DimArg("batch", 1), DimArg("batch", 2)])


def test_dim_applies_to_the_model_and_dump_prints_anonymous_dims(tmp_path: Path) -> None:
    onnx.save(conv_net(), str(tmp_path / "conv.onnx"))
    onnx.save(ocr_like(), str(tmp_path / "ocr.onnx"))
    r = glow(["run", "conv.onnx", "-b", "interpreter", "--dim", "batch=3", "-o", "out.npz"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input x: float32[3,3,16,16]" in r.stdout and np.load(tmp_path / "out.npz")["y"].shape == (3, 10)
    r = glow(["dump", "ocr.onnx"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "function main(%x: float32[?,3,?,?]) -> (y: float32[?,10])" in r.stdout
    r = glow(["compile", "conv.onnx", "-b", "interpreter", "--dim", "batch=2", "--stats"], cwd=tmp_path)
    assert r.returncode == 0 and "nodes after optimization" in r.stdout, r.stderr
    r = glow(["compile", "conv.onnx", "-b", "interpreter", "--stats"], cwd=tmp_path)
    assert r.returncode == 1 and "symbolic dimensions (x: float32[batch,3,16,16])" in r.stderr
