"""The 9 light models on the cpu backend against onnxruntime (random inputs; shipped and random weights).

Same models, inputs and bounds as tests/test_models.py (the interpreter's model tests): rtol 1e-3,
atol 1e-5, the same top class with random weights. Each model also runs with one thread, which must
give the same answer as with two.
"""

from __future__ import annotations

import numpy as np
import pytest

import glow_core
from tests.test_models import (
    GAINS,
    MODELS,
    check_outputs,
    load_shipped,
    model_path,
    random_feeds,
    run_onnxruntime,
    with_random_weights,
)
from tests.tiers import sampled

pytestmark = pytest.mark.slow
#: the models of the default tier (tests/tiers.py); the others run in the `full` tier
AS_SHIPPED_SAMPLE = ("bvlc_alexnet", "inception_v2", "resnet50", "shufflenet", "squeezenet")
RANDOM_SAMPLE = ("inception_v2", "resnet50", "shufflenet", "squeezenet")


def _run(model, feeds, threads: int = 2):  # type: ignore[no-untyped-def]
    net = glow_core.compile(model, "cpu", threads=threads)
    out = net.run(feeds)
    return [out[n] for n in net.output_names], net


@pytest.mark.parametrize("name", sampled(MODELS, AS_SHIPPED_SAMPLE))
def test_light_model_as_shipped_on_cpu(name: str) -> None:
    path = model_path(name)
    if not path.is_file():
        pytest.skip(f"{path} is not in the installed onnx package")
    model = load_shipped(name)
    feeds = random_feeds(model)
    got, _ = _run(path, feeds)
    check_outputs(name, got, run_onnxruntime(model, feeds))


@pytest.mark.parametrize("name", sampled(MODELS, RANDOM_SAMPLE))
def test_light_model_random_weights_on_cpu(name: str) -> None:
    path = model_path(name)
    if not path.is_file():
        pytest.skip(f"{path} is not in the installed onnx package")
    model = with_random_weights(load_shipped(name), GAINS.get(name, 2.0))
    feeds = random_feeds(model)
    got, net = _run(model, feeds)
    want = run_onnxruntime(model, feeds)
    check_outputs(name, got, want)
    assert np.ptp(got[0]) > 0
    assert int(np.argmax(got[0])) == int(np.argmax(want[0])), f"{name}: top class differs from onnxruntime"
    net.executable.set_threads(1)
    one = net.run(feeds)
    for n, g in zip(net.output_names, got):
        np.testing.assert_allclose(one[n], g, rtol=1e-5, atol=1e-6, err_msg=f"{name}: 1 thread vs 2 threads")
