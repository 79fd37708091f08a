"""The glue compiled once per process (``glow_backend_cpu/glue.py``): every network links the same object
code for its worker loop, shares and error functions, and each still has its own state."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("llvmlite")

import glow_core
from glow_backend_cpu.codegen import generate, module_text
from glow_backend_cpu.glue import glue_module, network_glue
from glow_backend_cpu.target import host_codegen
from glow_core.errors import ExecutionError
from glow_core.lircompiler import build_lir


def _model(rows: int) -> object:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 300])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 300])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [rows, 300])
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=0), helper.make_node("Tanh", ["x"], ["z"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x, i], [y, z]), opset_imports=[helper.make_opsetid("", 17)])


def _defined(text: str) -> set[str]:
    return set(re.findall(r'^define [^@]*@"?([\w.]+)"?\(', text, re.M))


def test_the_network_module_leaves_the_glue_out_and_the_glue_refers_to_it_by_name() -> None:
    net = glow_core.compile(_model(8), "cpu", options={"cache": False})
    module, _ = generate(host_codegen(), build_lir(net.function), glue=False)
    own = _defined(module_text(module))
    assert "glow_main" in own and not own & {"glow_worker", "glow_run", "glow_share_first", "glow_get_error"}
    glue = str(glue_module(host_codegen()))
    assert _defined(glue) >= {"glow_worker", "glow_run", "glow_stop", "glow_share_first", "glow_share_next",
                              "glow_get_error", "glow_clear_error"}
    for name in ("glow_main", "glow_error", "glow_share_claims", "glow_share_done"):  # the network's own
        assert re.search(rf'^(declare .*@"{name}"|@"{name}" = external global)', glue, re.M), name
    whole, _ = generate(host_codegen(), build_lir(net.function))  # a bundle's module holds its glue
    assert "glow_worker" in _defined(module_text(whole))


def test_one_object_per_process_and_setting() -> None:
    cg = host_codegen()
    assert network_glue(cg) is network_glue(cg)
    a = glow_core.compile(_model(8), "cpu", options={"cache": False})
    b = glow_core.compile(_model(16), "cpu", options={"cache": False})
    assert a.executable.library.objects[-1] is b.executable.library.objects[-1] is network_glue(cg)
    # a profiled network links the same glue: it takes other threads' shares as a normal run does
    p = glow_core.compile(_model(8), "cpu", threads=2, options={"cache": False, "profile": True})
    assert p.executable.library.objects[-1] is network_glue(cg)


def test_each_network_keeps_its_own_error_flag_and_share_tables() -> None:
    rng = np.random.default_rng(0)
    nets = [glow_core.compile(_model(r), "cpu", threads=2, options={"cache": False, "parallel_threshold": 0})
            for r in (64, 96)]
    xs = [rng.standard_normal((r, 300)).astype(np.float32) for r in (64, 96)]
    good = np.array([0, 5, 63], np.int64)
    with pytest.raises(ExecutionError, match="out of range"):
        nets[0].run({"x": xs[0], "i": np.array([0, 64, 1], np.int64)})
    out = nets[1].run({"x": xs[1], "i": good})  # the other network's flag is its own
    np.testing.assert_array_equal(out["y"], xs[1][good])
    errors: list[BaseException] = []

    def loop(k: int) -> None:  # both networks' threads share the glue's code, not its tables
        try:
            for _ in range(30):
                o = nets[k].run({"x": xs[k], "i": good})
                np.testing.assert_array_equal(o["y"], xs[k][good])
                np.testing.assert_allclose(o["z"], np.tanh(xs[k]), rtol=1e-5, atol=1e-6)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
