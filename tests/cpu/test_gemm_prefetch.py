"""The GEMM's prefetch of the next weight block (``GemmPlan.prefetch_b``, ``emit/gemm.py``).

A product of a few rows with a constant weight streams each packed B block once per M panel; its calls
prefetch the block after it into L2, each a share, so the first panel of the next block does not wait for
memory. A prefetch never changes a result: these tests check where the prefetches are emitted and how
much each call fetches (the speed is measured by benchmarks, never here).
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("llvmlite")

import glow_core
from glow_backend_cpu.emit.gemm import PREFETCH_B_PANELS, GemmPlan
from glow_backend_cpu.emit.vecops import geometry


def _plan(m: int, lanes: int = 16, symbolic: bool = False, on: bool = True) -> GemmPlan:
    plan = GemmPlan(geo=geometry(lanes), BG=1, M=m, N=256, K=512, a_ptr=None, a_packed=False,  # type: ignore[arg-type]
                    c_ptr=None, ldc=256, prefetch_b=on)  # type: ignore[arg-type]
    if symbolic:
        plan.m_valid = object()  # type: ignore[assignment]
    return plan


@pytest.mark.parametrize("m, rate", [(1, 0), (2, 4), (6, 4), (7, 2), (16, 2), (18, 2), (19, 1), (48, 1),
                                     (6 * PREFETCH_B_PANELS, 1), (6 * PREFETCH_B_PANELS + 1, 0)])
def test_each_call_fetches_its_share_of_the_next_block(m: int, rate: int) -> None:
    """AVX-512: a packed B row is 64 floats, 4 lines; M panels of 6 rows share them (at least a line each)."""
    plan = _plan(m)
    assert plan.b_row_lines == 4
    assert plan.b_prefetch_rate == rate
    # every line of the next block is fetched by some panel's call
    if rate:
        covered = {(mp * rate + j) % 4 for mp in range(plan.panels) for j in range(rate)}
        assert covered == {0, 1, 2, 3}
    assert plan.prefetch_lines == rate * plan.unroll


def test_rate_without_the_option_with_avx2_and_with_a_symbolic_m() -> None:
    assert _plan(16, on=False).b_prefetch_rate == 0
    assert _plan(16, lanes=8).b_row_lines == 1 and _plan(16, lanes=8).b_prefetch_rate == 1
    assert _plan(6 * PREFETCH_B_PANELS * 4, symbolic=True).b_prefetch_rate == 1  # a line: the panels are not known


def _matmul(m: int, seed: int = 3) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((384, 320)) * 0.05).astype(np.float32)
    x = rng.standard_normal((m, 384)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, 384])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 320])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), x, w


def _ukernel_prefetches(model: onnx.ModelProto) -> int:
    from glow_backend_cpu.codegen import generate, module_text
    from glow_backend_cpu.target import host_codegen
    from glow_core.lircompiler import build_lir

    net = glow_core.compile(model, "cpu", options={"cache": False})
    module, _ = generate(host_codegen(), build_lir(net.function))
    text = module_text(module)
    bodies = re.findall(r'define internal void @"?glow\.uk\.[^\n]*\n(.*?)\n}', text, re.S)
    assert bodies, "no GEMM micro-kernel in the module"
    # the prefetches of the k loop (B's next block); a shared micro-kernel also holds the residual's, under
    # its flag (gemm_merge.py), in the entry block
    loops = [blk for body in bodies for blk in re.split(r"\n(?=[\w.\"]+:)", body) if blk.startswith("kmain.body:")]
    return sum(blk.count("@\"llvm.prefetch") for blk in loops)


def test_a_few_rows_prefetch_the_next_block_and_one_row_does_not() -> None:
    assert _ukernel_prefetches(_matmul(16)[0]) > 0
    assert _ukernel_prefetches(_matmul(1)[0]) == 0


@pytest.mark.parametrize("m", [2, 16, 40])
def test_results_with_the_prefetch(m: int) -> None:
    model, x, w = _matmul(m, seed=m)
    y = glow_core.compile(model, "cpu", threads=2).run({"x": x})["y"]
    ref = x.astype(np.float64) @ w.astype(np.float64)
    bound = 1e-4 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64))
    assert np.all(np.abs(y - ref) <= bound)
