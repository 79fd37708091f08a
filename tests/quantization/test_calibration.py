"""Calibration: exact parameters for hand-computed ranges, properties of every method and schema."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.quantization import (
    CalibrationError,
    QuantizationConfig,
    QuantizationConfigError,
    ValueRecord,
    calibrate,
    calibrated_range,
    channel_params,
    params_for_range,
)
from glow_core.quantization.calibration import entropy_threshold
from glow_core.quantization.weights import channel_ranges

SCHEMAS = ("asymmetric", "symmetric", "symmetric_uint8")
METHODS = ("minmax", "percentile", "entropy")


def f32(x: float) -> float:
    return float(np.float32(x))


@pytest.mark.parametrize(("lo", "hi", "schema", "precision", "scale", "offset", "dtype"), [
    # asymmetric int8: scale = (hi - lo) / 255, offset = round(-128 - lo / scale)
    (-1.0, 3.0, "asymmetric", "int8", f32(4 / 255), -64, "int8"),  # -128 + 63.75 = -64.25
    (0.0, 2.55, "asymmetric", "int8", f32(0.01), -128, "int8"),
    (-2.55, 0.0, "asymmetric", "int8", f32(0.01), 127, "int8"),
    (1.0, 2.0, "asymmetric", "int8", f32(2 / 255), -128, "int8"),  # 0 is added to the range
    (-1.0, 1.0, "asymmetric", "int16", f32(2 / 65535), 0, "int16"),  # -32768 + 32767.5 rounds half up
    # symmetric: scale = max|x| / qmax, offset 0
    (-1.0, 3.0, "symmetric", "int8", f32(3 / 127), 0, "int8"),
    (-6.35, 1.0, "symmetric", "int8", f32(0.05), 0, "int8"),
    (-1.0, 3.0, "symmetric", "int16", f32(3 / 32767), 0, "int16"),
    # symmetric_uint8: non-negative ranges use 0..255
    (0.0, 2.55, "symmetric_uint8", "int8", f32(0.01), 0, "uint8"),
    (-1.0, 2.54, "symmetric_uint8", "int8", f32(0.02), 0, "int8"),
    (0.0, 0.0, "asymmetric", "int8", 1.0, -128, "int8"),
    (0.0, 0.0, "symmetric", "int8", 1.0, 0, "int8"),
])
def test_hand_computed_parameters(lo: float, hi: float, schema: str, precision: str, scale: float, offset: int,
                                  dtype: str) -> None:
    p = params_for_range(lo, hi, QuantizationConfig(schema=schema, precision=precision))
    assert (p.scale, p.offset, p.dtype) == (scale, offset, dtype)


def _record(seed: int = 0, shift: float = 0.0, n: int = 20000) -> ValueRecord:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(n), rng.standard_normal(20) * 8]).astype(np.float32) + np.float32(shift)
    rec = ValueRecord()
    rec.add(x)
    return rec


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shift", [0.0, 3.0, -20.0])
def test_properties_of_every_method_and_schema(schema: str, method: str, shift: float) -> None:
    rec = _record(shift=shift)
    cfg = QuantizationConfig(schema=schema, calibration=method)
    lo, hi = calibrated_range(rec, cfg)
    assert rec.min <= lo <= hi <= rec.max  # within the observed range
    p = calibrate(rec, cfg)
    assert p.qmin <= p.offset <= p.qmax
    assert p.dequantize(np.array([p.offset]))[0] == 0.0  # zero exactly representable
    assert p.quantize(np.array([0.0]))[0] == p.offset
    if schema != "asymmetric":
        assert p.offset == 0
    r_lo, r_hi = p.range
    assert r_lo <= 0.0 <= r_hi
    # the chosen range is covered: its ends quantize within half a step
    assert abs(float(p.dequantize(p.quantize(np.array([r_hi])))[0]) - r_hi) <= p.scale * 0.5 + 1e-6 * abs(r_hi)
    assert abs(float(p.dequantize(p.quantize(np.array([r_lo])))[0]) - r_lo) <= p.scale * 0.5 + 1e-6 * abs(r_lo)


def test_outliers_are_clipped_by_percentile_and_entropy_but_not_minmax() -> None:
    rec = _record()
    mm = calibrated_range(rec, QuantizationConfig(schema="symmetric"))
    pc = calibrated_range(rec, QuantizationConfig(schema="symmetric", calibration="percentile", percentile=99.9))
    en = calibrated_range(rec, QuantizationConfig(schema="symmetric", calibration="entropy"))
    assert mm == (rec.min, rec.max)
    assert pc[1] < 0.5 * max(-rec.min, rec.max) and en[1] < 0.5 * max(-rec.min, rec.max)
    assert 3.0 < pc[1] < 4.5 and 2.0 < en[1] < 6.0  # N(0,1): the 99.9% point of |x| is 3.29


def test_percentile_is_monotone() -> None:
    rec = _record(seed=3)
    for schema in SCHEMAS:
        his = [calibrated_range(rec, QuantizationConfig(schema=schema, calibration="percentile", percentile=p))[1]
               for p in (90.0, 99.0, 99.9, 99.99, 100.0)]
        assert his == sorted(his), (schema, his)
        assert his[-1] == rec.max


def test_percentile_on_a_uniform_histogram() -> None:
    x = ((np.arange(100000) + 0.5) / 100).astype(np.float32)  # evenly spread over (0, 1000)
    rec = ValueRecord()
    rec.add(x)
    assert rec.histogram.width == 0.5
    lo, hi = calibrated_range(rec, QuantizationConfig(calibration="percentile", percentile=99.0))
    assert hi == pytest.approx(990.0, abs=0.5) and lo == pytest.approx(10.0, abs=0.5)  # within one bin


def test_entropy_keeps_everything_when_there_are_fewer_bins_than_levels() -> None:
    assert entropy_threshold(np.ones(100, np.int64), 128) == 100
    counts = np.zeros(2048, np.int64)
    counts[:300] = 1000
    counts[2000] = 1  # one far outlier
    assert 128 <= entropy_threshold(counts, 128) < 2000


def test_unobserved_values_cannot_be_calibrated() -> None:
    with pytest.raises(CalibrationError, match="no finite sample"):
        calibrate(ValueRecord(), QuantizationConfig(), "v0")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"schema": "asym"}, "unknown schema 'asym'"),
    ({"calibration": "kl"}, "unknown calibration 'kl'"),
    ({"precision": "int4"}, "unknown precision 'int4'"),
    ({"percentile": 40}, "percentile must be a number in"),
    ({"percentile": float("nan")}, "percentile must be a number in"),
    ({"schema": "symmetric_uint8", "precision": "int16"}, "needs precision int8"),
    ({"keep_float_kinds": ["Frobnicate"]}, "unknown node kind"),
    ({"keep_float_names": "abc"}, "collection of strings"),
    ({"per_channel": 1}, "per_channel must be True or False"),
])
def test_config_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(QuantizationConfigError, match=message):
        QuantizationConfig(**kwargs)


def test_config_keeps_float() -> None:
    cfg = QuantizationConfig(keep_float_kinds=["Softmax"], keep_float_names=["x"])
    assert cfg.keeps_float("Softmax", "y") and cfg.keeps_float("Add", "x") and not cfg.keeps_float("Add", "y")


def test_per_channel_weight_parameters() -> None:
    w = np.zeros((3, 2, 1, 1), np.float32)
    w[0] = [[[-1.0]], [[3.0]]]
    w[1] = [[[0.5]], [[2.5]]]
    w[2] = [[[-6.25]], [[0.0]]]
    mins, maxs = channel_ranges(w, 0)
    np.testing.assert_array_equal(mins, [-1.0, 0.5, -6.25])
    from glow_core.quantization.weights import ChannelRanges

    ranges = ChannelRanges("W", 0, mins, maxs, ("conv",))
    sym = channel_params(ranges, QuantizationConfig(schema="symmetric"))
    np.testing.assert_array_equal(sym.scales, np.float32([3 / 127, 2.5 / 127, 6.25 / 127]))
    np.testing.assert_array_equal(sym.offsets, [0, 0, 0])
    asym = channel_params(ranges, QuantizationConfig())
    assert [c.offset for c in asym.channels] == [-64, -128, 127]
    whole = channel_params(ranges, QuantizationConfig(schema="symmetric", per_channel=False))
    assert set(whole.scales.tolist()) == {f32(6.25 / 127)}


def test_calibrate_profile_keeps_float_by_kind_and_name() -> None:
    from glow_core.quantization import calibrate_profile

    recs = {n: _record(seed=i) for i, n in enumerate(("x", "sm", "h"))}
    kinds = {"x": "input", "sm": "Softmax", "h": "Relu"}
    cfg = QuantizationConfig(keep_float_kinds=["Softmax"], keep_float_names=["x"])
    assert set(calibrate_profile(recs, cfg, kinds)) == {"h"}
    assert set(calibrate_profile(recs, cfg)) == {"sm", "h"}  # without kinds only names apply


@pytest.mark.parametrize(("kind", "attrs", "w_shape", "axis"), [
    ("Gemm", {"trans_b": True}, (4, 3), 0),
    ("Gemm", {}, (3, 4), 1),
    ("MatMul", {}, (3, 4), 1),
])
def test_weight_channel_axes_of_linear_kinds(kind: str, attrs: dict, w_shape: tuple, axis: int) -> None:
    from glow_core.ir.graph import Function
    from glow_core.ir.types import ElemKind, TensorType
    from glow_core.quantization import weight_channel_ranges

    fn = Function()
    a = fn.add_input("a", TensorType(ElemKind.FLOAT32, (2, 3)))
    payload = np.random.default_rng(0).standard_normal(w_shape).astype(np.float32)
    w = fn.add_constant(payload, "w")
    fn.set_output("o", fn.create(kind, [a, w], attrs).result)
    (r,) = weight_channel_ranges(fn).values()
    assert r.axis == axis and len(r.mins) == 4
    np.testing.assert_array_equal(r.maxs, payload.max(axis=1 - axis))
    np.testing.assert_array_equal(r.mins, payload.min(axis=1 - axis))


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize(("what", "sample"), [
    ("log-mel around -70", lambda rng: rng.normal(-70.0, 5.0, 50000)),
    ("uniform in [60, 80]", lambda rng: rng.uniform(60.0, 80.0, 50000)),
    ("a layer output around 3", lambda rng: rng.normal(3.0, 1.0, 50000)),
])
def test_entropy_keeps_a_distribution_far_from_zero(schema: str, what: str, sample: object) -> None:
    """KL alone prefers clipping all of a distribution far from zero into one spike (KL 0); the entropy range
    must keep all but at most MAX_CLIPPED of the values inside, as MinMax keeps them all."""
    from glow_core.quantization.calibration import MAX_CLIPPED

    x = np.asarray(sample(np.random.default_rng(4)), np.float32)  # type: ignore[operator]
    rec = ValueRecord()
    rec.add(x)
    lo, hi = calibrated_range(rec, QuantizationConfig(schema=schema, calibration="entropy"))
    p = params_for_range(lo, hi, QuantizationConfig(schema=schema))
    outside = np.mean((x < p.range[0] - p.scale) | (x > p.range[1] + p.scale))
    assert outside <= MAX_CLIPPED, (what, lo, hi)
    err = np.abs(p.dequantize(p.quantize(x)) - x)
    assert float(np.mean(err)) <= p.scale  # (about a quarter of a step, unless most values clip)


def test_entropy_on_offset_inputs_quantizes_as_well_as_minmax() -> None:
    """End to end: a conv net fed log-mel-like features (around -70): entropy's int8 answer is within 0.01
    cosine of MinMax's (it was 0.715 against 0.996 on an audio embedding network before the clipping bound)."""
    import glow_core
    from tests.quantization.models import conv_image_model

    model = conv_image_model(channels=3, size=8)
    rng = np.random.default_rng(5)
    name = model.graph.input[0].name
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    data = [{name: rng.normal(-70.0, 5.0, shape).astype(np.float32)} for _ in range(8)]
    prof = glow_core.profile(model, data, backend="interpreter")
    x = {name: rng.normal(-70.0, 5.0, shape).astype(np.float32)}
    ref = glow_core.compile(model, "interpreter").run(x)
    cos = {}
    for method in ("minmax", "entropy"):
        cfg = QuantizationConfig(calibration=method, profile=prof)
        out = glow_core.compile(model, "interpreter", quantize=cfg).run(x)
        a, b = np.concatenate([v.ravel() for v in out.values()]), np.concatenate([v.ravel() for v in ref.values()])
        cos[method] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert cos["entropy"] >= cos["minmax"] - 0.01, cos
