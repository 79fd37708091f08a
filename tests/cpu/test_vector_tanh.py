"""The element-wise float32 Tanh on the vectorized ``ew_math.tanh_f32`` (no libm call per lane)."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

import glow_core

F = TensorProto.FLOAT


def _tanh_model(n: int):  # type: ignore[no-untyped-def]
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"])], "tanh",
                          [helper.make_tensor_value_info("x", F, [n])], [helper.make_tensor_value_info("y", F, [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def test_tanh_is_within_two_ulps_everywhere() -> None:
    # both branches and their join (|x| = 0.625), saturation, denormals, an odd length (the vector tail)
    x = np.concatenate([np.linspace(-12, 12, 100_001), np.geomspace(1e-45, 1e-3, 499), -np.geomspace(1e-38, 3, 301),
                        [0.625, -0.625, 0.62499994, 9.0, -9.0, 40.0]]).astype(np.float32)
    got = glow_core.compile(_tanh_model(x.size), "cpu", options={"cache": False}).run({"x": x})["y"]
    want = np.array([math.tanh(v) for v in x.astype(np.float64)]).astype(np.float32)
    assert int(_ulps(got, want).max()) <= 2


def test_tanh_special_values_and_signed_zero() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0], np.float32)
    got = glow_core.compile(_tanh_model(x.size), "cpu", options={"cache": False}).run({"x": x})["y"]
    assert np.isnan(got[0]) and list(got[1:5]) == [1.0, -1.0, 1.0, -1.0]
    assert got[5] == 0 and got[6] == 0 and not np.signbit(got[5]) and np.signbit(got[6])  # tanh(-0) = -0
