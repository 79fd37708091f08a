"""Whole-model tests: the 9 "light" models shipped inside the onnx package.

Each model is compiled for the interpreter with ``glow_core.compile`` and
compared with onnxruntime (2 intra-op threads) on the same seeded random input,
rtol 1e-3 and atol 1e-5.

The shipped models build every weight with ``ConstantOfShape`` (all 0.02), so
every output channel computes the same thing and the class scores are all
equal whatever the input: a comparison of those alone could not catch much.
Each model is therefore also run with seeded random weights (the
``ConstantOfShape`` weights replaced by initializers with fan-in scaled normal
values; biases, scales and batch-norm statistics in safe ranges) and with the
logits before the final Softmax exposed as a second output, and that run must
give finite outputs that are not all equal, the same top class as onnxruntime,
and agree elementwise.

These models list their initializers as graph inputs (IR version 3): only the
real inputs are fed, to both runtimes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import glow_core
from glow_core import zoo
from tests.tiers import sampled

pytestmark = pytest.mark.slow

LIGHT_DIR = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"
MODELS = (
    "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512",
)
#: the models the default tier runs with random weights (tests/tiers.py); the others run in the `full` tier
RANDOM_SAMPLE = ("bvlc_alexnet", "inception_v2", "resnet50", "shufflenet", "squeezenet")
RTOL = 1e-3
ATOL = 1e-5
SEED = 20240607
#: variance gain of the random conv / gemm weights (2: He, for ReLU nets without
#: batch norm; smaller where residual sums or fixed batch norms let activations grow)
GAINS = zoo.RANDOM_WEIGHT_GAINS


def model_path(name: str) -> Path:
    return LIGHT_DIR / f"light_{name}.onnx"


@functools.lru_cache(maxsize=2)
def load_shipped(name: str) -> onnx.ModelProto:
    return onnx.load(str(model_path(name)))


def random_feeds(model: onnx.ModelProto, seed: int = SEED) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [0, 1), integers in [0, 10) (glow_core.zoo)."""
    return zoo.model_feeds(model, seed)


def with_random_weights(model: onnx.ModelProto, gain: float, seed: int = SEED) -> onnx.ModelProto:
    """The model with seeded random weights and its logits exposed (glow_core.zoo)."""
    return zoo.with_random_weights(model, gain, seed, expose_logits=True)


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3  # IR v3 models: quiet about initializers listed as inputs
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def run_glow(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray],
             backend: str = "interpreter") -> tuple[list[np.ndarray], float]:
    net = glow_core.compile(model, backend)
    if backend == "interpreter-primitives":
        from glow_core.ir.kinds import Category

        left = sorted({n.kind.name for n in net.function.nodes if Category.PRIMITIVE not in n.kind.categories})
        assert not left, f"non-primitive kinds left for the primitives-only backend: {left}"
    t0 = time.perf_counter()
    out = net.run(feeds)
    seconds = time.perf_counter() - t0
    return [out[n] for n in net.output_names], seconds


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(max abs error, max relative error over elements with |want| > ATOL)."""
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    big = np.abs(want) > ATOL
    rel = float((diff[big] / np.abs(want[big].astype(np.float64))).max()) if big.any() else 0.0
    return float(diff.max()) if diff.size else 0.0, rel


def check_outputs(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> list[str]:
    assert len(got) == len(want), f"{name}: glow gave {len(got)} outputs, onnxruntime {len(want)}"
    report = []
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{name} output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        assert np.isfinite(g).all(), f"{name} output {i}: glow produced non-finite values"
        abs_err, rel_err = errors(g, w)
        report.append(f"output {i}: max abs error {abs_err:.3g}, max rel error {rel_err:.3g}")
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{name} output {i} differs from onnxruntime")
    return report


@pytest.mark.parametrize("name", MODELS)
def test_light_model_as_shipped(name: str) -> None:
    """The model file as shipped (all-0.02 weights) matches onnxruntime."""
    path = model_path(name)
    if not path.is_file():
        pytest.skip(f"{path} is not in the installed onnx package")
    model = load_shipped(name)
    feeds = random_feeds(model)
    assert len(feeds) == 1, f"{name}: expected one real input besides the initializers, got {list(feeds)}"
    got, _ = run_glow(path, feeds)
    want = run_onnxruntime(model, feeds)
    check_outputs(name, got, want)


@pytest.mark.parametrize("backend", ["interpreter", "interpreter-primitives"])
@pytest.mark.parametrize("name", sampled(MODELS, RANDOM_SAMPLE))
def test_light_model_random_weights(name: str, backend: str, record_property: Callable[[str, object], None]) -> None:
    """With random weights: finite, not all equal, same top class and values as onnxruntime.

    On ``interpreter-primitives`` every high-level kind is lowered onto the primitive set first
    (``run_glow`` asserts that only primitives are left).
    """
    path = model_path(name)
    if not path.is_file():
        pytest.skip(f"{path} is not in the installed onnx package")
    model = with_random_weights(load_shipped(name), GAINS.get(name, 2.0))
    feeds = random_feeds(model)
    got, seconds = run_glow(model, feeds, backend)
    want = run_onnxruntime(model, feeds)
    report = check_outputs(name, got, want)
    record_property("errors", "; ".join(report))
    record_property("glow_seconds", round(seconds, 3))
    probs = got[0]
    assert np.ptp(probs) > 0, f"{name}: every output element is {probs.ravel()[0]}: the test model is degenerate"
    assert int(np.argmax(probs)) == int(np.argmax(want[0])), f"{name}: top class differs from onnxruntime"

