"""``zoo:digits``: the trained digit classifier shipped with glow, its held-out split and ``glow run``'s accuracy.

glow (interpreter and cpu backends, through the API and through ``glow run``) must predict
exactly what onnxruntime predicts for every held-out digit, and the accuracy must be at least
90% so a broken model or split fails. The last test reruns ``scripts/train_digits.py`` (it needs
scikit-learn, so it is skipped, with the reason, where that is not installed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import glow_core
from glow_core import zoo
from glow_core.errors import ModelError
from tests.cliutil import glow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_digits.py"
BACKENDS = ["interpreter", "cpu"]
HELD_OUT = 360


def _need_backend(name: str) -> None:
    from glow_core.plugin_host import registry

    if name not in registry().names():
        pytest.skip(f"the {name} backend is not installed")


def _onnxruntime_scores(model: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.stack([sess.run(None, {"image": x[i:i + 1]})[0] for i in range(len(x))])


@pytest.fixture(scope="module")
def held_out() -> tuple[np.ndarray, np.ndarray]:
    return zoo.TRAINED["digits"].evaluation.load()


@pytest.fixture(scope="module")
def ort_scores(held_out: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return _onnxruntime_scores(zoo.resolve("zoo:digits"), held_out[0])


def test_digits_is_shipped_with_its_held_out_split(held_out: tuple[np.ndarray, np.ndarray]) -> None:
    path = zoo.resolve("zoo:digits")
    assert path == zoo.DATA_DIR / "digits.onnx" and path.is_file() and path.stat().st_size < 64_000
    assert zoo.resolve("zoo:Digits") == path and zoo.resolve_model("zoo:digits") == path
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["image"]
    x, y = held_out
    assert x.shape == (HELD_OUT, 1, 8, 8) and x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    assert y.shape == (HELD_OUT,) and y.dtype == np.int64 and sorted(set(y.tolist())) == list(range(10))


def test_zoo_tables_keep_the_light_models() -> None:
    assert zoo.names() == sorted([*zoo.TRAINED, *zoo.MODELS]) and "digits" in zoo.names()
    assert zoo.resolve("zoo:resnet50").name == "light_resnet50.onnx"
    assert zoo.evaluation("zoo:digits") is zoo.TRAINED["digits"].evaluation
    assert zoo.evaluation("zoo:resnet50") is None and zoo.evaluation("digits.onnx") is None
    assert zoo.has_placeholder_weights("zoo:resnet50") and not zoo.has_placeholder_weights("zoo:digits")
    assert not zoo.has_placeholder_weights("model.onnx")
    with pytest.raises(ModelError, match="zoo:digits carries trained weights"):
        zoo.load_with_random_weights("zoo:digits")


def test_accuracy_metric() -> None:
    scores = np.array([[[0.1, 0.9]], [[0.8, 0.2]], [[0.5, 0.5]], [[0.3, 0.7]]], np.float32)  # [N,1,K]
    assert zoo.accuracy(scores, np.array([1, 1, 0, 1])) == 0.75  # the tie goes to the first class
    assert zoo.METRICS["accuracy"].fmt.format(0.975) == "97.5%"


@pytest.mark.parametrize("backend", BACKENDS)
def test_glow_predicts_what_onnxruntime_predicts(backend: str, held_out: tuple[np.ndarray, np.ndarray],
                                                 ort_scores: np.ndarray) -> None:
    _need_backend(backend)
    x, y = held_out
    net = glow_core.compile("zoo:digits", backend)
    evaluation = zoo.evaluation("zoo:digits")
    assert evaluation is not None
    scores = evaluation.outputs(net, x)
    assert scores.shape == ort_scores.shape == (HELD_OUT, 1, 10)
    np.testing.assert_array_equal(scores.argmax(axis=-1), ort_scores.argmax(axis=-1))
    np.testing.assert_allclose(scores, ort_scores, rtol=1e-4, atol=1e-6)
    glow_accuracy, ort_accuracy = zoo.accuracy(scores, y), zoo.accuracy(ort_scores, y)
    assert glow_accuracy == ort_accuracy >= 0.9


@pytest.mark.parametrize("backend", BACKENDS)
def test_glow_run_prints_the_held_out_accuracy(backend: str, held_out: tuple[np.ndarray, np.ndarray],
                                               ort_scores: np.ndarray, tmp_path: Path) -> None:
    _need_backend(backend)
    ort_accuracy = zoo.accuracy(ort_scores, held_out[1])
    assert ort_accuracy >= 0.9
    r = glow(["run", "zoo:digits", "--backend", backend], env={"GLOW_CACHE_DIR": str(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"accuracy on the {HELD_OUT} held-out digits: {ort_accuracy:.1%}" in r.stdout.splitlines(), r.stdout
    assert "output probabilities: float32[1,10]" in r.stdout and "top-5:" in r.stdout
    assert "placeholder" not in r.stderr and "no trained weights" not in r.stderr


def test_glow_run_refuses_random_weights_for_a_trained_model() -> None:
    r = glow(["run", "zoo:digits", "--backend", "interpreter", "--random-weights"])
    assert r.returncode == 1 and "zoo:digits carries trained weights" in r.error_line()


def test_a_broken_held_out_set_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "digits_test.npz").write_bytes(b"not an npz archive")
    monkeypatch.setattr(zoo, "DATA_DIR", tmp_path)
    with pytest.raises(ModelError, match="cannot read the held-out set"):
        zoo.TRAINED["digits"].evaluation.load()
    np.savez(tmp_path / "digits_test.npz", x=np.zeros((3, 1, 8, 8), np.float32), y=np.zeros(2, np.int64))
    with pytest.raises(ModelError, match="3 samples and 2 labels"):
        zoo.TRAINED["digits"].evaluation.load()
    with pytest.raises(ModelError, match="missing from this glow installation"):
        zoo.resolve("zoo:digits")


def test_training_script_reproduces_the_shipped_model(tmp_path: Path,
                                                      held_out: tuple[np.ndarray, np.ndarray],
                                                      ort_scores: np.ndarray) -> None:
    pytest.importorskip("sklearn", reason="scripts/train_digits.py needs scikit-learn (pip install '.[train]')")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "digits_test.npz") as data:
        np.testing.assert_array_equal(data["x"], held_out[0])  # the same held-out split
        np.testing.assert_array_equal(data["y"], held_out[1])
    retrained = _onnxruntime_scores(tmp_path / "digits.onnx", held_out[0])
    # the same seeds give the same weights up to the BLAS's rounding, hence the same predictions
    np.testing.assert_array_equal(retrained.argmax(axis=-1), ort_scores.argmax(axis=-1))
    accuracy = zoo.accuracy(retrained, held_out[1])
    assert accuracy >= 0.95
    assert f"accuracy on the {HELD_OUT} held-out digits: {accuracy:.1%}" in proc.stdout


def _training_module():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_digits", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_digits", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_training_gradients_match_finite_differences() -> None:
    """The script's hand-written backward pass (no scikit-learn needed: random images here)."""
    t = _training_module()
    rng = np.random.default_rng(5)
    x, y = rng.random((6, 1, 8, 8)), rng.integers(0, 10, 6)
    p = t.Params.init(rng)
    p = t.Params(p.w1, rng.standard_normal(p.b1.shape) * 0.1, p.w2, rng.standard_normal(p.b2.shape) * 0.1)

    def loss(q) -> float:  # type: ignore[no-untyped-def]
        probs = t.forward(q, x)[0]
        return float(-np.log(probs[np.arange(len(y)), y]).mean())

    probs, cache = t.forward(p, x)
    grads = t.backward(p, cache, probs, y)
    eps = 1e-6
    for field in ("w1", "b1", "w2", "b2"):
        value, grad = getattr(p, field), getattr(grads, field)
        for flat in rng.choice(value.size, size=min(8, value.size), replace=False):
            idx = np.unravel_index(flat, value.shape)
            plus, minus = value.copy(), value.copy()
            plus[idx] += eps
            minus[idx] -= eps
            up, down = t.Params(**{**vars(p), field: plus}), t.Params(**{**vars(p), field: minus})
            numeric = (loss(up) - loss(down)) / (2 * eps)
            assert abs(numeric - grad[idx]) <= 1e-6 + 1e-4 * abs(numeric), (field, idx, numeric, grad[idx])
