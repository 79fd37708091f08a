"""DFT, STFT and MelWeightMatrix on interpreter (reference kernels), interpreter-primitives and cpu (lowered
onto MatMul), against onnx.reference; errors for bad operands."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from glow_core import onnx_backend
from glow_core.api import compile as glow_compile
from glow_core.errors import BudgetError, GlowTypeError, ModelError
from glow_core.lowering.rules.signal import dft_matrices
from glow_core.reference.kernels.signal import as_complex, transform

BACKENDS = ["interpreter", "interpreter-primitives", "cpu"]
RNG = np.random.default_rng(1)


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], out_shape: list[int], inits=(), opset: int = 20,
           out_elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in inputs.items()]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", out_elem, out_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str, atol: float = 1e-4) -> np.ndarray:
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = onnx_backend.prepare(model, backend=backend).run(list(feeds.values()))[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)
    return got


def _i64(name: str, v: int) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [], [v])


CASES = [  # (input shape, axis, dft_length, inverse, onesided)
    ((2, 8, 1), 1, None, 0, 0),
    ((2, 8, 2), 1, None, 1, 0),
    ((2, 7, 1), 1, None, 0, 1),       # odd length, one-sided
    ((2, 8, 2), 1, 12, 0, 0),         # zero padding
    ((2, 8, 2), 1, 5, 1, 0),          # truncation, inverse
    ((2, 5, 2), 1, 8, 1, 1),          # real inverse of a half spectrum
    ((2, 5, 2), 1, None, 1, 1),       # ... with the default length 2 * (n - 1)
    ((3, 4, 6, 2), 2, None, 0, 0),    # inner signal axis
    ((3, 4, 6, 1), -3, None, 0, 1),   # negative axis
    ((4, 3, 1), 0, None, 0, 0),       # the batch axis may be transformed too
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,axis,length,inverse,onesided", CASES)
def test_dft_matches_onnx_reference(backend: str, shape, axis, length, inverse, onesided) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    inits = [_i64("axis", axis)] + ([_i64("len", length)] if length is not None else [])
    node = helper.make_node("DFT", ["x", "len" if length is not None else "", "axis"], ["y"],
                            inverse=inverse, onesided=onesided)
    want = ReferenceEvaluator(_model(node, {"x": x}, [], inits)).run(None, {"x": x})[0]
    _check(_model(node, {"x": x}, list(want.shape), inits), {"x": x}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dft_opset17_axis_attribute_and_float64(backend: str) -> None:
    x = RNG.standard_normal((2, 6, 2))
    node = helper.make_node("DFT", ["x"], ["y"], axis=1)
    got = _check(_model(node, {"x": x}, [2, 6, 2], opset=17, out_elem=TensorProto.DOUBLE), {"x": x}, backend,
                 atol=1e-10)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1),
                               rtol=1e-10, atol=1e-10)


def test_dft_matrices_are_the_transform_of_impulses() -> None:
    z = RNG.standard_normal((3, 6)) + 1j * RNG.standard_normal((3, 6))
    for length, inverse, onesided in ((6, 0, 0), (9, 1, 0), (4, 0, 1), (10, 1, 1)):
        m_re, m_im = dft_matrices(6, length, bool(inverse), bool(onesided))
        via = z.real @ m_re + z.imag @ m_im
        np.testing.assert_allclose(via, transform(z, 1, length, bool(inverse), bool(onesided)), atol=1e-12)


def test_as_complex_keeps_single_precision() -> None:
    assert as_complex(np.zeros((2, 2), np.float32)).dtype == np.complex64
    assert as_complex(np.zeros((2, 1), np.float64)).dtype == np.complex128


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("window,step,length,onesided", [(None, 4, 8, 1), ("hann", 3, None, 1), (None, 5, 6, 0)])
def test_stft_matches_onnx_reference(backend: str, window, step, length, onesided) -> None:
    x = RNG.standard_normal((2, 40, 1)).astype(np.float32)
    feeds = {"x": x}
    inits = [_i64("step", step)] + ([_i64("fl", length)] if length is not None else [])
    if window == "hann":
        inits.append(helper.make_tensor("w", TensorProto.FLOAT, [10], np.hanning(10).astype(np.float32)))
    ins = ["x", "step", "w" if window else "", "fl" if length is not None else ""]
    node = helper.make_node("STFT", ins, ["y"], onesided=onesided)
    want = ReferenceEvaluator(_model(node, feeds, [], inits, opset=17)).run(None, feeds)[0]
    _check(_model(node, feeds, list(want.shape), inits, opset=17), feeds, backend)


@pytest.mark.parametrize("args", [(8, 64, 8000, 0.0, 4000.0), (20, 512, 16000, 100.0, 7000.0), (3, 31, 100, 1.0, 40.0)])
def test_mel_weight_matrix_matches_onnx_reference(args) -> None:
    bins, n, rate, lo, hi = args
    inits = [_i64("b", bins), _i64("n", n), _i64("r", rate),
             helper.make_tensor("lo", TensorProto.FLOAT, [], [lo]), helper.make_tensor("hi", TensorProto.FLOAT, [], [hi])]
    node = helper.make_node("MelWeightMatrix", ["b", "n", "r", "lo", "hi"], ["y"])
    m = _model(node, {}, [n // 2 + 1, bins], inits, opset=17)
    want = ReferenceEvaluator(m).run(None, {})[0]
    got = onnx_backend.prepare(m, backend="cpu").run([])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_dft_errors() -> None:
    x = np.zeros((2, 8, 2), np.float32)
    node = helper.make_node("DFT", ["x", "len", "axis"], ["y"])
    with pytest.raises(ModelError, match="dft_length 0 must be positive"):
        glow_compile(_model(node, {"x": x}, [2, 8, 2], [_i64("axis", 1), _i64("len", 0)]), "interpreter")
    with pytest.raises(ModelError, match="axis 2 must name a signal axis"):
        glow_compile(_model(node, {"x": x}, [2, 8, 2], [_i64("axis", 2), _i64("len", 8)]), "interpreter")
    with pytest.raises(BudgetError):
        glow_compile(_model(node, {"x": x}, [2, 8, 2], [_i64("axis", 1), _i64("len", 2**40)]), "interpreter")
    bad = np.zeros((2, 8, 3), np.float32)
    with pytest.raises((GlowTypeError, ModelError)):
        glow_compile(_model(node, {"x": bad}, [2, 8, 2], [_i64("axis", 1), _i64("len", 8)]), "interpreter")


def test_stft_errors() -> None:
    x = np.zeros((1, 16, 1), np.float32)
    node = helper.make_node("STFT", ["x", "step", "", "fl"], ["y"])
    with pytest.raises(ModelError, match="frame_step 0 must be positive"):
        glow_compile(_model(node, {"x": x}, [1, 1, 9, 2], [_i64("step", 0), _i64("fl", 16)], opset=17), "interpreter")
    with pytest.raises(ModelError, match="frame_length 17 must be in"):
        glow_compile(_model(node, {"x": x}, [1, 1, 9, 2], [_i64("step", 1), _i64("fl", 17)], opset=17), "interpreter")
