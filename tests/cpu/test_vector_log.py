"""The element-wise float32 Log on the vectorized ``ew_math.log_f32`` (no libm call per lane)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import glow_core

F = TensorProto.FLOAT


def _log(x: np.ndarray) -> np.ndarray:
    g = helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "log",
                          [helper.make_tensor_value_info("x", F, [x.size])],
                          [helper.make_tensor_value_info("y", F, [x.size])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return glow_core.compile(m, "cpu", options={"cache": False}).run({"x": x})["y"]


def test_log_is_within_two_ulps_from_denormals_to_the_float_limit() -> None:
    x = np.concatenate([np.geomspace(1e-45, 3.4e38, 200_001), np.linspace(0.5, 2.0, 50_001),
                        [0.70710677, 0.7071068, 1.1754942e-38, 1.1754944e-38, 1.0, 2.0]]).astype(np.float32)
    got = _log(x)
    want = np.log(x.astype(np.float64)).astype(np.float32)
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert int(ulps.max()) <= 2, float(x[ulps.argmax()])


def test_log_special_values() -> None:
    got = _log(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-45], np.float32))
    assert list(got[:3]) == [-np.inf, -np.inf, np.inf]
    assert np.isnan(got[3:]).all()
