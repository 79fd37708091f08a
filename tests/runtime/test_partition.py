"""The partitioner: ResNet-50 split by memory over four cpu devices, heterogeneous fallback, user assignments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import glow_core
from glow_core import zoo
from glow_core.runtime import HostManager, PartitionError, parse_devices, plan_dot, plan_network
from glow_core.runtime.graphcut import segment_memory
from tests.cliutil import add_relu_model, glow, save
from tests.runtime import narrow_plugin
from tests.tiers import sampled


@pytest.fixture(scope="module")
def resnet() -> onnx.ModelProto:
    return zoo.load_with_random_weights("resnet50")


def whole_need(model: onnx.ModelProto) -> int:
    plan = plan_network(model, parse_devices("cpu:1"))
    assert len(plan.partitions) == 1
    return segment_memory(plan.function, plan.function.nodes).total


def test_resnet50_on_four_cpus_with_a_third_of_the_memory(resnet: onnx.ModelProto, tmp_path: Path) -> None:
    cap = whole_need(resnet) // 3
    feeds = zoo.model_feeds(resnet)
    single = glow_core.compile(resnet, "cpu").run(feeds)
    with HostManager(f"cpu:4@{cap}") as hm:
        plan = hm.add_network("resnet50", resnet)
        assert len(plan.partitions) >= 3
        assert all(p.memory.total <= cap for p in plan.partitions)
        loaded = {m.id: m.used_bytes for m in hm.managers.values()}
        assert all(0 <= used <= cap for used in loaded.values()) and sum(v > 0 for v in loaded.values()) >= 3
        assert plan.cut_tensors(), "partitions must pass tensors"
        out = hm.run_sync("resnet50", feeds)
    assert out.keys() == single.keys()
    for k in single:
        np.testing.assert_array_equal(out[k], single[k])
    dot = tmp_path / "dag.dot"
    dot.write_text(plan_dot(plan))
    text = dot.read_text()
    assert text.startswith("digraph") and text.count("->") >= len(plan.partitions) - 1
    assert '[label="p0\\ncpu on cpu' in text


def test_glow_partition_cli_writes_dot(tmp_path: Path, resnet: onnx.ModelProto) -> None:
    cap = whole_need(resnet) // 3
    r = glow(["partition", "zoo:resnet50", "--devices", f"cpu:4@{cap}", "--dot", str(tmp_path / "d.dot"), "--random-weights"])
    assert r.returncode == 0, r.stderr
    assert "partition(s) of" in r.stdout and "p2: backend cpu" in r.stdout and "tensor(s) cut" in r.stdout
    assert (tmp_path / "d.dot").read_text().startswith("digraph")


def test_no_partition_fits_is_a_clear_error(resnet: onnx.ModelProto) -> None:
    with pytest.raises(PartitionError, match="alone needs .* more than a device holds"):
        plan_network(resnet, parse_devices("cpu:4@1MiB"))
    with pytest.raises(PartitionError, match=r"no device holds partition p\d+ .* it needs"):
        plan_network(resnet, parse_devices(f"cpu:1@{whole_need(resnet) // 3}"))


def test_a_node_no_device_runs() -> None:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(PartitionError, match="no device runs 1 node"):
        plan_network(m, parse_devices("narrow:1"))


LIGHT = ["squeezenet", "resnet50", "shufflenet", "densenet121", "inception_v1", "inception_v2", "alexnet",
         "zfnet512", "vgg19"]


@pytest.mark.parametrize("name", sampled(LIGHT, ("squeezenet", "resnet50", "inception_v2")))
def test_narrow_backend_first_then_cpu_matches_cpu_alone(name: str) -> None:
    model = zoo.load_with_random_weights(name)
    feeds = zoo.model_feeds(model)
    ref = glow_core.compile(model, "cpu").run(feeds)
    net = glow_core.compile(model, devices="narrow:1,cpu:1")
    try:
        plan = net.executable.plan  # type: ignore[attr-defined]
        backends = {p.backend for p in plan.partitions}
        assert backends == {"narrow", "cpu"}
        assert plan.fallback and all(b == "cpu" for _, b in plan.fallback)
        assert all(n.kind.name in narrow_plugin.NARROW_KINDS for p in plan.partitions if p.backend == "narrow"
                   for n in p.nodes)
        out = net.run(feeds)
    finally:
        net.executable.close()  # type: ignore[attr-defined]
    for k in ref:
        # the narrow device computes with the interpreter's kernels, cpu with LLVM: float rounding differs
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-5 * float(np.abs(ref[k]).max() or 1))


def _dist_env(tmp_path: Path) -> list[Path]:
    return [narrow_plugin.write_dist_info(tmp_path / "site"), Path(__file__).resolve().parents[2]]


def test_glow_partition_shows_fallback_and_strict_refuses(tmp_path: Path) -> None:
    paths = _dist_env(tmp_path)
    r = glow(["partition", "zoo:squeezenet", "--devices", "narrow:1,cpu:1"], pythonpath=paths)
    assert r.returncode == 0, r.stderr
    assert "backend narrow" in r.stdout and "backend cpu" in r.stdout
    assert "fallback: 13 node(s) not run by narrow" in r.stdout and "Concat x8 -> cpu" in r.stdout
    r = glow(["partition", "zoo:squeezenet", "--devices", "narrow:1,cpu:1", "--strict"], pythonpath=paths)
    assert r.returncode != 0
    err = r.error_line()
    assert "--strict: 13 node(s)" in err and err.count("-> cpu") == 13 and "MaxPool" in err and "Softmax" in err


def test_user_assignment_is_validated(tmp_path: Path) -> None:
    model = add_relu_model()
    plan = plan_network(model, parse_devices("cpu:2"))
    names = [n.name for n in plan.function.nodes]
    assert len(names) >= 1
    assignment = {n: f"cpu{i % 2}" for i, n in enumerate(names)}
    good = plan_network(model, parse_devices("cpu:2"), assignment=assignment)
    assert [p.device for p in good.partitions] == [assignment[p.nodes[0].name] for p in good.partitions]
    with pytest.raises(PartitionError, match="unknown node"):
        plan_network(model, parse_devices("cpu:2"), assignment={**assignment, "nope": "cpu0"})
    with pytest.raises(PartitionError, match="unknown device.*choose one of: cpu0, cpu1"):
        plan_network(model, parse_devices("cpu:2"), assignment=dict.fromkeys(names, "cpu7"))
    with pytest.raises(PartitionError, match="holds"):
        plan_network(model, parse_devices("cpu:2@16"), assignment=assignment)
    x = {"x": np.arange(10, dtype=np.float32)[None] - 5, "y": np.ones((1, 10), np.float32)}
    with HostManager("cpu:2") as hm:
        hm.add_network("m", model, assignment=assignment)
        np.testing.assert_array_equal(hm.run_sync("m", x)["out"], np.maximum(x["x"] + x["y"], 0))


def test_compile_with_devices_splits_and_matches_one_device(tmp_path: Path) -> None:
    model = zoo.load_with_random_weights("squeezenet")
    feeds = zoo.model_feeds(model)
    ref = glow_core.compile(model, "cpu").run(feeds)
    net = glow_core.compile(model, devices="cpu:3@6MiB")
    try:
        assert len(net.executable.plan.partitions) == 3  # type: ignore[attr-defined]
        out = net.run(feeds)
    finally:
        net.executable.close()  # type: ignore[attr-defined]
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])
    r = glow(["run", "zoo:squeezenet", "--devices", "cpu:3@6MiB", "--random-weights"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "devices  cpu:3@6MiB: 3 partition(s) on cpu0, cpu1, cpu2" in r.stdout
