"""Profile-guided conversion to typed int8, the quantization passes, lowering, compile(quantize=...) and the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.pipeline import prepare_function
from glow_core.errors import InputError
from glow_core.importer import import_model
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.plugin_host import get_backend
from glow_core.quantization import ProfileMismatchError, QuantizationConfig, profile
from glow_core.quantization.apply import quantize_prepared
from glow_core.quantization.qlower import lower_quantized
from glow_core.quantization.qpasses import optimize_quantized
from glow_core.zoo import resolve_model
from tests.cliutil import glow, save
from tests.quantization.models import mlp_softmax_model

E = ElemKind
DIGITS = np.load(Path(glow_core.__file__).parent / "zoo_data" / "digits_test.npz")["x"]


def many_kinds_model() -> onnx.ModelProto:
    """Conv -> Relu -> (MaxPool | AvgPool) -> Concat -> x + x*c -> Clip(0, 6) -> Transpose -> Reshape -> Gemm."""
    r = np.random.default_rng(5)
    inits = [numpy_helper.from_array(r.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "K"),
             numpy_helper.from_array(r.standard_normal(4).astype(np.float32) * 0.1, "kb"),
             numpy_helper.from_array(r.uniform(0.5, 1.5, (1, 8, 1, 1)).astype(np.float32), "c"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
             numpy_helper.from_array(np.array([1, 128], np.int64), "shape"),
             numpy_helper.from_array(r.standard_normal((5, 128)).astype(np.float32) * 0.1, "W"),
             numpy_helper.from_array(r.standard_normal(5).astype(np.float32) * 0.1, "b")]
    nodes = [helper.make_node("Conv", ["x", "K", "kb"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("MaxPool", ["r0"], ["p0"], name="maxp", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("AveragePool", ["r0"], ["p1"], name="avgp", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["p0", "p1"], ["cat"], name="cat", axis=1),
             helper.make_node("Mul", ["cat", "c"], ["m0"], name="mul0"),
             helper.make_node("Add", ["cat", "m0"], ["a0"], name="add0"),
             helper.make_node("Clip", ["a0", "lo", "hi"], ["k0"], name="clip0"),
             helper.make_node("Transpose", ["k0"], ["t0"], name="tr0", perm=[0, 1, 3, 2]),
             helper.make_node("Reshape", ["t0", "shape"], ["f0"], name="flat"),
             helper.make_node("Gemm", ["f0", "W", "b"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "many", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def samples(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 2, (n, 1, 3, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def many_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("q") / "many.json"
    profile(many_kinds_model(), {"x": samples(40, 0)[:, 0]}, "interpreter").save(path)
    return path


def quantized_fn(model: onnx.ModelProto, prof: Path, backend: str = "interpreter", **cfg: object) -> Function:
    be = get_backend(backend)
    fn = prepare_function(import_model(model), be, quantizable=True)
    quantize_prepared(fn, be, QuantizationConfig(profile=prof, **cfg))  # type: ignore[arg-type]
    return fn


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_digits_one_island_and_agreement(tmp_path: Path) -> None:
    prof = tmp_path / "d.json"
    profile("zoo:digits", {"image": DIGITS[:100]}, "interpreter").save(prof)
    net_q = glow_core.compile("zoo:digits", "interpreter", quantize=QuantizationConfig(profile=prof))
    kinds = net_q.function.count_by_kind()
    assert kinds == {"Quantize": 1, "QConv": 1, "QMaxPool": 1, "Reshape": 1, "QMatMul": 1, "Dequantize": 1,
                     "Softmax": 1}
    reshape = net_q.function.nodes_of("Reshape")[0]
    assert reshape.outputs[0].type.elem == E.INT8Q  # data movement passes the type through
    assert net_q.stats.quantized.quantized == {"FusedConv": ["conv.fusedconv"], "MaxPool": ["pool"], "Gemm": ["fc"]}
    net_f = glow_core.compile("zoo:digits", "interpreter")
    held = DIGITS[100:]
    agree = sum(int(net_f.run({"image": x[None]})["probabilities"].argmax()
                    == net_q.run({"image": x[None]})["probabilities"].argmax()) for x in held)
    assert agree / len(held) >= 0.98


def test_many_kinds_converted_and_close(many_profile: Path) -> None:
    fn = quantized_fn(many_kinds_model(), many_profile)
    kinds = fn.count_by_kind()
    for k in ("QConv", "QMaxPool", "QAvgPool", "Concat", "QMul", "QAdd", "QMatMul", "Transpose"):
        assert k in kinds, kinds
    assert kinds["Quantize"] == 1 and kinds["Dequantize"] == 1, fn.dump()  # one island
    cat = fn.nodes_of("Concat")[0]
    assert len({v.type.scale for v in cat.inputs}) == 1  # operands brought to one scale (folded into producers)
    assert "Rescale" not in kinds  # every rescale folded into its producer
    net_f = glow_core.compile(many_kinds_model(), "interpreter")
    net_q = glow_core.compile(many_kinds_model(), "interpreter", quantize=QuantizationConfig(profile=many_profile))
    for x in samples(10, 1):
        f, q = net_f.run({"x": x})["y"], net_q.run({"x": x})["y"]
        assert cosine(f, q) > 0.995


def test_typed_equals_lowered_on_a_whole_model(many_profile: Path) -> None:
    typed = quantized_fn(many_kinds_model(), many_profile)
    lowered = quantized_fn(many_kinds_model(), many_profile)
    lower_quantized(lowered)
    lowered.verify()
    assert not any(o.type.elem.is_quantized for n in lowered.nodes for o in n.outputs)
    assert {"QuantizeLinear", "QLinearConv", "DequantizeLinear", "MaxPool"} <= set(lowered.count_by_kind())
    be = get_backend("interpreter")
    from glow_core.pipeline import compile_options

    run_t = be.compile(typed, compile_options())
    run_l = be.compile(lowered, compile_options())
    for x in samples(5, 2):
        np.testing.assert_array_equal(run_t.execute({"x": x})["y"], run_l.execute({"x": x})["y"])


def test_cpu_runs_the_lowered_network(tmp_path: Path) -> None:
    prof = tmp_path / "cpu.json"
    profile(many_kinds_model(), {"x": samples(40, 0)[:, 0]}, "cpu").save(prof)
    net_q = glow_core.compile(many_kinds_model(), "cpu", quantize=QuantizationConfig(profile=prof))
    assert not any(o.type.elem.is_quantized for n in net_q.function.nodes for o in n.outputs)
    net_f = glow_core.compile(many_kinds_model(), "cpu")
    for x in samples(5, 3):
        assert cosine(net_f.run({"x": x})["y"], net_q.run({"x": x})["y"]) > 0.995
    from glow_core.bundle import write_bundle

    files = write_bundle(many_kinds_model(), "cpu", tmp_path / "b", name="many",
                         quantize=QuantizationConfig(profile=prof))
    assert any(f.suffix == ".o" and f.stat().st_size > 0 for f in files)


def test_keep_float_by_kind_and_name(many_profile: Path) -> None:
    kinds = quantized_fn(many_kinds_model(), many_profile, keep_float=frozenset({"Gemm", "add0"})).count_by_kind()
    assert "QMatMul" not in kinds and "Gemm" in kinds
    assert "QAdd" not in kinds and "Add" in kinds
    assert "QConv" in kinds


def test_schemas_and_per_tensor(many_profile: Path) -> None:
    sym = quantized_fn(many_kinds_model(), many_profile, schema="symmetric")
    assert sym.nodes_of("QClip"), "symmetric int8: Relu's clip at 0 is not implied by saturation"
    assert all(n.outputs[0].type.offset == 0 for n in sym.nodes if n.outputs[0].type.elem.is_quantized)
    u8 = quantized_fn(many_kinds_model(), many_profile, schema="symmetric_uint8")
    conv = u8.nodes_of("QConv")[0]
    assert conv.outputs[0].type.elem == E.UINT8Q and not u8.nodes_of("QClip")
    asym = quantized_fn(many_kinds_model(), many_profile)
    assert not asym.nodes_of("QClip")  # Relu / Clip(0, 6) folded into the output ranges
    per_t = quantized_fn(many_kinds_model(), many_profile, per_channel=False)
    assert per_t.nodes_of("QConv")[0].inputs[2].type.shape == (1,)
    assert asym.nodes_of("QConv")[0].inputs[2].type.shape == (4,)


def test_profile_of_another_graph_is_refused(many_profile: Path) -> None:
    with pytest.raises(ProfileMismatchError, match="does not match this graph"):
        glow_core.compile(mlp_softmax_model(), "interpreter", quantize=QuantizationConfig(profile=many_profile))
    with pytest.raises(InputError, match="needs a profile"):
        glow_core.compile(mlp_softmax_model(), "interpreter", quantize=QuantizationConfig())


def test_passes_fold_pairs_into_rescale_and_sink_dequantize() -> None:
    fn = Function("p")
    x = fn.add_input("x", TensorType(E.FLOAT32, (2, 3)))
    q = fn.create("Quantize", [x], {"elem": E.INT8Q, "scale": 0.1, "offset": 0}).outputs[0]
    d = fn.create("Dequantize", [q], {"in_params": (0.1, 0)}).outputs[0]
    r = fn.create("Reshape", [d], {"shape": (3, 2)}).outputs[0]
    q2 = fn.create("Quantize", [r], {"elem": E.INT8Q, "scale": 0.2, "offset": 5}).outputs[0]
    c = fn.create("QClip", [q2], {"lo": -128, "hi": 127}).outputs[0]
    fn.set_output("y", fn.create("Dequantize", [c], {"in_params": (0.2, 5)}).outputs[0])
    optimize_quantized(fn)
    fn.verify()
    # Reshape runs on the integers, the Dequantize -> Quantize pair became a Rescale folded into the first
    # Quantize, the no-op clip vanished
    assert [n.kind.name for n in fn.nodes] == ["Quantize", "Reshape", "Dequantize"]
    assert fn.nodes[0].outputs[0].type == TensorType(E.INT8Q, (2, 3), 0.2, 5)


def test_cli_quantize_options(tmp_path: Path, many_profile: Path) -> None:
    model = save(many_kinds_model(), tmp_path / "m.onnx")
    r = glow(["compile", str(model), "-b", "interpreter", "--quantize", str(many_profile), "--stats"])
    assert r.returncode == 0, r.stderr
    assert "quantized to int8: FusedConv x1" in r.stdout and "QConv" in r.stdout
    r = glow(["compile", str(model), "--quantize", str(many_profile)])  # the fastest backend, an interpreter profile
    assert r.returncode == 0 and "for cpu" in r.stdout and "quantized to int8: FusedConv x1" in r.stdout, r.stderr
    r = glow(["run", str(model), "-b", "interpreter", "--quantize", str(many_profile), "--keep-float", "Gemm"])
    assert r.returncode == 0, r.stderr
    r = glow(["bench", str(model), "-b", "interpreter", "--quantize", str(many_profile), "--runs", "1",
              "--warmup", "0"])
    assert r.returncode == 0 and "median" in r.stdout, r.stderr
    r = glow(["run", str(model), "-b", "interpreter", "--keep-float", "Gemm"])
    assert r.returncode != 0 and "--keep-float need(s) --quantize" in r.stderr
    r = glow(["compile", str(model), "--quantize", str(tmp_path / "nope.json")])
    assert r.returncode != 0 and "does not exist" in r.stderr


def test_cli_compare_report(tmp_path: Path, many_profile: Path) -> None:
    model = save(many_kinds_model(), tmp_path / "m.onnx")
    data = tmp_path / "eval.npz"
    np.savez(data, x=samples(6, 9)[:, 0])
    r = glow(["compare", str(model), "--quantize", str(many_profile), "--data", str(data), "--worst", "3"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "samples  6" in out
    assert "output y: top-1 agreement" in out and "cosine" in out
    worst = [line for line in out.splitlines() if line.startswith("  ") and " dB" in line]
    assert len(worst) == 3
    db = [float(line.split()[-2]) for line in worst]
    assert db == sorted(db)  # worst first
    r = glow(["compare", str(model), "--quantize", str(many_profile)])
    assert r.returncode != 0 and "--data" in r.stderr


def test_report_api_ranks_layers(many_profile: Path) -> None:
    from glow_core.quantization.report import compare_quantized

    rep = compare_quantized(many_kinds_model(), QuantizationConfig(profile=many_profile), {"x": samples(4, 4)[:, 0]})
    assert rep.samples == 4 and len(rep.outputs) == 1
    assert rep.outputs[0].cosine > 0.99 and rep.outputs[0].top1 is not None
    names = {layer.name for layer in rep.layers}
    assert {"conv0.fusedconv", "fc", "add0", "cat"} <= names
    assert all(np.isfinite(layer.sqnr_db) or layer.noise == 0 for layer in rep.layers)
    assert rep.worst(2) == sorted(rep.layers, key=lambda layer: layer.sqnr_db)[:2]


def test_digits_zoo_reference_resolves() -> None:
    assert resolve_model("zoo:digits") is not None


def test_docs_worked_example(tmp_path: Path) -> None:
    """The ``$ glow`` samples of docs/quantization.md run after its data snippet, and print what the page shows."""
    import os
    import re

    from tests.docs.mdblocks import DOCS, matches, samples

    doc = DOCS / "quantization.md"
    data_block = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.DOTALL)[0]
    assert "digits_calib.npz" in data_block
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(data_block, str(doc), "exec"), {})  # noqa: S102  (our own documentation)
    finally:
        os.chdir(cwd)
    found = samples(doc)
    assert len(found) >= 4
    for s in found:
        r = glow(s.args, cwd=tmp_path, timeout=600)
        assert r.returncode == 0, (s.command, r.stderr)
        assert matches(s.expected, r.stdout), f"{s.command}\n--- shown\n" + "\n".join(s.expected) + \
            f"\n--- actual\n{r.stdout}"


def test_islands_start_at_compute_kinds() -> None:
    """Add of a converted result and a float input stays float; Mul of two converted results joins the island."""
    r = np.random.default_rng(8)
    w = [numpy_helper.from_array(r.standard_normal((6, 6)).astype(np.float32), n) for n in ("W", "V")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm0"),
             helper.make_node("Add", ["h", "y"], ["s"], name="mixed"),  # y is a float graph input
             helper.make_node("MatMul", ["x", "V"], ["g"], name="mm1"),
             helper.make_node("Mul", ["h", "g"], ["t"], name="both"),
             helper.make_node("Mul", ["y", "y"], ["u"], name="floats")]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 6]) for n in ("x", "y")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 6]) for n in ("s", "t", "u")]
    model = helper.make_model(helper.make_graph(nodes, "isl", vi, outs, initializer=w),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    data = {"x": r.standard_normal((8, 2, 6)).astype(np.float32), "y": r.standard_normal((8, 2, 6)).astype(np.float32)}
    prof = profile(model, data, "interpreter")
    be = get_backend("interpreter")
    fn = prepare_function(import_model(model), be, quantizable=True)
    done = quantize_prepared(fn, be, QuantizationConfig(profile=prof))
    assert done.quantized == {"MatMul": ["mm0", "mm1"], "Mul": ["both"]}
    assert {"mixed", "floats"} <= set(done.kept_float)
    assert all(done.kept_float[n].startswith("outside the int8 islands") for n in ("mixed", "floats"))
    kinds = fn.count_by_kind()
    assert kinds["QMatMul"] == 2 and kinds["QMul"] == 1 and kinds["Add"] == 1 and kinds["Mul"] == 1
