"""The vectorized float32 erf (``ew_math.erf_f32``) and the Erf-based GELU chain it makes one fast pass."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import glow_core

F = TensorProto.FLOAT


def _erf_model(n: int):  # type: ignore[no-untyped-def]
    g = helper.make_graph([helper.make_node("Erf", ["x"], ["y"])], "erf", [helper.make_tensor_value_info("x", F, [n])],
                          [helper.make_tensor_value_info("y", F, [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_erf_is_within_two_ulps_everywhere() -> None:
    # a dense sweep over both branches and their joins (|x| = 1, 4), the tails, tiny values, odd length (tail)
    x = np.concatenate([np.linspace(-6, 6, 120_001), np.geomspace(1e-38, 1e-3, 997), -np.geomspace(1e-30, 2, 501),
                        [0.0, -0.0, 1.0, -1.0, 4.0, -4.0, 3.9999998, 0.99999994]]).astype(np.float32)
    got = glow_core.compile(_erf_model(x.size), "cpu", options={"cache": False}).run({"x": x})["y"]
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-45)
    assert rel.max() < 3e-7, float(rel.max())
    assert np.array_equal(np.signbit(got[want == 0]), np.signbit(x[want == 0]))  # erf(-0) = -0


def test_erf_special_values() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30], np.float32)
    got = glow_core.compile(_erf_model(x.size), "cpu", options={"cache": False}).run({"x": x})["y"]
    assert np.isnan(got[0]) and list(got[1:]) == [1.0, -1.0, 1.0, -1.0]


def test_erf_gelu_chain_is_one_kernel_and_matches_the_interpreter() -> None:
    mk = helper.make_node
    consts = [numpy_helper.from_array(np.float32(math.sqrt(2)), "r2"), numpy_helper.from_array(np.float32(1), "one"),
              numpy_helper.from_array(np.float32(0.5), "half")]
    nodes = [mk("Div", ["x", "r2"], ["d"]), mk("Erf", ["d"], ["e"]), mk("Add", ["e", "one"], ["a"]),
             mk("Mul", ["x", "a"], ["m"]), mk("Mul", ["m", "half"], ["y"])]
    shape = [3, 37, 129]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("y", F, shape)], consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = {"x": (np.random.default_rng(0).standard_normal(shape) * 3).astype(np.float32)}
    net = glow_core.compile(m, "cpu", threads=2, options={"cache": False})
    assert net.executable.layout.kernels == 1
    want = glow_core.compile(m, "interpreter").run(x)["y"]
    np.testing.assert_allclose(net.run(x)["y"], want, rtol=1e-6, atol=1e-7)
