"""Hostile models that used to crash the process (SIGSEGV, heap corruption) or a native library."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from onnx import helper

import glow_core
from tests.robustness.util import F, model

pytestmark = pytest.mark.robustness


def test_duplicate_graph_output_keeps_every_buffer_alive_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph output listed twice has two io regions: both buffers (handed to the caller, ``symio.py``) must
    live while native code writes them."""
    pytest.importorskip("glow_backend_cpu")
    from glow_backend_cpu import runtime, symio

    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [256, 256])], [("y", F, [256, 256])] * 2)
    net = glow_core.compile(m, backend="cpu")
    made: list[weakref.ref] = []
    real_mapped, real_run = symio._mapped, runtime.CpuExecutable._run

    def recording_mapped(nbytes):  # type: ignore[no-untyped-def]
        a = real_mapped(nbytes)
        made.append(weakref.ref(a))
        return a

    dead: list[int] = []

    def checking_run(self):  # type: ignore[no-untyped-def]
        gc.collect()
        dead.extend(k for k, r in enumerate(made) if r() is None)
        return real_run(self)

    monkeypatch.setattr(symio, "_mapped", recording_mapped)
    monkeypatch.setattr(runtime.CpuExecutable, "_run", checking_run)
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    out = net.run({"x": x})
    assert len(made) >= 2, "a buffer per output region"
    assert not dead, "an output buffer was freed before the native run wrote it"
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_duplicate_graph_output_runs_like_onnxruntime(backend: str) -> None:
    if backend == "cpu":
        pytest.importorskip("glow_backend_cpu")
    m = model([helper.make_node("Neg", ["x"], ["y"])], [("x", F, [64, 64])], [("y", F, [64, 64])] * 2)
    from glow_core import onnx_backend

    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    y1, y2 = onnx_backend.prepare(m, backend=backend).run([x])
    np.testing.assert_array_equal(y1, -x)
    np.testing.assert_array_equal(y2, -x)


_LAYERNORM_HUGE_AXIS = """
import glow_core
from onnx import helper, TensorProto as T
from glow_core.errors import GlowError
vi = lambda n, s: helper.make_tensor_value_info(n, T.FLOAT, s)
node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "i"], axis=10**12)
g = helper.make_graph([node], "g", [vi("x", [2, 3]), vi("s", [3]), vi("b", [3])], [vi(o, [2, 3]) for o in "ymi"])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
try:
    glow_core.compile(m)
except GlowError as e:
    print("GLOWERROR", e)
"""


def test_layernorm_huge_axis_is_refused_before_onnx_shape_inference() -> None:
    """onnx's shape inference segfaults on this model: glow must refuse it before calling it."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _LAYERNORM_HUGE_AXIS], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the process died (rc {r.returncode}): {r.stderr[-2000:]}"
    assert "GLOWERROR" in r.stdout and "1000000000000" in r.stdout and "LayerNormalization" in r.stdout


@pytest.mark.parametrize("op, attrs, rank, bad", [
    ("LayerNormalization", {"axis": 10**12}, 2, "10000"),
    ("Softmax", {"axis": -3}, 2, "-3"),
    ("Flatten", {"axis": 3}, 2, "3"),
    ("Transpose", {"perm": [0, 0]}, 2, "permutation"),
    ("ReduceSum", {"axes": [0, 5]}, 3, "5"),
])
def test_axis_table_refuses_out_of_range_attributes(op: str, attrs: dict, rank: int, bad: str) -> None:
    from glow_core.errors import ModelError
    from glow_core.importer.precheck import check_axes

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    with pytest.raises(ModelError, match=bad):
        check_axes(node, lambda name: rank, f"ONNX node 'n' ({op})")
    ok = {k: ([rank - 1, 0] if k == "perm" else ([-1] if isinstance(v, list) else -1)) for k, v in attrs.items()}
    if op == "Transpose":
        ok = {"perm": list(reversed(range(rank)))}
    check_axes(helper.make_node(op, ["x"], ["y"], **ok), lambda name: rank, "n")


@pytest.mark.parametrize("field, needle", [("graph", b"GRAPHZ"), ("node", b"NODEZZ"), ("producer", b"PRODUCERZ")])
def test_invalid_utf8_in_string_fields_is_a_model_error(tmp_path, field: str, needle: bytes) -> None:
    from glow_core.errors import ModelError

    m = model([helper.make_node("Relu", ["x"], ["y"], name="NODEZZ")], [("x", F, [2])], [("y", F, [2])])
    m.graph.name = "GRAPHZ"
    m.producer_name = "PRODUCERZ"
    raw = m.SerializeToString().replace(needle, needle[:2] + b"\xff\xfe" + needle[4:])
    path = tmp_path / "bad.onnx"
    path.write_bytes(raw)
    with pytest.raises(ModelError, match="not valid UTF-8"):
        glow_core.compile(str(path))


def _external(tmp_path, entries: dict[str, str]):  # type: ignore[no-untyped-def]
    """``y = x + w`` saved in ``tmp_path/m`` with ``w`` external (the data file is the caller's)."""
    from onnx import TensorProto, numpy_helper

    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in entries.items():
        e = w.external_data.add()
        e.key, e.value = k, v
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [2, 3])], [("y", F, [2, 3])], [w])
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "model.onnx").write_bytes(m.SerializeToString())
    return d


def test_external_data_through_a_hard_link_is_refused(tmp_path) -> None:
    import os

    from glow_core.errors import ModelError

    secret = tmp_path / "outside.bin"
    secret.write_bytes(np.arange(6, dtype=np.float32).tobytes())
    d = _external(tmp_path, {"location": "w.bin", "length": "24"})
    os.link(secret, d / "w.bin")
    with pytest.raises(ModelError, match="hard links"):
        glow_core.compile(str(d / "model.onnx"))


@pytest.mark.parametrize("offset, length", [("-1", "24"), (str(2**62), "24"), (str(2**64), "24"), ("0", "-1"),
                                            ("0", str(2**62)), ("0", str(2**64)), ("8", "24")])
def test_external_data_offset_and_length_are_bounds_checked(tmp_path, offset: str, length: str) -> None:
    from glow_core.errors import ModelError

    d = _external(tmp_path, {"location": "w.bin", "offset": offset, "length": length})
    (d / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    with pytest.raises(ModelError, match="fall outside 'w.bin' \\(24 bytes\\)"):
        glow_core.compile(str(d / "model.onnx"))


def test_external_data_location_with_a_nul_byte_is_refused(tmp_path) -> None:
    from glow_core.errors import ModelError

    d = _external(tmp_path, {"location": "w.bin\0x", "length": "24"})
    with pytest.raises(ModelError, match="not a relative file name"):
        glow_core.compile(str(d / "model.onnx"))


@pytest.mark.parametrize("op, attr", [("ArgMax", "keepdims"), ("ReduceMax", "keepdims"), ("ArgMin", "select_last_index")])
def test_flag_attributes_outside_0_1_are_refused(op: str, attr: str) -> None:
    """keepdims = 10**12 made glow keep the dims (truthy) where onnx and onnxruntime drop them (== 1 test)."""
    from glow_core.errors import ModelError

    m = model([helper.make_node(op, ["x"], ["y"], **{attr: 10**12})], [("x", F, [2, 3])], [("y", F, ["a", "b"])])
    m.graph.output[0].type.tensor_type.elem_type = 7 if op.startswith("Arg") else 1
    with pytest.raises(ModelError, match=rf"attribute '{attr}' = 1000000000000 must be 0 or 1"):
        glow_core.compile(m)
