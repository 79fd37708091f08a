"""The OpenVINO backend (plugins/openvino, issue 29): conformance, models against cpu, claims by OpenVINO's
supported-operation query, the host fallback, concurrent asynchronous runs, and its imports (glow_sdk only).
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import glow_core
from glow_core import zoo
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.plugin_host import get_backend
from glow_core.runtime import parse_devices
from glow_core.runtime.host_manager import check_plan
from tests.cliutil import glow
from tests.openvino.models import det_model
from tests.runtime.detector import yolov8n_like
from tests.test_models import MODELS, model_path
from tests.tiers import sampled

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "openvino" / "glow_backend_openvino"


def _encoder() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from tests.runtime.encoder import bert_encoder, encoder_feeds

    return bert_encoder(), encoder_feeds()


def _light(name: str) -> Callable[[], tuple[object, dict[str, np.ndarray] | None]]:
    def build() -> tuple[object, dict[str, np.ndarray] | None]:
        model = onnx.load(str(model_path(name)))
        return zoo.with_random_weights(model, zoo.RANDOM_WEIGHT_GAINS.get(name, 2.0), 0, expose_logits=True), None
    return build


#: the 9 light zoo models (random weights) and 3 trained-style models: the digits classifier, a
#: YOLOv8n-style detector and a BERT-style encoder
MODEL_BUILDERS: dict[str, Callable[[], tuple[object, dict[str, np.ndarray] | None]]] = {
    **{name: _light(name) for name in MODELS},
    "digits": lambda: ("zoo:digits", None),
    "detector": lambda: (yolov8n_like(), None),
    "encoder": _encoder,
}
SAMPLE = ("squeezenet", "digits", "detector", "encoder")


@pytest.mark.slow
@pytest.mark.parametrize("name", sampled(list(MODEL_BUILDERS), SAMPLE))
def test_models_run_on_openvino_and_match_cpu(name: str) -> None:
    model, feeds = MODEL_BUILDERS[name]()
    net = glow_core.compile(model, "openvino")
    if feeds is None:
        feeds = zoo.random_feeds({p.name: p.type for p in net.function.inputs})
    got, want = net.run(feeds), glow_core.compile(model, "cpu").run(feeds)
    exe = net.executable
    assert exe.on_openvino > 0.9 * (exe.on_openvino + exe.on_host), (exe.on_openvino, exe.on_host)
    for key, w in want.items():
        scale = float(np.max(np.abs(w)))
        np.testing.assert_allclose(got[key], w, rtol=1e-3, atol=1e-5 * max(scale, 1.0), err_msg=f"{name} {key}")


def test_digits_predictions_match_cpu_on_the_held_out_set() -> None:
    evaluation = zoo.evaluation("zoo:digits")
    assert evaluation is not None
    x, labels = evaluation.load()
    ov = evaluation.outputs(glow_core.compile("zoo:digits", "openvino"), x)
    cpu = evaluation.outputs(glow_core.compile("zoo:digits", "cpu"), x)
    assert np.array_equal(ov.argmax(-1), cpu.argmax(-1))
    assert zoo.accuracy(ov, labels) >= 0.9


def test_conformance_core_sample_passes(tmp_path: Path) -> None:
    """1 case in 10 of level core (the whole level is the `full` tier below)."""
    r = glow(["conformance", "--backend", "openvino", "--level", "core", "--sample", "10",
              "--report-dir", str(tmp_path / "r"), "--progress", "off"], timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "PASSES THE SELECTED CASES" in r.stdout and "sample: 1 case in 10" in r.stdout


@pytest.mark.full
def test_conformance_core_conforms(tmp_path: Path) -> None:
    r = glow(["conformance", "--backend", "openvino", "--level", "core", "--report-dir", str(tmp_path / "r"),
              "--progress", "off"], timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "'openvino' CONFORMS" in r.stdout


def test_claims_are_what_openvinos_query_accepts() -> None:
    """OpenVINO's ONNX frontend has no Det: the query rejects that node only, and the claim leaves it out."""
    from glow_core.pipeline import import_function, prepare_function

    backend = get_backend("openvino")
    fn = prepare_function(import_function(det_model()), backend)
    assert [n.kind.name for n in fn.nodes] == ["MatMul", "Relu", "Det", "Reshape", "MatMul", "Sigmoid"]
    accepted = backend.query(fn)
    assert accepted == {n.name for n in fn.nodes} - {"det"}
    claimed = {n.name for group in backend.claim(fn) for n in group}
    assert claimed == accepted


def test_partition_puts_just_the_operator_openvino_cannot_run_on_cpu(tmp_path: Path) -> None:
    plan = check_plan(det_model(), parse_devices("openvino:1,cpu:1"))
    on_cpu = [n for p in plan.partitions if p.backend == "cpu" for n in p.nodes]
    on_ov = [n for p in plan.partitions if p.backend == "openvino" for n in p.nodes]
    assert on_cpu and {n.origin for n in on_cpu} == {"det"}, {n.origin for n in on_cpu}
    assert {n.origin for n in on_ov} == {"matmul", "relu", "reshape", "matmul2", "sigmoid"}
    x = np.random.default_rng(1).standard_normal((4, 3, 3)).astype(np.float32)
    got = glow_core.compile(det_model(), devices="openvino:1,cpu:1").run({"x": x})["y"]
    np.testing.assert_allclose(got, glow_core.compile(det_model(), "cpu").run({"x": x})["y"], rtol=1e-5, atol=1e-6)
    path = tmp_path / "det.onnx"
    onnx.save(det_model(), str(path))
    r = glow(["partition", str(path), "--devices", "openvino:1,cpu:1"])
    assert r.returncode == 0, r.stderr
    assert "p0: backend openvino" in r.stdout and "p1: backend cpu" in r.stdout and "p2: backend openvino" in r.stdout


def _int64_add() -> Function:
    fn = Function("i64")
    t = TensorType(ElemKind.INT64, (3,))
    a, b = fn.add_input("a", t), fn.add_input("b", t)
    fn.set_output("y", fn.create("Add", [a, b], {}, name="add").result)
    return fn


def test_what_openvino_computes_otherwise_runs_on_the_host() -> None:
    """OpenVINO's CPU device computes int64 in int32: such a node runs on the host, exactly, and is not claimed."""
    from glow_core.pipeline import compile_options

    backend = get_backend("openvino")
    fn = _int64_add()
    assert backend.claim(fn) == []
    exe = backend.compile(fn, compile_options())
    big = np.iinfo(np.int64).max
    out = exe.execute({"a": np.array([big, -5, 1], np.int64), "b": np.array([-1, 7, 2 ** 40], np.int64)})
    assert out["y"].tolist() == [big - 1, 2, 2 ** 40 + 1]
    assert (exe.on_openvino, exe.on_host) == (0, 1)


def test_concurrent_runs_share_the_infer_requests() -> None:
    net = glow_core.compile(yolov8n_like(size=64), "openvino")
    feeds = [zoo.random_feeds({p.name: p.type for p in net.function.inputs}, seed=s) for s in range(6)]
    want = [net.run(f)["output0"] for f in feeds]
    got: dict[int, np.ndarray] = {}

    def run(i: int) -> None:
        got[i] = net.run(feeds[i])["output0"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[i], w)


def test_the_plugin_imports_only_the_public_sdk() -> None:
    """An outside vendor's backend: glow_sdk and its own package, nothing of glow_core (pyproject's import
    contract checks the same, indirect imports aside)."""
    found = set()
    for f in PLUGIN.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
    assert {m for m in found if m.startswith("glow")} == {"glow_sdk", "glow_backend_openvino"}, found


class _HostBuffers:
    """A device memory whose buffers are the host arrays (the SDK's default memory, written out here)."""

    def copy_to_host(self, buffer: np.ndarray) -> np.ndarray:
        return buffer

    def copy_from_host(self, array: np.ndarray) -> np.ndarray:
        return array


def test_execute_async_completes_from_openvinos_callbacks() -> None:
    """Runs started together complete through OpenVINO's completion callbacks (no thread of ours waits),
    with the outputs ``execute`` gives, also across a host part (the Det of det_model)."""
    for model, backend_parts in ((yolov8n_like(size=64), 1), (det_model(), 3)):
        net = glow_core.compile(model, "openvino")
        exe = net.executable
        assert len(exe.parts) == backend_parts
        feeds = [zoo.random_feeds({p.name: p.type for p in net.function.inputs}, seed=s) for s in range(4)]
        handles = [exe.execute_async(f, _HostBuffers()) for f in feeds]
        for f, h in zip(feeds, handles):
            got, want = h.result(timeout=60), exe.execute(f)
            assert set(got) == set(want)
            for k in want:
                np.testing.assert_array_equal(got[k], want[k])


def test_sdk_commands_show_the_backend() -> None:
    """``glow sdk capabilities`` takes a backend that declares its SDK API version as "N.M"."""
    r = glow(["sdk", "capabilities", "openvino"])
    assert r.returncode == 0, r.stderr
    assert "(SDK API 2.1)" in r.stdout and "primitives: 70 of 70 complete" in r.stdout
    r = glow(["sdk", "options", "openvino"])
    assert r.returncode == 0 and "requests" in r.stdout and "device" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("options,words", [({"device": "TPU"}, "option 'device' is 'TPU'"),
                                           ({"requests": 0}, "option 'requests' must be at least 1"),
                                           ({"request": 2}, "'request'")])
def test_bad_options_are_refused_with_a_clear_message(options: dict[str, object], words: str) -> None:
    from glow_sdk.options import BackendOptionError

    with pytest.raises(BackendOptionError, match=words):
        glow_core.compile("zoo:digits", "openvino", options=options)
