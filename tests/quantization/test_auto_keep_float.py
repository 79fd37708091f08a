"""``auto_keep_float`` / ``--auto-keep-float``: values whose estimated int8 SQNR is too low stay float."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.quantization import (
    QuantizationConfig,
    QuantizationConfigError,
    ValueRecord,
    calibrate,
    profile,
)
from glow_core.quantization.calibration import estimated_sqnr
from tests.cliutil import glow, save


def measured_sqnr(x: np.ndarray, cfg: QuantizationConfig) -> tuple[float, float]:
    """(estimate from the record, SQNR of actually quantizing ``x``) in dB."""
    rec = ValueRecord()
    rec.add(x)
    p = calibrate(rec, cfg)
    err = p.dequantize(p.quantize(x)).astype(np.float64) - x
    return estimated_sqnr(rec, p), 10 * math.log10(float(np.sum(x.astype(np.float64) ** 2) / np.sum(err ** 2)))


@pytest.mark.parametrize("calibration", ["minmax", "percentile", "entropy"])
def test_estimate_matches_the_real_quantization_error(calibration: str) -> None:
    rng = np.random.default_rng(0)
    cfg = QuantizationConfig(calibration=calibration, percentile=99.9)
    gauss = rng.standard_normal(50_000).astype(np.float32)
    spiky = gauss.copy()
    spiky[:1] = 300.0  # one huge sample: minmax spends the levels on it, the clipping methods cut it
    for x in (gauss, spiky):
        est, real = measured_sqnr(x, cfg)
        assert abs(est - real) < 1.0, (calibration, est, real)
    assert measured_sqnr(spiky, QuantizationConfig())[0] < 20 < measured_sqnr(gauss, QuantizationConfig())[0]


def test_estimate_of_all_zeros_is_infinite() -> None:
    rec = ValueRecord()
    rec.add(np.zeros(10, np.float32))
    assert estimated_sqnr(rec, calibrate(rec, QuantizationConfig())) == math.inf


@pytest.mark.parametrize("bad", [-1.0, 101, math.nan, math.inf, True, "20"])
def test_config_validation(bad: object) -> None:
    with pytest.raises(QuantizationConfigError, match="auto_keep_float"):
        QuantizationConfig(auto_keep_float=bad)  # type: ignore[arg-type]


def test_config_json() -> None:
    assert QuantizationConfig(auto_keep_float=20).to_json()["auto_keep_float"] == 20
    assert "auto_keep_float" not in QuantizationConfig().to_json()


def two_branch_model() -> onnx.ModelProto:
    """``ya = a @ A``, ``yb = b @ B``: two independent linear layers on float32[1, 1024] inputs."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((1024, 8)).astype(np.float32), "A"),
             numpy_helper.from_array(rng.standard_normal((1024, 8)).astype(np.float32), "B")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "A"], ["ya"], name="mma"),
         helper.make_node("MatMul", ["b", "B"], ["yb"], name="mmb")], "two_branch",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1024]) for n in "ab"],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8]) for n in ("ya", "yb")], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def branch_samples(n: int, seed: int, spike: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, 1, 1024)).astype(np.float32)
    b = rng.standard_normal((n, 1, 1024)).astype(np.float32)
    if spike:
        b[0, 0, 3] = 300.0  # one rare outlier of b: per-tensor int8 of b loses the rest (about 12 dB)
    return {"a": a, "b": b}


@pytest.fixture(scope="module")
def branch_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("akf") / "p.json"
    profile(two_branch_model(), branch_samples(100, 0, spike=True), "interpreter").save(path)
    return path


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_low_sqnr_layer_stays_float(branch_profile: Path, tmp_path: Path, backend: str) -> None:
    if backend == "cpu":  # the profile names the values of the graph its backend runs
        branch_profile = tmp_path / "cpu.json"
        profile(two_branch_model(), branch_samples(100, 0, spike=True), "cpu").save(branch_profile)
    plain = glow_core.compile(two_branch_model(), backend, quantize=QuantizationConfig(profile=branch_profile))
    auto = glow_core.compile(two_branch_model(), backend,
                             quantize=QuantizationConfig(profile=branch_profile, auto_keep_float=20))
    assert sorted(n for v in plain.stats.quantized.quantized.values() for n in v) == ["mma", "mmb"]
    assert [n for v in auto.stats.quantized.quantized.values() for n in v] == ["mma"]
    why = auto.stats.quantized.kept_float["mmb"]
    assert why.startswith("--auto-keep-float: 'b' would have an int8 SQNR of ") and "dB < 20" in why
    assert list(auto.stats.quantized.auto_kept_float) == ["mmb"] and not plain.stats.quantized.auto_kept_float
    ref = glow_core.compile(two_branch_model(), backend)
    ev = branch_samples(1, 5, spike=False)
    feeds = {k: v[0] for k, v in ev.items()}
    want, got_plain, got_auto = ref.run(feeds), plain.run(feeds), auto.run(feeds)
    np.testing.assert_array_equal(got_auto["yb"], want["yb"])  # float, as without quantization
    np.testing.assert_array_equal(got_auto["ya"], got_plain["ya"])  # the same int8 layer
    err_plain = np.abs(got_plain["yb"] - want["yb"]).max()
    assert err_plain > 0.1  # what the plain flow loses on the spiky branch


def test_threshold_zero_keeps_nothing_float(branch_profile: Path) -> None:
    net = glow_core.compile(two_branch_model(), "interpreter",
                            quantize=QuantizationConfig(profile=branch_profile, auto_keep_float=0))
    assert net.stats.quantized.count == 2


def test_cli_flag(tmp_path: Path, branch_profile: Path) -> None:
    model = save(two_branch_model(), tmp_path / "m.onnx")
    r = glow(["compile", str(model), "--quantize", str(branch_profile), "--auto-keep-float", "20", "--stats"])
    assert r.returncode == 0, r.stderr
    assert "quantized to int8: MatMul x1; kept float: 1 node(s)" in r.stdout
    r = glow(["compile", str(model), "--quantize", str(branch_profile), "--stats"])
    assert r.returncode == 0 and "MatMul x2; kept float: 0 node(s)" in r.stdout, r.stdout + r.stderr
    data = tmp_path / "eval.npz"
    np.savez(data, **branch_samples(3, 7, spike=False))
    r = glow(["compare", str(model), "--quantize", str(branch_profile), "--data", str(data), "--auto-keep-float", "20"])
    assert r.returncode == 0, r.stderr
    assert "float    1 node(s) by --auto-keep-float: mmb\n" in r.stdout
    assert "output yb:" in r.stdout and "cosine 1.00000" in r.stdout.split("output yb:")[1].splitlines()[0]
    r = glow(["compile", str(model), "--auto-keep-float", "20"])
    assert r.returncode != 0 and "--auto-keep-float need(s) --quantize" in r.stderr
    r = glow(["compile", str(model), "--quantize", str(branch_profile), "--auto-keep-float", "-3"])
    assert r.returncode == 1 and "auto_keep_float must be None or an SQNR in dB" in r.stderr
