"""Float arithmetic is not reassociated across nodes (issue 32): every ONNX node's result has its element
type, so ``(x + c1) - c2`` rounds after the Add; onnx.reference decides."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness
BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]
ROUND = 1.5 * 2.0 ** 23  # the round-to-nearest idiom's constant

#: (first op, its constant, second op, its constant, x, the reference's answer)
CHAINS = [
    ("Add", 1e8, "Sub", 1e8, 0.3, 0.0),
    ("Mul", 1e20, "Mul", 1e-20, 2e19, np.inf),
    ("Add", ROUND, "Sub", ROUND, 0.3, 0.0),
]


def _chain(op1: str, c1: float, op2: str, c2: float) -> object:
    nodes = [helper.make_node(op1, ["x", "c1"], ["t"]), helper.make_node(op2, ["t", "c2"], ["y"])]
    inits = [numpy_helper.from_array(np.array(c1, np.float32), "c1"),
             numpy_helper.from_array(np.array(c2, np.float32), "c2")]
    return model(nodes, [("x", F, [2])], [("y", F, [2])], inits, opset=17)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op1,c1,op2,c2,x,want", CHAINS)
def test_constant_chains_round_after_each_node(backend: str, op1: str, c1: float, op2: str, c2: float,
                                               x: float, want: float) -> None:
    if backend == "cpu":
        pytest.importorskip("glow_backend_cpu")
    m = _chain(op1, c1, op2, c2)
    feeds = {"x": np.array([x, 1.0], np.float32)}
    ref = ReferenceEvaluator(m).run(None, feeds)[0]
    assert ref[0] == want
    got = glow_core.compile(m, backend=backend).run(feeds)["y"]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_fast_math_is_the_opt_in_that_reassociates(backend: str) -> None:
    """With options={"fast_math": True} the chain merges (one node, and x comes back), as docs/passes.md says."""
    if backend == "cpu":
        pytest.importorskip("glow_backend_cpu")
    m = _chain("Add", 1e8, "Sub", 1e8)
    feeds = {"x": np.array([0.3, 1.0], np.float32)}
    exact = glow_core.compile(m, backend=backend)
    fast = glow_core.compile(m, backend=backend, options={"fast_math": True})
    assert exact.stats.nodes_by_kind != fast.stats.nodes_by_kind
    np.testing.assert_array_equal(exact.run(feeds)["y"], np.array([0.0, 0.0], np.float32))
    np.testing.assert_allclose(fast.run(feeds)["y"], feeds["x"], rtol=0, atol=1e-6)
