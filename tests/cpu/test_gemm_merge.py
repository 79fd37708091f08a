"""Micro-kernel variants that share one function (``emit/gemm_merge.py``).

Variants that differ only in B's row stride or in starting from a residual's block are one micro-kernel
called through thunks that set those in the flags. These tests check that they are shared and that sharing
changes no result (bit for bit, against the same network built with a function per variant).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("llvmlite")

import glow_core
from glow_backend_cpu.emit import gemm
from glow_backend_cpu.emit.gemm_merge import FLAG_C_SRC, LDB_SHIFT, shared_spec, static_flags
from glow_backend_cpu.emit.vecops import geometry


def _block(rng: np.random.Generator) -> onnx.ModelProto:
    """Convolutions whose GEMMs read B with row strides of 64 and 80 floats (a 1x1's packed rows, a 3x3's
    im2col tile), one of them adding a residual in the GEMM (c_src), each followed by a relu."""
    def w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [w("w1", (80, 64, 1, 1)), w("b1", (80,)), w("w2", (64, 80, 1, 1)), w("b2", (64,)),
             w("w3", (64, 64, 3, 3)), w("b3", (64,))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]), helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c3"], ["y"])]
    g = helper.make_graph(nodes, "blk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 20, 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 20, 20])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _ukernels(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """(shared or plain micro-kernels, thunks) defined in the module of ``model``."""
    from glow_backend_cpu.codegen import generate, module_text
    from glow_backend_cpu.target import host_codegen
    from glow_core.lircompiler import build_lir

    net = glow_core.compile(model, "cpu", options={"cache": False})
    module, _ = generate(host_codegen(), build_lir(net.function))
    names = re.findall(r'^define internal void @"?(glow\.uk\.[^"(]*)', module_text(module), re.M)
    return [n for n in names if ".use" not in n], [n for n in names if ".use" in n]


def test_the_flags_carry_ldb_and_c_src() -> None:
    geo = geometry(16)
    s = gemm.UKernel(lanes=16, rows=6, nvec=4, tail=16, a_packed=True, mr_panel=geo.mr, ldb=80, b_align=64,
                     bias="row", act="relu", c_src=True)
    shared = shared_spec(s)
    assert shared is not None and shared.dynamic and shared.ldb == 0 and not shared.c_src
    assert shared == shared_spec(gemm.UKernel(**{**s.__dict__, "ldb": 64, "c_src": False}))  # one function
    assert static_flags(s) == (80 << LDB_SHIFT) | FLAG_C_SRC and static_flags(s) & 3 == 0  # bits 0, 1: K block
    assert shared_spec(shared) is None  # the shared kernel is built as it is
    assert shared_spec(gemm.UKernel(**{**s.__dict__, "taps": (0, 1), "tap_stride": 4})) is None


def test_strides_and_residuals_share_a_micro_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _block(np.random.default_rng(0))
    specs: list[int] = []
    real = gemm.flag_thunk

    def spy(mod: object, target: object, bits: int) -> object:
        specs.append(bits)
        return real(mod, target, bits)  # type: ignore[arg-type]

    monkeypatch.setattr(gemm, "flag_thunk", spy)
    kernels, thunks = _ukernels(model)
    assert thunks and len(kernels) < len(thunks), (kernels, thunks)
    assert {b >> LDB_SHIFT for b in specs} == {64, 80} and {b & FLAG_C_SRC for b in specs} == {0, FLAG_C_SRC}
    # a kernel of 6 rows and 4 vectors serves every stride and both starts
    assert [k for k in kernels if k.startswith("glow.uk.6x4x16.t16.p")] == ["glow.uk.6x4x16.t16.p"], kernels


def test_sharing_changes_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    model = _block(rng)
    x = rng.standard_normal((1, 64, 20, 20)).astype(np.float32)
    shared = glow_core.compile(model, "cpu", options={"cache": False}).run({"x": x})["y"]
    monkeypatch.setattr(gemm, "shared_spec", lambda s: None)
    kernels, thunks = _ukernels(model)
    assert not thunks and kernels  # a function per variant
    plain = glow_core.compile(model, "cpu", options={"cache": False}).run({"x": x})["y"]
    np.testing.assert_array_equal(shared, plain)
    ref = glow_core.compile(model, "interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(shared, ref, rtol=1e-4, atol=1e-4)
