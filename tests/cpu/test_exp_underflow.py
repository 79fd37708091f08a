"""``ew_math.exp_f32`` never underflows into the denormals where its result is 0.

On x86 every float operation whose result underflows (tiny and inexact, with flush-to-zero off, as glow
leaves it: the spec's results keep their denormals) takes a microcode assist of about a hundred cycles. A
softmax over scores masked with -1e4 (BERT's attention mask) computed ``exp(-1e4)`` as a normal number times
2^-75 times 2^-75 for every masked key: attention ran 2.6x slower with a padded sentence than without. The
test reads the SSE status register's underflow flag around the vectorized exp, so it does not depend on
speed: the flag must stay clear where the result is exactly 0, and (the probe can fail) be raised where the
result is a genuine denormal.
"""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

from glow_backend_cpu.emit import ew_math
from glow_backend_cpu.helpers import F32, I32, I64, for_range, vload, vstore

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="reads the x86 SSE status register (MXCSR)")

LANES = 8  # AVX2 and AVX-512 machines alike
UNDERFLOW = 1 << 4  # MXCSR's UE flag
FLAGS = 0x3F  # IE DE ZE OE UE PE


def _probe_module() -> str:
    """``i32 probe(float* x, float* y, i64 nvec)``: clears the status flags, ``y = exp(x)`` vector by vector,
    returns the flags raised."""
    mod = ir.Module("exp_probe")
    fp = F32.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(I32, [fp, fp, I64]), "probe")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    i8p = ir.IntType(8).as_pointer()
    st = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]), "llvm.x86.sse.stmxcsr")
    ld = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]), "llvm.x86.sse.ldmxcsr")
    slot = b.alloca(I32)
    raw = b.bitcast(slot, i8p)
    b.call(st, [raw])
    b.store(b.and_(b.load(slot), ir.Constant(I32, ~FLAGS & 0xFFFFFFFF)), slot)
    b.call(ld, [raw])
    x, y, nvec = fn.args
    with for_range(b, 0, nvec) as i:
        at = b.mul(i, ir.Constant(I64, LANES))
        vstore(b, ew_math.exp_f32(b, vload(b, x, at, LANES, 4)), y, at, 4)
    b.call(st, [raw])
    b.ret(b.and_(b.load(slot), ir.Constant(I32, FLAGS)))
    return str(mod)


@pytest.fixture(scope="module")
def probe():  # type: ignore[no-untyped-def]
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten())
    module = llvm.parse_assembly(_probe_module())
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("probe"))

    def run(values: list[float]) -> tuple[np.ndarray, int]:
        x = np.resize(np.array(values, np.float32), -(-len(values) // LANES) * LANES)
        out = np.empty_like(x)
        flags = fn(x.ctypes.data, out.ctypes.data, x.size // LANES)
        return out[:len(values)], flags

    run.engine = engine  # type: ignore[attr-defined]  # keeps the code alive
    return run


def test_exp_of_very_negative_values_is_zero_without_underflow(probe) -> None:  # type: ignore[no-untyped-def]
    values = [-1e4, -104.0, -200.0, -3.4e38, float("-inf"), -1e30, -10000.5, -150.0]
    y, flags = probe(values)
    assert np.array_equal(y, np.zeros(len(values), np.float32))
    assert not flags & UNDERFLOW, f"exp underflowed on its way to 0 (MXCSR flags {flags:#x})"


def test_the_probe_sees_a_genuine_denormal_result(probe) -> None:  # type: ignore[no-untyped-def]
    y, flags = probe([-95.0] * LANES)
    want = np.float32(np.exp(np.float64(-95.0)))
    assert 0 < want < np.finfo(np.float32).tiny  # a denormal
    assert np.all(np.abs(y.view(np.int32) - want.view(np.int32)) <= 1)
    assert flags & UNDERFLOW


def test_normal_results_raise_no_underflow(probe) -> None:  # type: ignore[no-untyped-def]
    y, flags = probe(list(np.linspace(-80, 80, 64)))
    assert np.all(np.isfinite(y)) and np.all(y > 0)
    assert not flags & UNDERFLOW
