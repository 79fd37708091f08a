"""ai.onnx.preview.training optimizer updates (Adagrad, Momentum, Adam) against onnx.reference; errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_core.api import compile as glow_compile
from glow_core.errors import ModelError

DOMAIN = "ai.onnx.preview.training"
RNG = np.random.default_rng(5)
STATES = {"Adagrad": 3, "Momentum": 3, "Adam": 4}


def _model(op: str, n: int, **attrs) -> onnx.ModelProto:
    per = STATES[op]
    names = [f"s{j}_{i}" for j in range(per) for i in range(n)]
    ins = [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
           helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    ins += [helper.make_tensor_value_info(nm, TensorProto.FLOAT, [3, 2]) for nm in names]
    outs = [f"o{j}_{i}" for j in range(per - 1) for i in range(n)]
    node = helper.make_node(op, ["R", "T"] + names, outs, domain=DOMAIN, **attrs)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, TensorProto.FLOAT, [3, 2]) for o in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("op,attrs", [
    ("Adagrad", dict(decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01)),
    ("Momentum", dict(alpha=0.9, beta=0.5, mode="standard", norm_coefficient=0.02)),
    ("Momentum", dict(alpha=0.8, beta=0.7, mode="nesterov", norm_coefficient=0.0)),
    ("Adam", dict(alpha=0.8, beta=0.95, epsilon=1e-7, norm_coefficient=0.01, norm_coefficient_post=0.02)),
])
@pytest.mark.parametrize("step", [0, 3])
def test_update_matches_onnx_reference(backend: str, op: str, attrs, step: int) -> None:
    m = _model(op, 2, **attrs)
    feeds = [np.array(0.05, np.float32), np.array(step, np.int64)]
    feeds += [np.abs(RNG.standard_normal((3, 2))).astype(np.float32) for _ in range(STATES[op] * 2)]
    want = ReferenceEvaluator(m).run(None, dict(zip([i.name for i in m.graph.input], feeds)))
    got = onnx_backend.prepare(m, backend=backend).run(feeds)
    for w, g in zip(want, got):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_states_must_come_in_whole_groups() -> None:
    m = _model("Adagrad", 1, epsilon=1e-6)
    m.graph.node[0].input.append("R")  # one tensor too many for groups of 3
    with pytest.raises(ModelError, match="do not form groups of 3"):
        glow_compile(m, "interpreter")
