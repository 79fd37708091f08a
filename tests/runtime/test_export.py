"""Partitions as ONNX (glow_sdk.export, issue 29): every partition passes the ONNX checker (full check) and
gives the same outputs under onnxruntime as glow's own run of it; ``glow partition --export`` writes them.

The partitions are those of the device list ``narrow:1,cpu:1`` (tests/runtime/narrow_plugin.py): the
narrow device's are lowered primitives (Conv, MatMul, Gemm, Add, Relu), cpu's are fused again for cpu
(FusedConv, FusedMatMul, FusedLayerNorm, FusedAttention, Softmax, ...); the high-level imported function
(before lowering) is exported whole too.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from glow_core import zoo
from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_core.pipeline import compile_options, import_function
from glow_core.plugin_host import get_backend
from glow_core.runtime import parse_devices
from glow_core.runtime.host_manager import plan_network
from glow_core.runtime.refusal import PartitionCompiler
from glow_sdk.export import EXPORTERS, ExportError, HostPart, OnnxPart, partition_to_onnx, run_parts, split
from tests.cliutil import glow
from tests.runtime.detector import yolov8n_like
from tests.test_models import MODELS, model_path
from tests.tiers import sampled

ort = pytest.importorskip("onnxruntime")

#: the models of the default tier (the others run in the full tier)
SAMPLE = ("squeezenet", "shufflenet", "detector")
DEVICES = "narrow:1,cpu:1"


def _model(name: str) -> onnx.ModelProto:
    if name == "detector":
        return yolov8n_like(size=96)
    return zoo.with_random_weights(onnx.load(str(model_path(name))), zoo.RANDOM_WEIGHT_GAINS.get(name, 2.0), 0)


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _check(function: Function, backend: str) -> None:
    """``function`` exported, checked, and run by onnxruntime and by ``backend`` on the same random feeds."""
    model = partition_to_onnx(function)  # checks with onnx.checker.check_model(full_check=True)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == [p.name for p in function.inputs]
    assert [o.name for o in model.graph.output] == [n for n, _ in function.outputs]
    feeds = zoo.random_feeds({p.name: p.type for p in function.inputs})
    want = get_backend(backend).compile(function, compile_options()).execute(feeds)
    got = _onnxruntime(model, feeds)
    for name, w in want.items():
        g = got[name]
        where = f"{function.name} output {name}"
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{where}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        scale = float(np.max(np.abs(w))) if w.size and w.dtype.kind == "f" else 1.0
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(scale, 1e-3),
                                   err_msg=f"{where} differs under onnxruntime")


@pytest.mark.slow
@pytest.mark.parametrize("name", sampled([*MODELS, "detector"], SAMPLE))
def test_every_partition_exports_and_matches_onnxruntime(name: str) -> None:
    model = _model(name)
    plan = plan_network(model, parse_devices(DEVICES))
    assert {p.backend for p in plan.partitions} == {"narrow", "cpu"}
    extractor = PartitionCompiler("export", prepared_for="narrow")
    for p in plan.partitions:
        _, sub = extractor.extract(plan, p)
        _check(sub, p.backend)
    _check(import_function(model), "interpreter")  # the high-level function, before lowering


def test_encoder_partitions_export() -> None:
    """A BERT-style encoder: cpu's FusedAttention, FusedLayerNorm and FusedMatMul, Gather of int64 ids."""
    from tests.runtime.encoder import bert_encoder

    model = bert_encoder(layers=1, hidden=32, heads=2, ffn=64, seq=8, vocab=10)
    plan = plan_network(model, parse_devices(DEVICES))
    extractor = PartitionCompiler("export", prepared_for="narrow")
    kinds = set()
    for p in plan.partitions:
        _, sub = extractor.extract(plan, p)
        kinds |= {n.kind.name for n in sub.nodes}
        _check(sub, p.backend)
    assert {"FusedAttention", "FusedLayerNorm"} <= kinds, kinds


@pytest.mark.parametrize("kind,operands,attrs", [
    ("Max", [np.array([np.nan, 1, -np.inf, 2], np.float32), np.array([1, np.nan, 0, np.nan], np.float32)], {}),
    ("Mod", [np.array([5.5, -5.5, 5.5, -0.0], np.float32), np.array([-2, 2, 2, 3], np.float32)], {"fmod": False}),
    ("BitShift", [np.array([-7, 7, -1, 2 ** 30, -8, 5], np.int32), np.array([1, 1, 31, 2, 40, -1], np.int32)],
     {"direction": "RIGHT"}),
    ("BitShift", [np.array([-7, 7, -1, 2 ** 30, 5, 5], np.int32), np.array([1, 1, 31, 2, 32, -1], np.int32)],
     {"direction": "LEFT"}),
    ("Sign", [np.array([np.nan, -2, 0, 3], np.float32)], {}),
    ("Slice", [np.arange(10, dtype=np.float32)], {"starts": (8,), "sizes": (5,), "steps": (-2,)}),
    ("Requantize", [np.array([-300, -3, 0, 5, 1000], np.int32), np.float32(0.37), np.int8(3)], {}),
    ("ReduceL1", [np.array([[-2.5, 3], [0, -1]], np.float32)], {"axes": (), "keepdims": True}),
    ("ReduceSumSquare", [np.array([[-2.5, 3], [0, -1]], np.float32)], {"axes": (), "keepdims": True}),
    ("ReduceL2", [np.array([[-2.5, 3], [0, -1]], np.float32)], {"axes": (), "keepdims": False}),
])
def test_kinds_without_an_onnx_operator_of_the_same_meaning_match_the_reference(
        kind: str, operands: list[np.ndarray], attrs: dict[str, object]) -> None:
    """Glow kinds that have no ONNX operator of the same meaning map onto several ONNX operators that
    compute exactly what glow computes, special values included."""
    from glow_tools.testing import one_node_function, run_function

    fn = one_node_function(kind, operands, attrs)
    model = partition_to_onnx(fn)
    feeds = {p.name: np.asarray(v) for p, v in zip(fn.inputs, operands)}
    want = run_function(fn, "interpreter", feeds)
    got = _onnxruntime(model, feeds)
    for name, w in want.items():
        np.testing.assert_array_equal(got[name], w, err_msg=f"{kind} {attrs}")


def test_nodes_without_an_onnx_form_here_are_not_exportable() -> None:
    """An even-sized LRN (ONNX centres odd windows only) and a mean over an empty axis (ONNX leaves it to the
    runtime) are refused, as the rules of glow_sdk.onnx_ops.EXPORT_RULES say."""
    from glow_tools.testing import one_node_function
    from glow_sdk.export import exportable

    x = np.ones((1, 6, 2, 2), np.float32)
    assert exportable(one_node_function("LRN", [x], {"size": 3}).nodes[0])
    assert not exportable(one_node_function("LRN", [x], {"size": 4}).nodes[0])
    empty = np.ones((2, 0), np.float32)
    assert not exportable(one_node_function("ReduceMean", [empty], {"axes": (1,)}).nodes[0])
    assert exportable(one_node_function("ReduceMean", [x], {"axes": (1,)}).nodes[0])


def test_the_mapping_is_a_table_and_unknown_kinds_are_refused() -> None:
    assert {"Conv", "MatMul", "BitShift", "FusedConv", "FusedAttention", "Slice"} <= set(EXPORTERS)
    fn = Function("q")
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (4,)))
    node = fn.create("BitCast", [x], {"to": ElemKind.INT32}, name="bits")
    fn.set_output("y", node.result)
    with pytest.raises(ExportError, match=r"1 node\(s\) have no ONNX form here: BitCast \(bits\)") as e:
        partition_to_onnx(fn)
    assert isinstance(e.value, UnsupportedError)


def test_split_runs_what_onnx_does_not_take_on_the_host() -> None:
    """``split`` exports the runs a toolchain takes and keeps the others on the host; running the parts in
    order computes the whole function (here: BitCast, which has no ONNX form, between two Adds)."""
    fn = Function("mixed")
    x = fn.add_input("x", TensorType(ElemKind.FLOAT32, (4,)))
    a = fn.create("Add", [x, x], {}, name="a")
    b = fn.create("BitCast", [a.result], {"to": ElemKind.INT32}, name="b")
    c = fn.create("Add", [b.result, b.result], {}, name="c")
    fn.set_output("y", c.result)
    parts = split(fn, lambda n: True)
    assert [type(p) for p in parts] == [OnnxPart, HostPart, OnnxPart]

    class Ort:
        def __init__(self, part: OnnxPart) -> None:
            self.part, self.input_names, self.output_names = part, part.input_names, part.output_names

        def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return _onnxruntime(self.part.model, dict(feeds))

    xs = np.array([1.5, -2.0, 0.0, 3.25], np.float32)
    out = run_parts(fn, [Ort(p) if isinstance(p, OnnxPart) else p for p in parts], {"x": xs})
    np.testing.assert_array_equal(out["y"], (xs + xs).view(np.int32) * 2)


def test_glow_partition_export_writes_one_model_per_partition(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    r = glow(["partition", "zoo:squeezenet", "--devices", "cpu:3@6MiB", "--random-weights", "--export", str(out)])
    assert r.returncode == 0, r.stderr
    assert f"3 partition(s) exported as ONNX to {out}" in r.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["partition"] for e in manifest["partitions"]] == ["p0", "p1", "p2"]
    produced: set[str] = set()
    for entry in manifest["partitions"]:
        model = onnx.load(str(out / entry["file"]))
        onnx.checker.check_model(model, full_check=True)
        assert entry["backend"] == "cpu" and entry["device"].startswith("cpu")
        assert [i["name"] for i in entry["inputs"]] == [i.name for i in model.graph.input]
        # every input is the model's or an earlier partition's output
        assert all(i["name"] == "data_0" or i["name"] in produced for i in entry["inputs"]), entry
        produced |= {o["name"] for o in entry["outputs"]}
    returned = [o["model_output"] for e in manifest["partitions"] for o in e["outputs"] if "model_output" in o]
    assert returned == ["softmaxout_1"]


def test_glow_partition_export_into_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = glow(["partition", "zoo:squeezenet", "--devices", "cpu:1", "--random-weights", "--export", str(blocker)])
    assert r.returncode != 0 and "cannot create" in r.stderr and "Traceback" not in r.stderr


def test_bad_input_is_a_clear_error() -> None:
    from glow_core.errors import InputError

    with pytest.raises(InputError, match="takes a glow graph-IR Function, got ModelProto"):
        partition_to_onnx(onnx.ModelProto())  # type: ignore[arg-type]
    fn, other = import_function(yolov8n_like(size=32)), import_function(yolov8n_like(size=32))
    with pytest.raises(InputError, match=r"1 of the nodes to export are not in the function"):
        partition_to_onnx(fn, [fn.nodes[0], other.nodes[1]])
