"""Profiling: instrumented runs on interpreter and cpu, checked against onnxruntime; fingerprints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import glow_core
from glow_core import zoo
from glow_core.pipeline import prepare_function
from glow_core.errors import InputError
from glow_core.importer import import_model
from glow_core.plugin_host import get_backend
from glow_core.quantization import (
    Profile,
    ProfileMismatchError,
    QuantizationConfig,
    calibrate_profile,
    channel_params,
    load_profile,
    weight_channel_ranges,
)
from tests.quantization.models import conv_image_model, mlp_softmax_model, two_input_model

BACKENDS = ["interpreter", "cpu"]


def _ort_outputs(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every graph output of every sample by onnxruntime, stacked."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    runs = [sess.run(names, s) for s in samples]
    return {n: np.stack([r[i] for r in runs]) for i, n in enumerate(names)}


def _prepared(model: object, backend: str, shapes: dict | None = None) -> object:
    return prepare_function(import_model(zoo.resolve_model(model) if isinstance(model, str) else model, shapes),
                            get_backend(backend), quantizable=True)


def _check_against_ort(prof: Profile, model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> None:
    want = _ort_outputs(model, samples)
    inputs = {n: np.stack([s[n] for s in samples]) for n in samples[0]}
    checked = 0
    for name, info in prof.infos.items():
        rec = prof.records[name]
        ref = inputs[name] if info.kind == "input" else want.get(info.output)
        if ref is None:
            assert rec.count == len(samples) * int(np.prod(info.shape))
            continue
        tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
        assert rec.min <= ref.min() + tol and rec.max >= ref.max() - tol, name  # contains every observed value
        assert abs(rec.min - ref.min()) <= tol and abs(rec.max - ref.max()) <= tol, name  # and no more
        assert rec.count == ref.size == rec.histogram.total()
        checked += 1
    assert checked == len(want) + len(inputs)


@pytest.mark.parametrize("backend", [*BACKENDS, "interpreter-primitives"])
def test_small_model_ranges_contain_every_observed_value(backend: str) -> None:
    model = mlp_softmax_model()
    rng = np.random.default_rng(5)
    samples = [{"x": rng.standard_normal((2, 8)).astype(np.float32) * 2} for _ in range(4)]
    prof = glow_core.profile(model, samples, backend=backend)
    assert prof.samples == 4 and prof.backend == backend
    _check_against_ort(prof, model, samples)
    # LayerNormalization is lowered except on the interpreter: its pieces are profiled under its ONNX origin
    lowered = not any(i.kind == "LayerNormalization" for i in prof.infos.values())
    assert lowered == (backend != "interpreter")
    pieces = [n for n, i in prof.infos.items() if i.origin == "ln0"]
    assert all(n.startswith("ln0.") for n in pieces) and len(pieces) > (5 if lowered else 2)
    if lowered:
        assert {prof.infos[n].step for n in pieces} >= {"sub", "sqrt"}
    assert {n for n in prof.infos} == {n for n, (_, _) in _values(_prepared(model, backend))}


def _values(fn: object) -> list:
    from glow_core.quantization import profiled_values

    return list(profiled_values(fn).items())


@pytest.mark.parametrize("backend", BACKENDS)
def test_squeezenet_profile(backend: str, tmp_path: Path) -> None:
    model = onnx.load(str(zoo.resolve("zoo:squeezenet")))
    rng = np.random.default_rng(11)
    samples = [{"data_0": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(2)]
    prof = glow_core.profile("zoo:squeezenet", samples, backend=backend)
    _check_against_ort(prof, model, samples)
    assert len(prof.records) > 20
    path = tmp_path / "sq.json"
    prof.save(path)
    back = load_profile(path, _prepared("zoo:squeezenet", backend), backend)
    assert back.fingerprint == prof.fingerprint and set(back.records) == set(prof.records)
    params = calibrate_profile(back.records, QuantizationConfig(calibration="entropy", schema="symmetric"))
    assert all(p.offset == 0 and p.scale > 0 for p in params.values())


def test_a_profile_made_on_one_backend_applies_to_another(tmp_path: Path) -> None:
    """The graphs differ (cpu lowers the LayerNormalization the interpreter runs whole); the values that cross
    from one ONNX node to the next match by portable key (origin names), the cpu's LayerNorm internals cannot."""
    model = mlp_softmax_model()
    samples = {"x": np.random.default_rng(1).standard_normal((3, 2, 8)).astype(np.float32)}
    a = glow_core.profile(model, samples, backend="interpreter")
    b = glow_core.profile(model, samples, backend="cpu")
    assert a.fingerprint != b.fingerprint
    path = tmp_path / "p.json"
    a.save(path)
    with pytest.warns(glow_core.errors.GlowWarning, match="no range for 10 value\\(s\\).*ln0.reducesum"):
        on_cpu = load_profile(path, _prepared(model, "cpu"), "cpu")
    assert on_cpu.backend == "cpu" and set(on_cpu.records) == {"x", "mm0.fusedmatmul", "mm1", "ln0.mul_2", "sm0"}
    for name, rec in on_cpu.records.items():
        assert (rec.min, rec.max) == pytest.approx((b.records[name].min, b.records[name].max), rel=1e-5), name


def test_a_value_that_cannot_be_matched_stays_float_with_a_warning(tmp_path: Path) -> None:
    model = mlp_softmax_model()
    prof = glow_core.profile(model, {"x": np.ones((1, 2, 8), np.float32)}, backend="interpreter")
    fn = _prepared(model, "cpu")
    doc = prof.to_json()
    for v in doc["values"].values():
        if v["kind"] != "input":
            v["key"] = "renamed>" + v["key"]  # as if another lowering had made other values
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.warns(glow_core.errors.GlowWarning, match="has no range for .* value\\(s\\) of the graph 'cpu' "
                                                          "lowers.*stay float"):
        matched = load_profile(path, fn, "cpu")
    assert set(matched.records) == {"x"}
    other = glow_core.profile(two_input_model(), {"a": np.ones((1, 1, 4), np.float32),
                                                  "b": np.ones((1, 1, 4), np.float32)}, backend="interpreter")
    other.save(path)
    with pytest.raises(ProfileMismatchError, match="does not describe this graph for 'cpu': inputs not in the "
                                                   "profile: x"):
        load_profile(path, fn, "cpu")


def test_digits_profiled_on_interpreter_quantizes_on_cpu_as_well_as_a_cpu_profile(tmp_path: Path) -> None:
    """Issue 31: the same accuracy on the held-out digits from an interpreter-made and a cpu-made profile."""
    evaluation = zoo.evaluation("zoo:digits")
    x, y = evaluation.load()
    accuracy = {}
    for made_on in ("interpreter", "cpu"):
        path = tmp_path / f"{made_on}.json"
        glow_core.profile("zoo:digits", {"image": x[:100]}, backend=made_on).save(path)
        net = glow_core.compile("zoo:digits", "cpu", quantize=QuantizationConfig(profile=path))
        assert net.stats.quantized.count >= 3  # the convolution, the pooling and the classifier run in int8
        accuracy[made_on] = zoo.accuracy(evaluation.outputs(net, x), y)
    assert accuracy["interpreter"] == accuracy["cpu"] >= 0.95, accuracy


def test_fingerprint_mismatch_names_what_differs(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    model = mlp_softmax_model(batch=2)
    glow_core.profile(model, {"x": np.ones((1, 2, 8), np.float32)}, backend="interpreter").save(path)
    with pytest.raises(ProfileMismatchError, match=r"different shapes: x \[2, 8\] vs \[3, 8\]"):
        load_profile(path, _prepared(mlp_softmax_model(batch=3), "interpreter"))
    with pytest.raises(ProfileMismatchError, match="values missing from the profile: a, b.*not in this graph: x"):
        load_profile(path, _prepared(two_input_model(), "interpreter"))
    net = glow_core.compile(model, "interpreter")
    assert load_profile(path, net).samples == 1  # a CompiledNetwork of the same model and backend matches


def test_profile_json_format(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    glow_core.profile(two_input_model(), {"a": np.ones((2, 1, 4), np.float32), "b": -np.ones((2, 1, 4), np.float32)}
                      ).save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "glow-quantization-profile" and doc["version"] == 1 and doc["samples"] == 2
    out = doc["values"]["mul0"]
    assert out["output"] == "out" and out["origin"] == "mul0" and out["kind"] == "Mul" and out["shape"] == [1, 4]
    t = float(np.tanh(np.float32(1.0)))
    assert out["min"] == pytest.approx(-t) and out["max"] == pytest.approx(-t) and out["count"] == 8
    assert sum(out["histogram"]["counts"]) == 8
    doc["version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="format version 99"):
        load_profile(path, _prepared(two_input_model(), "interpreter"))


def test_bad_samples_are_named() -> None:
    model = two_input_model()
    with pytest.raises(InputError, match="sample 1: no array for input.*'b'"):
        glow_core.profile(model, [{"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)},
                                  {"a": np.ones((1, 4), np.float32)}])
    with pytest.raises(InputError, match="sample 0: input 'a' has dtype float64"):
        glow_core.profile(model, [{"a": np.ones((1, 4)), "b": np.ones((1, 4), np.float32)}])
    with pytest.raises(InputError, match="no samples"):
        glow_core.profile(model, [])


def test_weight_channel_ranges_of_a_conv() -> None:
    fn = _prepared(conv_image_model(), "interpreter")
    ranges = weight_channel_ranges(fn)
    (_name, r), = ranges.items()
    k = onnx.numpy_helper.to_array(conv_image_model().graph.initializer[0])
    np.testing.assert_array_equal(r.mins, k.reshape(2, -1).min(axis=1))
    np.testing.assert_array_equal(r.maxs, k.reshape(2, -1).max(axis=1))
    assert r.axis == 0 and len(channel_params(r, QuantizationConfig()).channels) == 2


def test_progress_bar_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    samples = {"a": np.ones((3, 1, 4), np.float32), "b": np.ones((3, 1, 4), np.float32)}
    glow_core.profile(two_input_model(), samples)
    assert capsys.readouterr().err == ""  # stderr is not a terminal in tests
    glow_core.profile(two_input_model(), samples, progress=True)
    err = capsys.readouterr().err
    assert "profiling" in err and "3/3" in err


def test_malformed_profiles_are_clear_errors(tmp_path: Path) -> None:
    from glow_core.errors import GlowError

    fn = _prepared(two_input_model(), "interpreter")
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(GlowError, match="is not JSON"):
        load_profile(path, fn)
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(GlowError, match="is not a Glow quantization profile"):
        load_profile(path, fn)
    with pytest.raises(InputError, match="cannot read profile"):
        load_profile(tmp_path / "missing.json", fn)
    glow_core.profile(two_input_model(), {"a": np.ones((1, 1, 4), np.float32), "b": np.ones((1, 1, 4), np.float32)}
                      ).save(path)
    doc = json.loads(path.read_text())
    doc["values"]["a"]["histogram"]["log2_width"] = 100000
    path.write_text(json.dumps(doc))
    with pytest.raises(GlowError, match="value 'a': histogram grid 2\\*\\*100000"):
        load_profile(path, fn)
    doc["values"]["a"]["histogram"] = {"counts": "x"}
    path.write_text(json.dumps(doc))
    with pytest.raises(GlowError, match="value 'a': malformed"):
        load_profile(path, fn)
