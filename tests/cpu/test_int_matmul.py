"""IntMatMul (MatMulInteger) with a constant 8-bit weight on the u8 x s8 kernel, the input zero point read at
run time, as onnxruntime's quantize_dynamic writes it (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul).

Results are int32 and must equal numpy's ``(A - a_zero) @ (B - b_zero)`` in int32, element for element."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.lircompiler import build_lir

ONNX = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _model(a_shape: tuple[int, ...], k: int, n: int, a_elem: str, w_elem: str, a_zero: str, w_zero: str,
           seed: int) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray | None]:
    """MatMulInteger(a, W[, az][, wz]); az an input ('input'), an initializer ('const') or absent ('none')."""
    rng = np.random.default_rng(seed)
    lo, hi = (-128, 128) if w_elem == "int8" else (0, 256)
    if w_zero == "column":  # W - zero must stay within int8 for the kernel
        lo, hi = -125, 126
    w = rng.integers(lo, hi, (k, n)).astype(w_elem)
    inits = [numpy_helper.from_array(w, "w")]
    if w_elem == "uint8":
        w = np.clip(w, 1, 255).astype(np.uint8)  # w - 128 stays within int8
        inits = [numpy_helper.from_array(w, "w")]
    inputs = [helper.make_tensor_value_info("a", ONNX[a_elem], list(a_shape))]
    names = ["a", "w"]
    az = None
    if a_zero == "input":
        inputs.append(helper.make_tensor_value_info("az", ONNX[a_elem], []))
        names.append("az")
    elif a_zero == "const":
        az = np.array(5 if a_elem == "uint8" else -3, a_elem)
        inits.append(numpy_helper.from_array(az, "az"))
        names.append("az")
    else:
        names.append("")
    if w_zero != "none":
        wz = np.array(128, np.uint8) if w_elem == "uint8" else (
            rng.integers(-2, 3, n).astype(np.int8) if w_zero == "column" else np.array(0, np.int8))
        inits.append(numpy_helper.from_array(wz, "wz"))
        names.append("wz")
    while names and names[-1] == "":
        names.pop()
    out = (*a_shape[:-1], n)
    g = helper.make_graph([helper.make_node("MatMulInteger", names, ["y"])], "mmi", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.INT32, list(out))], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, az


CASES = [
    # (A shape, K, N, A elem, W elem, A zero, W zero)
    ((1, 128, 384), 384, 384, "uint8", "int8", "input", "none"),
    ((3, 37), 37, 50, "uint8", "int8", "input", "tensor"),
    ((2, 5, 70), 70, 13, "int8", "int8", "input", "column"),
    ((1, 65), 65, 7, "uint8", "uint8", "const", "tensor"),
    ((130, 9), 9, 100, "int8", "int8", "none", "none"),
    ((1, 1, 1536), 1536, 64, "uint8", "int8", "input", "column"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-{c[1]}x{c[2]}-{c[3]}-{c[4]}-{c[5]}-{c[6]}")
def test_int_matmul_with_a_constant_weight_is_exact(case: tuple) -> None:
    a_shape, k, n, a_elem, w_elem, a_zero, w_zero = case
    model, _, _ = _model(a_shape, k, n, a_elem, w_elem, a_zero, w_zero, seed=k + n)
    net = glow_core.compile(model, "cpu", options={"cache": False})
    module_names = _kernel_names(net)
    assert any(name.startswith("glow_q8_ukernel_") for name in module_names), "not on the u8 x s8 kernel"
    rng = np.random.default_rng(1)
    info = np.iinfo(a_elem)
    ref = ReferenceEvaluator(model)
    for trial in range(2):
        feeds = {"a": rng.integers(info.min, int(info.max) + 1, a_shape).astype(a_elem)}
        if a_zero == "input":
            feeds["az"] = np.array(rng.integers(info.min, int(info.max) + 1), a_elem)
        y = net.run(feeds)["y"]
        np.testing.assert_array_equal(y, ref.run(None, feeds)[0])


def test_a_weight_outside_int8_after_its_zero_point_takes_the_exact_scalar_loop() -> None:
    model, _, _ = _model((3, 40), 40, 20, "uint8", "int8", "input", "column", seed=3)
    w = numpy_helper.to_array(model.graph.initializer[0]).copy()
    w[0, :] = -128  # a column zero point of 1 or 2 takes it below -128
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    net = glow_core.compile(model, "cpu", options={"cache": False})
    assert not any(name.startswith("glow_q8_ukernel_") for name in _kernel_names(net))
    feeds = {"a": np.random.default_rng(2).integers(0, 256, (3, 40)).astype(np.uint8), "az": np.array(200, np.uint8)}
    np.testing.assert_array_equal(net.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0])


def _kernel_names(net: glow_core.CompiledNetwork) -> list[str]:
    from glow_backend_cpu.codegen import generate
    from glow_backend_cpu.target import host_codegen

    module, _ = generate(host_codegen(), build_lir(net.function))
    return [g.name for g in module.globals.values()]


def test_a_quantize_dynamic_encoder_runs_on_the_int8_kernels_and_matches_the_reference() -> None:
    """A two-layer MLP quantized by onnxruntime's quantize_dynamic (int8 weights, uint8 activations with run-time
    scales): glow's output equals onnx.reference's to float rounding, and every product is an IntMatMul."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    import tempfile
    from pathlib import Path

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 256)) * 0.1).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((256, 64)) * 0.1).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 64])], inits)
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "f.onnx", Path(d) / "q.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        model = onnx.load(str(dst))
    assert "MatMulInteger" in [n.op_type for n in model.graph.node]
    net = glow_core.compile(model, "cpu", options={"cache": False})
    assert net.function.count_by_kind().get("IntMatMul") == 2
    x = {"x": rng.standard_normal((1, 16, 64)).astype(np.float32)}
    np.testing.assert_allclose(net.run(x)["y"], ReferenceEvaluator(model).run(None, x)[0], rtol=1e-5, atol=1e-5)
