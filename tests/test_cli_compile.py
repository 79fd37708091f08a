"""``glow compile`` and the optimizer/LIR views of ``glow dump`` (--stats, --after, --before, --lir)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cliutil import glow, save


def conv_bn_relu_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "scale"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(conv_bn_relu_model(), tmp_path_factory.mktemp("cc") / "cbr.onnx")


def test_dump_stats_shows_batchnorm_folded_and_pass_times(model: Path) -> None:
    r = glow(["dump", str(model), "--stats"])
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.strip()}
    assert lines["BatchNormalization"][1:] == ["1", "0", "-1"]
    assert "fold-batchnorm" in lines and "ms" in r.stdout


def test_dump_after_a_pass_prints_the_graph_at_that_point(model: Path) -> None:
    r = glow(["dump", str(model), "--after", "fold-batchnorm", "--before", "fold-batchnorm"])
    assert r.returncode == 0, r.stderr
    before = r.stdout.index("// before fold-batchnorm")
    after = r.stdout.index("// after fold-batchnorm")
    assert before < after
    assert "BatchNormalization(" in r.stdout[before:after]
    assert "BatchNormalization(" not in r.stdout[after:].split("// ")[1]


def test_dump_after_unknown_pass_is_one_line(model: Path) -> None:
    r = glow(["dump", str(model), "--after", "no-such-pass"])
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "choose one of" in r.error_line() and "fold-batchnorm" in r.error_line()


def test_dump_lir_prints_instructions_and_offsets(model: Path) -> None:
    r = glow(["dump", str(model), "--lir"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("lir main") and "code:" in r.stdout
    # the fused convolution writes straight into the caller's output buffer
    assert "FusedConv @out %y, @in %x" in r.stdout


def test_compile_stats_prints_the_three_memory_figures(model: Path) -> None:
    r = glow(["compile", str(model), "--stats"])
    assert r.returncode == 0, r.stderr
    for word in ("arena:", "lower bound:", "naive:"):
        assert word in r.stdout
    arena = int(r.stdout.split("arena:")[1].split("bytes")[0].replace(",", ""))
    bound = int(r.stdout.split("lower bound:")[1].split("bytes")[0].replace(",", ""))
    assert bound <= arena <= 1.1 * bound
