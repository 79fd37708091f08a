"""Accelerators that run part of a model: refused partitions, claims, minimum sizes, epilogues, bytes moved.

The fixture backends (tests/runtime/narrow_plugin.py) compute with the interpreter's kernels: ``picky``
refuses partitions of fewer than PICKY_MIN nodes at compile time, ``narrowmin`` declares a minimum
partition size, ``convrelu`` claims Conv -> Relu pairs only, ``gemmhl`` claims Gemm before lowering.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import zoo
from glow_core.errors import BackendError
from glow_core.ir.graph import Function, Node
from glow_core.plugin_host import get_backend
from glow_core.runtime import PartitionError, parse_devices, plan_network
from glow_core.runtime.assign import EPILOGUES, collect_claims
from glow_core.runtime.cost import CostModel, estimate_plan
from glow_core.runtime.host_manager import check_plan
from glow_core.runtime.report import format_plan, moved_bytes
from tests.cliutil import add_relu_model, glow
from tests.runtime import narrow_plugin
from tests.runtime.detector import yolov8n_like
from tests.tiers import sampled

LIGHT = ["squeezenet", "resnet50", "shufflenet", "densenet121", "inception_v1", "inception_v2", "alexnet",
         "zfnet512", "vgg19"]


def _close(out: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    for k in ref:  # the fixtures compute with the interpreter's kernels, cpu with LLVM: rounding differs
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-5 * float(np.abs(ref[k]).max() or 1))


@pytest.mark.parametrize("name", sampled(LIGHT, ("squeezenet", "inception_v1")))
def test_partitions_a_backend_refuses_run_on_the_next_device(name: str) -> None:
    model = zoo.load_with_random_weights(name)
    feeds = zoo.model_feeds(model)
    ref = glow_core.compile(model, "cpu").run(feeds)
    net = glow_core.compile(model, devices="picky:1,cpu:1")
    try:
        plan = net.executable.plan  # type: ignore[attr-defined]
        refused = [r for r in plan.refusals if r.partition]
        assert all(r.backend == "picky" and "too small to offload" in r.reason for r in refused)
        assert refused or name not in ("squeezenet", "inception_v1")  # both have lone Conv -> Relu pairs
        assert all(r.nodes < narrow_plugin.PICKY_MIN for r in refused)
        assert all(len(p.nodes) >= narrow_plugin.PICKY_MIN for p in plan.partitions if p.backend == "picky")
        lines = [line for line in format_plan(plan).splitlines() if line.startswith("refused: picky refused")]
        assert bool(lines) == bool(refused) and all("too small to offload" in line for line in lines)
        out = net.run(feeds)
    finally:
        net.executable.close()
    _close(out, ref)


def test_a_refusal_with_no_next_device_is_an_error() -> None:
    with pytest.raises(PartitionError, match="'picky' refused partition p0 .* no later device .*too small to offload"):
        check_plan(add_relu_model(), parse_devices("picky:1"), compile_last=True)


def test_a_refused_node_the_next_device_lacks_is_lowered_for_it() -> None:
    """cpu has no Relu (it runs it lowered, as a Max); a Relu picky refuses is lowered before it moves."""
    plan = check_plan(add_relu_model(), parse_devices("picky:1,cpu:1"), compile_last=True)
    assert [p.backend for p in plan.partitions] == ["cpu"]
    assert "Relu" not in {n.kind.name for n in plan.function.nodes} and plan.refusals[0].nodes == 2


def _dist_env(tmp_path: Path) -> list[Path]:
    return [narrow_plugin.write_dist_info(tmp_path / "site"), Path(__file__).resolve().parents[2]]


def test_glow_partition_says_why_a_partition_went_to_the_next_device(tmp_path: Path) -> None:
    r = glow(["partition", "zoo:squeezenet", "--devices", "picky:1,cpu:1"], pythonpath=_dist_env(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("refused: picky refused")]
    assert lines and all(line.endswith(("partition of 1 node(s) is too small to offload",
                                        "partition of 2 node(s) is too small to offload")) for line in lines)
    assert "moved between host and devices per request" in r.stdout.splitlines()[1]


@pytest.fixture(scope="module")
def detector() -> onnx.ModelProto:
    return yolov8n_like(size=160)


def test_no_partition_below_the_declared_minimum_is_offloaded(detector: onnx.ModelProto) -> None:
    narrow = plan_network(detector, parse_devices("narrow:1,cpu:1"))
    plan = plan_network(detector, parse_devices("narrowmin:1,cpu:1"))
    mine = [p for p in plan.partitions if p.backend == "narrowmin"]
    assert mine and all(len(p.nodes) >= narrow_plugin.NARROW_MIN for p in mine)
    assert len(plan.partitions) <= 30 < len(narrow.partitions)
    assert moved_bytes(plan) < moved_bytes(narrow)
    text = format_plan(plan)
    assert f"on narrowmin, fewer than {narrow_plugin.NARROW_MIN} node(s) (min_partition_nodes)" in text


def test_epilogues_follow_their_producer(detector: onnx.ModelProto) -> None:
    plan = plan_network(detector, parse_devices("narrow:1,cpu:1"))
    where = {id(n): p.backend for p in plan.partitions for n in p.nodes}
    followed = 0
    for p in plan.partitions:
        for n in p.nodes:
            srcs = {where.get(id(v.producer)) for v in n.inputs if v is not None and v.producer is not None}
            if n.kind.name in EPILOGUES and srcs == {"cpu"}:
                assert p.backend == "cpu", f"{n.where()} runs on {p.backend}, its operands come from cpu"
                followed += n.kind.name == "Add"
    assert followed  # the residual Adds of the C2f blocks stay with the SiLUs that feed them


def test_a_claim_limits_what_a_backend_takes() -> None:
    model = zoo.load_with_random_weights("squeezenet")
    plan = plan_network(model, parse_devices("convrelu:1,cpu:1"))
    taken = [n for p in plan.partitions if p.backend == "convrelu" for n in p.nodes]
    assert taken and {n.kind.name for n in taken} == {"Conv", "Relu"}
    assert sum(n.kind.name == "Conv" for n in taken) == sum(n.kind.name == "Relu" for n in taken)


def _gemm_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), n) for n in ("w1", "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_high_level_claim_is_made_before_lowering() -> None:
    model = _gemm_model()
    plan = plan_network(model, parse_devices("gemmhl:1,cpu:1"))
    on = {p.backend: [n.kind.name for n in p.nodes] for p in plan.partitions}
    assert on["gemmhl"] and all(n.origin == "gemm" for p in plan.partitions if p.backend == "gemmhl" for n in p.nodes)
    assert "MatMul" in on["cpu"]
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    net = glow_core.compile(model, devices="gemmhl:1,cpu:1")
    try:
        _close(net.run({"x": x}), glow_core.compile(model, "cpu").run({"x": x}))
    finally:
        net.executable.close()


def test_a_claim_of_unsupported_nodes_is_refused() -> None:
    class Greedy(narrow_plugin.NarrowBackend):
        name = "greedy"

        def claim(self, function: Function) -> list[list[Node]]:
            return [list(function.nodes)]

    fn = plan_network(zoo.load_with_random_weights("squeezenet"), parse_devices("cpu:1")).function
    with pytest.raises(BackendError, match="backend 'greedy' claims .* node\\(s\\) it does not support"):
        collect_claims(fn, [Greedy(), get_backend("cpu")])


def test_runs_whose_moves_cost_more_than_running_them_elsewhere_are_not_offloaded(
        detector: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = plan_network(detector, parse_devices("costed:1,cpu:1"))
    monkeypatch.setattr(narrow_plugin, "COSTED_BANDWIDTH", 2e8)  # a slower link: moving dominates for most convs
    slow = plan_network(detector, parse_devices("costed:1,cpu:1"))
    offloaded = [sum(len(p.nodes) for p in plan.partitions if p.backend == "costed") for plan in (fast, slow)]
    assert 0 < offloaded[1] < offloaded[0]
    reasons = [r.reason for r in slow.refusals]
    assert reasons and all("moving its tensors costs more than running it on cpu" in r for r in reasons)
    # by the model's own estimate, the plan beats offloading everything the device claims and cpu alone
    model = CostModel.of([get_backend("costed"), get_backend("cpu")])
    greedy = plan_network(detector, parse_devices("narrow:1,cpu:1"))
    everything = estimate_plan(model, greedy.function,
                               [("costed" if p.backend == "narrow" else "cpu", p.nodes) for p in greedy.partitions])
    alone = estimate_plan(model, slow.function, [("cpu", slow.function.nodes)])
    assert slow.estimate is not None and slow.estimate.total_s <= min(everything.total_s, alone.total_s)
    assert "estimated time per request" in format_plan(slow)


def _conv_mlp_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((4 * 6 * 6, 8)).astype(np.float32), "m"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "m"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "conv_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_next_devices_fusions_survive_the_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """The function is prepared with the first backend's fusions (convrelu: none); cpu fuses its own
    partition again once extracted: MatMul + bias + Relu become one FusedMatMul."""
    cpu = get_backend("cpu")
    compiled: list[list[str]] = []
    original = type(cpu).compile

    def recording(self: object, function: Function, options: object) -> object:
        compiled.append([n.kind.name for n in function.nodes])
        return original(self, function, options)  # type: ignore[arg-type]

    monkeypatch.setattr(type(cpu), "compile", recording)
    model = _conv_mlp_model()
    x = {"x": np.random.default_rng(2).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    ref = glow_core.compile(model, "cpu", options={"cache": False}).run(x)
    alone = compiled.pop()
    net = glow_core.compile(model, devices="convrelu:1,cpu:1", options={"cache": False})
    try:
        assert [p.backend for p in net.executable.plan.partitions] == ["convrelu", "cpu"]
        _close(net.run(x), ref)
    finally:
        net.executable.close()
    (split,) = compiled
    assert "FusedMatMul" in split and "MatMul" not in split and len(split) <= len(alone)
