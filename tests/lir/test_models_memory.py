"""The memory plan of four light models: arena <= 1.10 x the lower bound, outputs still match onnxruntime.

Random weights (as in tests/test_models.py) so that a wrong byte anywhere in
the arena changes the outputs; the logits are compared too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import glow_core
from tests.test_models import (
    ATOL,
    GAINS,
    RTOL,
    load_shipped,
    model_path,
    random_feeds,
    run_onnxruntime,
    with_random_weights,
)

pytestmark = pytest.mark.slow

MODELS = ("resnet50", "vgg19", "densenet121", "inception_v1")
MAX_RATIO = 1.10


@pytest.mark.parametrize("name", MODELS)
def test_arena_close_to_lower_bound_and_outputs_match(name: str, record_property: Callable[[str, object], None]) -> None:
    if not model_path(name).is_file():
        pytest.skip(f"{model_path(name)} is not in the installed onnx package")
    model = with_random_weights(load_shipped(name), GAINS.get(name, 2.0))
    feeds = random_feeds(model)
    net = glow_core.compile(model, "interpreter")
    report = net.executable.memory
    record_property("memory", f"arena {report.arena_bytes} lower {report.lower_bound_bytes} "
                              f"naive {report.naive_bytes} ratio {report.ratio:.4f} [{report.heuristic}]")
    assert report.lower_bound_bytes <= report.arena_bytes <= MAX_RATIO * report.lower_bound_bytes, report.format()
    assert report.arena_bytes < report.naive_bytes / 2, report.format()
    out = net.run(feeds)
    want = run_onnxruntime(model, feeds)
    for n, w in zip(net.output_names, want):
        np.testing.assert_allclose(out[n], w, rtol=RTOL, atol=ATOL, err_msg=f"{name} output {n}")
