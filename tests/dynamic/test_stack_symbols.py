"""The rest of the stack takes symbolic dims (issue 28): control flow, the runtime's devices and int8 quantization
compile a model with open symbols to a DynamicNetwork that specializes per input shape through that route
(docs/dynamic-shapes.md, "The rest of the stack")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.errors import ImportShapeError, InputError
from glow_core.importer.weights import split_weights
from glow_core.pipeline.specialize import CacheLimits, DynamicNetwork, buffers_of
from glow_core.quantization.profile import Profile, read_profile
from tests.cliutil import glow

DEVICES = "cpu:1,interpreter:1"


def if_model() -> onnx.ModelProto:
    """``x[batch,seq] -> ReduceSum -> Greater 0 -> If(then Relu(x), else Neg(x))``: run-time control flow."""
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("t", "e")]
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [out[0]])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [out[1]])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "if_sym", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])],
                              [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def matmul_model() -> onnx.ModelProto:
    """``x[batch,seq,8] -> MatMul(const 8x4) -> Relu``."""
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "mm_sym", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def if_model_with_weights(n: int = 80) -> onnx.ModelProto:
    """``x[batch,n] @ W -> If(sum > 0: @ V, else Neg) -> @ V``, with W and V large enough to be stripped
    (``split_weights``) and V read in a branch and after the If (programs compiled at run time)."""
    rng = np.random.default_rng(0)
    w, v = ((rng.standard_normal((n, n)) * 0.1).astype(np.float32) for _ in range(2))
    out = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("t", "e")]
    then = helper.make_graph([helper.make_node("MatMul", ["m", "V"], ["t"])], "then", [], [out[0]])
    other = helper.make_graph([helper.make_node("Neg", ["m"], ["e"])], "else", [], [out[1]])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("ReduceSum", ["m"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y0"], then_branch=then, else_branch=other),
             helper.make_node("MatMul", ["y0", "V"], ["y"])]
    graph = helper.make_graph(nodes, "if_weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n])],
                              [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                               numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(shape: tuple[int, ...], seed: int = 0, sign: float = 1.0) -> np.ndarray:
    return (sign * np.random.default_rng(seed).uniform(-1, 1, shape) + 0.25 * sign).astype(np.float32)


def test_control_flow_compiles_once_and_specializes_per_shape() -> None:
    model = if_model()
    net = glow_core.compile(model, backend="cpu")  # refused with ImportShapeError before
    assert isinstance(net, DynamicNetwork) and net.specializations_compiled == 0
    ref = ReferenceEvaluator(model)
    for shape in ((2, 3), (1, 5)):
        for sign in (1.0, -1.0):  # both branches at each shape
            x = _x(shape, sign=sign)
            got = net.run({"x": x})["y"]
            np.testing.assert_array_equal(got, ref.run(None, {"x": x})[0])
            assert got.shape == shape
    assert net.specializations_compiled == 2  # one staged compile per shape, both branches inside it
    net.run({"x": _x((2, 3), seed=5)})
    assert net.specializations_compiled == 2  # a seen shape compiles nothing
    fixed = glow_core.compile(model, backend="cpu", dims={"batch": 2, "seq": 3})
    assert not isinstance(fixed, DynamicNetwork) and fixed.input_types["x"].shape == (2, 3)
    with pytest.raises(InputError, match="dimension 'seq'"):
        glow_core.compile(model, backend="cpu", dims={"seq": (1, 4)}).run({"x": _x((1, 5))})


def test_control_flow_stages_read_the_shared_weights() -> None:
    model = if_model_with_weights()
    assert set(split_weights(model)[1]) == {"W", "V"}  # (the model's copy is stripped of both)
    net = glow_core.compile(model, backend="cpu")
    ref = ReferenceEvaluator(model)
    w = numpy_helper.to_array(model.graph.initializer[1])
    for batch in (1, 3):
        for sign in (1.0, -1.0):
            x = (sign * np.abs(_x((batch, 80))) @ np.linalg.pinv(w)).astype(np.float32)  # (the sum's sign)
            np.testing.assert_allclose(net.run({"x": x})["y"], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert net.specializations_compiled == 2
    first, second = ({k for k, size in buffers_of(s).items() if size >= 80 * 80 * 4} for s in net.specializations)
    assert first and first == second  # W: one array for both shapes


def test_devices_partition_per_shape() -> None:
    model = matmul_model()
    net = glow_core.compile(model, devices=DEVICES)
    assert isinstance(net, DynamicNetwork)
    ref = ReferenceEvaluator(model)
    for shape in ((1, 3, 8), (1, 6, 8), (3, 6, 8)):
        x = _x(shape)
        np.testing.assert_allclose(net.run({"x": x})["y"], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert net.specializations_compiled == 2  # batch 3 ran as three samples on the (1, 6, 8) network
    assert all(s.executable.plan.partitions for s in net.specializations)  # partitioned networks, one per shape
    with pytest.raises(ImportShapeError, match="'plan' belongs to one compiled shape"):
        net.plan  # noqa: B018  (each shape has its own)
    fixed = glow_core.compile(model, devices=DEVICES, dims={"batch": 1, "seq": 4})
    assert fixed.plan.function.inputs[0].type.shape == (1, 4, 8)


def _profile_samples() -> list[dict[str, np.ndarray]]:
    return [{"x": _x((1, seq, 8), seed=i)} for i, seq in enumerate((16, 32, 16, 32))]


def test_a_profile_over_two_shapes_quantizes_a_third(tmp_path: Path) -> None:
    model = matmul_model()
    prof = glow_core.profile(model, _profile_samples(), backend="cpu")
    assert prof.symbolic and prof.samples == 4
    one_shape = glow_core.profile(model, _profile_samples()[:1], backend="cpu", dims={"batch": 1, "seq": 16})
    assert not one_shape.symbolic
    assert list(prof.records) == list(one_shape.records)  # one record per value, not one per shape
    assert prof.records["x"].count == (16 + 32 + 16 + 32) * 8
    assert prof.infos["x"].shape == (1, -1, 8)
    prof.save(tmp_path / "p.json")
    assert read_profile(tmp_path / "p.json").symbolic
    net = glow_core.compile(model, "cpu", quantize=str(tmp_path / "p.json"))
    assert isinstance(net, DynamicNetwork)
    flt = glow_core.compile(model, "cpu", dims={"batch": 1})
    for seq in (24, 5):
        x = _x((1, seq, 8), seed=7)
        q, f = net.run({"x": x})["y"], flt.run({"x": x})["y"]
        assert q.shape == f.shape == (1, seq, 4)
        assert 0 < np.abs(q - f).max() < 0.03 * np.abs(f).max()  # int8 (not float), within its step
    assert net.specializations_compiled == 2
    kinds = net.specializations[-1].function.count_by_kind()
    assert "FusedIntConv" in kinds or any(k.startswith("Q") for k in kinds), kinds


def test_a_static_profile_quantizes_a_symbolic_model_at_every_shape() -> None:
    model = matmul_model()
    fixed = glow_core.profile(model, _profile_samples()[:1], backend="cpu", dims={"batch": 1, "seq": 16})
    net = glow_core.compile(model, "cpu", quantize=fixed)
    out = net.run({"x": _x((1, 9, 8))})["y"]
    assert out.shape == (1, 9, 4)
    shape_free = fixed.shape_free()
    assert isinstance(shape_free, Profile) and shape_free.infos["x"].shape == (-1, -1, -1)


def test_the_specializations_are_bounded_and_a_seen_shape_does_not_compile_again() -> None:
    net = glow_core.compile(if_model(), backend="cpu", specializations=CacheLimits(count=2))
    for seq in (2, 3, 4):
        net.run({"x": _x((1, seq))})
    assert net.specializations_compiled == 3 and len(net.specializations) == 2 and net.cache.evicted == 1
    net.run({"x": _x((1, 4), seed=3)})
    assert net.specializations_compiled == 3
    net.run({"x": _x((1, 2))})  # evicted: compiled again
    assert net.specializations_compiled == 4
    dev = glow_core.compile(matmul_model(), devices=DEVICES, specializations=CacheLimits(count=1))
    first = dev.specialization({"x": _x((1, 2, 8))})
    dev.run({"x": _x((1, 3, 8))})
    assert dev.specializations_compiled == 2 and dev.specializations[0] is not first
    assert not first.executable.host.networks  # the evicted network's devices were released (closed)


def test_cli_profiles_and_runs_symbolic_models(tmp_path: Path) -> None:
    onnx.save(matmul_model(), str(tmp_path / "mm.onnx"))
    (tmp_path / "samples").mkdir()
    for i, seq in enumerate((16, 32)):
        np.save(tmp_path / "samples" / f"s{i}.npy", _x((1, seq, 8), seed=i))
    np.save(tmp_path / "x.npy", _x((1, 5, 8), seed=9))
    r = glow(["profile", "mm.onnx", "--data", "samples", "-b", "cpu", "-o", "p.json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "over 2 samples" in r.stdout and "symbolic dims" in r.stdout
    r = glow(["run", "mm.onnx", "-b", "cpu", "--quantize", "p.json", "--input", "x=x.npy"], cwd=tmp_path)
    assert r.returncode == 0 and "output y: float32[1,5,4]" in r.stdout, r.stderr
    r = glow(["run", "mm.onnx", "--devices", DEVICES, "--dim", "batch=1", "--dim", "seq=3"], cwd=tmp_path)
    assert r.returncode == 0 and "input x: float32[1,3,8]" in r.stdout, r.stderr
    r = glow(["partition", "mm.onnx", "--devices", DEVICES], cwd=tmp_path)
    assert r.returncode == 1
    assert "x float32[batch,seq,8]" in r.stderr and "--dim SYMBOL=N" in r.stderr and "one shape" in r.stderr
    r = glow(["partition", "mm.onnx", "--devices", DEVICES, "--dim", "batch=1", "--dim", "seq=4"], cwd=tmp_path)
    assert r.returncode == 0 and "p0: backend cpu" in r.stdout, r.stderr
    r = glow(["bench", "mm.onnx", "-b", "cpu", "--quantize", "p.json"], cwd=tmp_path)
    assert r.returncode == 1 and "x float32[batch,seq,8]" in r.stderr and "--dim SYMBOL=N" in r.stderr


def test_a_sample_outside_a_bound_is_refused_with_its_name() -> None:
    samples = [{"x": _x((1, 4, 8))}, {"x": _x((1, 9, 8))}]
    with pytest.raises(InputError, match=r"sample sample 1: .*above the maximum 8"):
        glow_core.profile(matmul_model(), samples, backend="cpu", dims={"seq": (1, 8)})
    with pytest.raises(InputError, match=r"has shape \[1, 4, 7\], the model expects float32\[batch,seq,8\]"):
        glow_core.profile(matmul_model(), [{"x": _x((1, 4, 7))}], backend="cpu")
    with pytest.raises(ImportShapeError, match="which no input of the model uses"):
        glow_core.compile(matmul_model(), devices=DEVICES, dims={"sequence": 3})
