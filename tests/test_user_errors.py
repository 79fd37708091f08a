"""The messages a new user meets (issue 31), each naming its cause: index errors name the ONNX node, its op
and the input; random inputs stay inside Gather tables; --input files with the wrong rank or corrupt
contents; stale text; the timings of --devices runs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core import zoo
from glow_core.errors import IndexRangeError
from tests.cliutil import glow

ROOT = Path(__file__).resolve().parents[1]


def bert_like_model() -> onnx.ModelProto:
    """BERT's embeddings in small: input_ids index a 30-row table, token_type_ids a 2-row one (through a Cast)."""
    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal((30, 4)).astype(np.float32), "word_embeddings"),
             numpy_helper.from_array(r.standard_normal((2, 4)).astype(np.float32), "token_type_table")]
    nodes = [helper.make_node("Gather", ["word_embeddings", "input_ids"], ["w"], name="word_emb"),
             helper.make_node("Cast", ["token_type_ids"], ["tt64"], name="cast_tt", to=TensorProto.INT64),
             helper.make_node("Gather", ["token_type_table", "tt64"], ["t"], name="token_type_embeddings"),
             helper.make_node("Add", ["w", "t"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "bertlike",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 6]),
                               helper.make_tensor_value_info("token_type_ids", TensorProto.INT32, [1, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def images_model() -> onnx.ModelProto:
    """``out = Relu(images)`` on images float32[1, 3, H, W] (symbolic height and width)."""
    graph = helper.make_graph([helper.make_node("Relu", ["images"], ["out"], name="relu")], "images",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, "H", "W"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BAD_FEEDS = {"input_ids": np.arange(6, dtype=np.int64).reshape(1, 6),
             "token_type_ids": np.array([[0, 1, 5, 1, 0, 9]], np.int32)}
NAMED = ["ONNX node 'token_type_embeddings' (Gather)", "input 'token_type_ids'", "5, 9", "[-2, 2)"]


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_an_index_out_of_range_names_the_node_and_the_input(backend: str) -> None:
    pytest.importorskip(f"glow_backend_{backend}")
    net = glow_core.compile(bert_like_model(), backend)
    with pytest.raises(IndexRangeError) as e:
        net.run(BAD_FEEDS)
    for words in NAMED:
        assert words in str(e.value), str(e.value)
    assert "--input-range token_type_ids=0:2" in e.value.hint
    good = {**BAD_FEEDS, "token_type_ids": np.zeros((1, 6), np.int32)}
    assert net.run(good)["y"].shape == (1, 6, 4)  # the error flag was cleared


def test_computed_indices_name_the_node_and_where_they_come_from() -> None:
    model = bert_like_model()
    model.graph.node.insert(2, helper.make_node("Add", ["tt64", "one"], ["tt_shift"], name="shift"))
    model.graph.node[3].input[1] = "tt_shift"
    model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "one"))
    for backend in ("cpu", "interpreter"):
        with pytest.raises(IndexRangeError, match="ONNX node 'token_type_embeddings' \\(Gather\\): its indices come "
                                                  "from input 'token_type_ids'"):
            glow_core.compile(model, backend).run({**BAD_FEEDS, "token_type_ids": np.ones((1, 6), np.int32)})


def test_bundles_name_the_node_too(tmp_path: Path) -> None:
    pytest.importorskip("glow_backend_cpu")
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to link the bundle")
    from glow_core.bundle import write_bundle

    write_bundle(bert_like_model(), "cpu", tmp_path, name="bert")
    assert "bert_error_node" in (tmp_path / "bert.h").read_text()
    with pytest.raises(IndexRangeError, match="ONNX node 'token_type_embeddings' \\(Gather\\): its indices come from "
                                              "input 'token_type_ids'") as e:
        glow_core.load_bundle(tmp_path).run(BAD_FEEDS)
    assert "token_type_ids" in e.value.hint


def test_random_inputs_stay_inside_the_gather_tables(tmp_path: Path) -> None:
    model = bert_like_model()
    assert zoo.index_ranges(model) == {"input_ids": (0, 30), "token_type_ids": (0, 2)}
    feeds = zoo.model_feeds(model, seed=3)
    assert feeds["token_type_ids"].max() <= 1 and feeds["token_type_ids"].dtype == np.int32
    onnx.save(model, str(tmp_path / "bert.onnx"))
    r = glow(["run", "bert.onnx", "--backend", "interpreter"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input token_type_ids: int32[1,6]  random (seed 0) in [0, 2)" in r.stdout
    r = glow(["run", "bert.onnx", "-b", "interpreter", "--input-range", "token_type_ids=0:5", "--seed", "1"],
             cwd=tmp_path)
    assert r.returncode == 1 and "ONNX node 'token_type_embeddings' (Gather)" in r.stderr, r.stderr
    assert "--input-range token_type_ids=0:2" in r.stderr
    bad = glow(["run", "bert.onnx", "-b", "interpreter", "--input-range", "token_type_ids=3:1"], cwd=tmp_path)
    assert bad.returncode == 2 and "NAME=LO:HI with numbers LO < HI" in bad.stderr


def test_an_input_file_of_the_wrong_rank_names_the_file_not_input_shape(tmp_path: Path) -> None:
    onnx.save(images_model(), str(tmp_path / "m.onnx"))
    np.save(tmp_path / "x.npy", np.zeros((3, 320, 320), np.float32))
    r = glow(["run", "m.onnx", "-b", "interpreter", "--input", "images=x.npy"], cwd=tmp_path)
    assert r.returncode == 1
    assert ("input 'images' from 'x.npy' has shape [3,320,320] (rank 3); the model expects float32[1,3,H,W] (rank 4)"
            in r.stderr), r.stderr
    assert "--input-shape" not in r.stderr
    shaped = glow(["run", "m.onnx", "-b", "interpreter", "--input", "images=x.npy", "--input-shape",
                   "images=1,3,8,8"], cwd=tmp_path)
    assert shaped.returncode == 1 and "--input-shape images=... fixed that shape" in shaped.stderr, shaped.stderr


@pytest.mark.parametrize("content, words", [(b"hello, not an array", "is not a numpy .npy or .npz file"),
                                            (None, "is truncated or corrupt")])
def test_a_corrupt_npy_file_gets_a_clear_message(tmp_path: Path, content: bytes | None, words: str) -> None:
    onnx.save(images_model(), str(tmp_path / "m.onnx"))
    if content is None:
        np.save(tmp_path / "x.npy", np.zeros((1, 3, 4, 4), np.float32))
        content = (tmp_path / "x.npy").read_bytes()[:60]
    (tmp_path / "x.npy").write_bytes(content)
    r = glow(["run", "m.onnx", "-b", "interpreter", "--input", "images=x.npy"], cwd=tmp_path)
    assert r.returncode == 1 and words in r.stderr and "x.npy" in r.stderr, r.stderr
    assert "pickle" not in r.stderr


def test_no_stale_not_available_yet() -> None:
    r = glow(["profile", "--help"])
    assert r.returncode == 0 and "not available yet" not in " ".join(r.stdout.split())
    assert "--quantize PROFILE.json" in r.stdout
    readme = (ROOT / "README.md").read_text()
    assert not re.search(r"not available yet|conversion to int8 comes next", readme)


def test_device_runs_report_import_and_optimize_times() -> None:
    pytest.importorskip("glow_backend_cpu")
    r = glow(["run", "zoo:digits", "--devices", "cpu:1"])
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("compile"))
    assert "import 0.0 ms" not in line and "optimize 0.0 ms" not in line, line


def test_glow_run_defaults_to_the_fastest_backend() -> None:
    pytest.importorskip("glow_backend_cpu")
    r = glow(["run", "zoo:digits"])
    assert r.returncode == 0, r.stderr
    assert "backend  cpu " in r.stdout and "accuracy on the 360 held-out digits" in r.stdout
    c = glow(["compile", "zoo:digits"])
    assert c.returncode == 0 and "for cpu:" in c.stdout, c.stdout + c.stderr
