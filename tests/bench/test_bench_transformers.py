"""scripts/bench_transformers.py and the graphs it writes (scripts/transformer_graphs.py), at toy sizes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.bench import load_script

bench = load_script("bench_transformers")
tg = sys.modules["transformer_graphs"]


def test_the_graphs_compute_what_onnxruntime_computes() -> None:
    """BERT at two lengths and batch 2, ViT, and GPT-2's prefill then a decode step with the cache it returned:
    glow (one compiled network each, symbolic dims) and onnxruntime agree."""
    ort = pytest.importorskip("onnxruntime")
    import glow_core

    c = tg.Config.tiny()
    model = tg.bert(c)
    sess, net = ort.InferenceSession(model.SerializeToString()), glow_core.compile(model, "cpu")
    for length, batch in ((5, 1), (9, 2)):
        feeds = bench.bert_feeds(length, c.vocab)
        feeds = {k: np.repeat(v, batch, axis=0) for k, v in feeds.items()}
        np.testing.assert_allclose(net.run(feeds)["last_hidden_state"], sess.run(None, feeds)[0], atol=2e-5)
    gc = bench.configs(True)["gpt2"]
    model = tg.gpt2(gc)
    sess, net = ort.InferenceSession(model.SerializeToString()), glow_core.compile(model, "cpu")
    ids, past = np.array([[3, 14, 15, 92]]), bench.empty_past(gc)
    for _ in range(2):
        feeds = bench.gpt2_feeds(ids, past, gc)
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        out = net.run(feeds)
        np.testing.assert_allclose(out["logits"], ref["logits"], atol=2e-5)
        past = [ref[f"present.{i}.{kv}"] for i in range(gc.layers) for kv in ("key", "value")]
        assert past[0].shape[2] == feeds["position_ids"][0, -1] + 1
        ids = np.array([[int(np.argmax(ref["logits"][0, -1]))]])


def test_every_task_runs_on_each_engine_in_its_own_process(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    out = tmp_path / "t.md"
    assert bench.main(["--tiny", "--engines", "glow,onnxruntime", "--cache", str(tmp_path), "--lengths", "4,8",
                       "--prompt", "3", "--new-tokens", "3", "--past", "8", "--prefill", "6", "--runs", "1", "--out", str(out)]) == 0
    text = out.read_text()
    for task in bench.TASKS:
        assert f"### {task}" in text
    assert "not run" not in text, text
    sweep = text.split("### bert-sweep")[1].split("###")[0]
    assert "| 4 |" in sweep and "| 8 |" in sweep
    assert "| glow/onnxruntime |" in sweep and "glow/openvino" not in sweep  # (a ratio per peer run)
    glow_row = next(line for line in sweep.splitlines() if line.startswith("| glow |"))
    # glow compiles once for every sequence length (symbolic dims: docs/dynamic-shapes.md)
    assert glow_row.split("|")[-2].strip() == "1"
    gen = text.split("### gpt2-generate")[1].split("###")[0]
    glow_gen = next(line for line in gen.splitlines() if line.startswith("| glow |"))
    assert glow_gen.split("|")[6].strip() == "2"  # the prefill and the decode step (whatever the cache length)


def test_precompile_moves_the_generation_compiles_before_the_loop() -> None:
    """DynamicNetwork.precompile: the prefill and the decode networks compiled before the loop (2 compiles),
    none in it, the answers those of a network that compiled on its first feeds."""
    import glow_core
    from glow_core.errors import InputError

    gc = bench.configs(True)["gpt2"]
    model = tg.gpt2(gc)
    net, lazy = glow_core.compile(model, "cpu"), glow_core.compile(model, "cpu")
    prompt = np.array([[3, 14, 15, 92]])
    prefill = {n: a.shape for n, a in bench.gpt2_feeds(prompt, bench.empty_past(gc), gc).items()}
    decode = {n: a.shape for n, a in bench.gpt2_feeds(prompt[:, :1], bench.empty_past(gc, 4), gc).items()}
    net.precompile(prefill)
    net.precompile(decode)
    assert net.specializations_compiled == 2
    net.precompile(decode)  # compiled already: nothing new
    assert net.specializations_compiled == 2
    ids, past = prompt, bench.empty_past(gc)
    for _ in range(3):
        feeds = bench.gpt2_feeds(ids, past, gc)
        out, ref = net.run(feeds), lazy.run(feeds)
        np.testing.assert_array_equal(out["logits"], ref["logits"])
        ids = out["logits"][:, -1:].argmax(-1)
        past = [out[f"present.{i}.{kv}"] for i in range(gc.layers) for kv in ("key", "value")]
    assert net.specializations_compiled == 2
    with pytest.raises(InputError, match="unknown input"):
        net.precompile({**decode, "nope": (1,)})
    with pytest.raises(InputError, match="negative"):
        net.precompile({**decode, "input_ids": (1, -1)})
