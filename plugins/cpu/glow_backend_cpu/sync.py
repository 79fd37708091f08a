"""Native synchronization emitted into every module: the spin barrier and the error flag.

``glow_barrier(i64 nthreads)`` is a sense-reversing barrier on two module
globals (an arrival counter and a generation number): the last thread to
arrive resets the counter and bumps the generation; the others spin on the
generation with ``pause``, and after :data:`SPINS_BEFORE_YIELD` rounds call
``sched_yield()`` on every round, so a machine with more runnable threads than
cores (oversubscription) does not livelock. One thread returns at once.

``glow_error`` is a flag kernels set (``set_error``) when an input is out of
range at run time (an index beyond its axis); they clamp and go on, so the
process never reads outside its memory, and the runtime raises after the run.
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.helpers import I32, I64, VOID, i64, intrinsic

SPINS_BEFORE_YIELD = 4000
ERROR_GLOBAL = "glow_error"


def _global(module: ir.Module, name: str, t: ir.Type) -> ir.GlobalVariable:
    g = module.globals.get(name)
    if g is None:
        g = ir.GlobalVariable(module, t, name=name)
        g.initializer = ir.Constant(t, 0)
        g.linkage = "internal"
        g.align = 64
    return g  # type: ignore[no-any-return]


def emit_barrier_function(module: ir.Module, is_x86: bool) -> ir.Function:
    """``void glow_barrier(i64 nthreads)`` (see the module doc)."""
    existing = module.globals.get("glow_barrier")
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    count = _global(module, "glow_barrier_count", I64)
    gen = _global(module, "glow_barrier_gen", I64)
    fn = ir.Function(module, ir.FunctionType(VOID, [I64]), name="glow_barrier")
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    (nthreads,) = fn.args
    entry = fn.append_basic_block("entry")
    arrive = fn.append_basic_block("arrive")
    last = fn.append_basic_block("last")
    wait = fn.append_basic_block("wait")
    spin = fn.append_basic_block("spin")
    relax = fn.append_basic_block("relax")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed("<=", nthreads, i64(1)), done, arrive)
    b.position_at_end(arrive)
    g0 = b.load_atomic(gen, "acquire", 8)
    old = b.atomic_rmw("add", count, i64(1), "acq_rel")
    b.cbranch(b.icmp_signed("==", old, b.sub(nthreads, i64(1))), last, wait)
    b.position_at_end(last)
    b.store_atomic(i64(0), count, "monotonic", 8)
    b.atomic_rmw("add", gen, i64(1), "release")
    b.branch(done)
    b.position_at_end(wait)
    b.branch(spin)
    b.position_at_end(spin)
    n = b.phi(I64, name="spins")
    n.add_incoming(i64(0), wait)
    g1 = b.load_atomic(gen, "acquire", 8)
    b.cbranch(b.icmp_signed("!=", g1, g0), done, relax)
    b.position_at_end(relax)
    if is_x86:
        b.call(intrinsic(module, "llvm.x86.sse2.pause", VOID, []), [])
    with b.if_then(b.icmp_signed(">", n, i64(SPINS_BEFORE_YIELD)), likely=False):
        b.call(intrinsic(module, "sched_yield", I32, []), [])
    n.add_incoming(b.add(n, i64(1)), b.block)
    b.branch(spin)
    b.position_at_end(done)
    b.ret_void()
    return fn


def emit_error_functions(module: ir.Module) -> None:
    """``i32 glow_get_error()`` and ``void glow_clear_error()`` for the runtime."""
    flag = _global(module, ERROR_GLOBAL, I32)
    get = ir.Function(module, ir.FunctionType(I32, []), name="glow_get_error")
    b = ir.IRBuilder(get.append_basic_block("entry"))
    b.ret(b.load_atomic(flag, "acquire", 4))
    clear = ir.Function(module, ir.FunctionType(VOID, []), name="glow_clear_error")
    b = ir.IRBuilder(clear.append_basic_block("entry"))
    b.store_atomic(ir.Constant(I32, 0), flag, "release", 4)
    b.ret_void()


def set_error(builder: ir.IRBuilder, code: int = 1) -> None:
    """Record a run-time error (an index out of range) from inside a kernel."""
    flag = _global(builder.module, ERROR_GLOBAL, I32)
    builder.store_atomic(ir.Constant(I32, code), flag, "monotonic", 4)
