"""Native synchronization emitted into every module: the spin barrier and the error flag.

``glow_barrier(i64 nthreads)`` is a sense-reversing barrier on two module
globals (an arrival counter and a generation number): the last thread to
arrive resets the counter and bumps the generation; the others spin on the
generation with ``pause`` for :data:`SPINS_BEFORE_YIELD` rounds, then block:
on Linux x86-64 they sleep on a futex on the generation (the last thread wakes
them when any sleeps), elsewhere they call ``sched_yield()`` on every round. A
machine with more runnable threads than cores (another busy process) thus gets
the core back instead of losing it to a spinning waiter. One thread returns at once.

``glow_error`` is a flag kernels set (``set_error``) when an input is out of
range at run time (an index beyond its axis); they clamp and go on, so the
process never reads outside its memory, and the runtime raises after the run.
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.helpers import I32, I64, VOID, i64, intrinsic

#: pause rounds a thread waits in the barrier before it sleeps (a futex on Linux x86-64, else sched_yield)
SPINS_BEFORE_YIELD = 2000
SYS_FUTEX_X86_64 = 202
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
ERROR_GLOBAL = "glow_error"


def _global(module: ir.Module, name: str, t: ir.Type) -> ir.GlobalVariable:
    g = module.globals.get(name)
    if g is None:
        g = ir.GlobalVariable(module, t, name=name)
        g.initializer = ir.Constant(t, 0)
        g.linkage = "internal"
        g.align = 64
    return g  # type: ignore[no-any-return]


def emit_barrier_function(module: ir.Module, is_x86: bool, futex: bool = False) -> ir.Function:
    """``void glow_barrier(i64 nthreads)`` (see the module doc)."""
    existing = module.globals.get("glow_barrier")
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    count = _global(module, "glow_barrier_count", I64)
    gen = _global(module, "glow_barrier_gen", I32)
    sleepers = _global(module, "glow_barrier_sleepers", I32)
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
    g0 = b.load_atomic(gen, "seq_cst", 4)
    old = b.atomic_rmw("add", count, i64(1), "acq_rel")
    b.cbranch(b.icmp_signed("==", old, b.sub(nthreads, i64(1))), last, wait)
    b.position_at_end(last)
    b.store_atomic(i64(0), count, "monotonic", 8)
    b.atomic_rmw("add", gen, ir.Constant(I32, 1), "seq_cst")
    if futex:  # wake the threads that went to sleep (a waiter counts itself in before it sleeps)
        asleep = b.load_atomic(sleepers, "seq_cst", 4)
        with b.if_then(b.icmp_signed(">", asleep, ir.Constant(I32, 0)), likely=False):
            futex_call(b, gen, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
    b.branch(done)
    b.position_at_end(wait)
    b.branch(spin)
    b.position_at_end(spin)
    n = b.phi(I64, name="spins")
    n.add_incoming(i64(0), wait)
    g1 = b.load_atomic(gen, "acquire", 4)
    b.cbranch(b.icmp_unsigned("!=", g1, g0), done, relax)
    b.position_at_end(relax)
    if is_x86:
        b.call(intrinsic(module, "llvm.x86.sse2.pause", VOID, []), [])
    with b.if_then(b.icmp_signed(">", n, i64(SPINS_BEFORE_YIELD)), likely=False):
        if futex:  # bounded spin, then block: a busy machine gets the core back
            b.atomic_rmw("add", sleepers, ir.Constant(I32, 1), "seq_cst")
            futex_call(b, gen, FUTEX_WAIT_PRIVATE, g0)
            b.atomic_rmw("sub", sleepers, ir.Constant(I32, 1), "seq_cst")
        else:
            b.call(intrinsic(module, "sched_yield", I32, []), [])
    n.add_incoming(b.add(n, i64(1)), b.block)
    b.branch(spin)
    b.position_at_end(done)
    b.ret_void()
    return fn


def futex_call(b: ir.IRBuilder, word: ir.Value, op: int, val: ir.Value) -> None:
    """``syscall(SYS_futex, word, op, val, NULL)`` (Linux x86-64; ``word`` is an i32*)."""
    module = b.module
    i8p = ir.IntType(8).as_pointer()
    syscall = module.globals.get("syscall") or ir.Function(
        module, ir.FunctionType(I64, [I64], var_arg=True), name="syscall")  # long syscall(long, ...)
    b.call(syscall, [i64(SYS_FUTEX_X86_64), b.bitcast(word, i8p), ir.Constant(I32, op), val,
                     ir.Constant(i8p, None)])


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


# -- the native worker pool --------------------------------------------------------------------------
#
# The control block (``CTL_*`` byte offsets, 64 bytes, owned by the runtime):
CTL_GEN, CTL_SLEEPERS, CTL_STOP, CTL_NTHREADS, CTL_REGIONS = 0, 4, 8, 16, 24
CTL_BYTES = 64
#: rounds a worker spins on the generation before it sleeps (where there is no cycle counter)
WORKER_SPINS = 3000
#: x86: time-stamp-counter cycles a worker spins after its last share before it sleeps (about 0.1 ms): a
#: run that follows within that time finds it awake, since waking a sleeping thread costs tens of
#: microseconds (more on a busy machine) and would cost more than a small kernel's share
WORKER_SPIN_CYCLES = 300_000


def _field(b: ir.IRBuilder, ctl: ir.Value, offset: int, t: ir.Type) -> ir.Value:
    return b.bitcast(b.gep(ctl, [i64(offset)], inbounds=True), t.as_pointer())


def emit_worker_functions(module: ir.Module, entry: ir.Function, is_x86: bool, futex: bool) -> None:
    """``glow_worker(ctl, k)``, ``glow_run(ctl, regions, n)`` and ``glow_stop(ctl)``.

    A worker thread calls ``glow_worker`` once; it waits for the generation in
    the control block to change (spinning briefly, then sleeping on a futex,
    or polling with ``sched_yield`` where there is no futex), runs
    ``glow_main(regions, k, n)`` when ``k < n``, and waits again, until the
    stop flag is set. ``glow_run`` (the caller's thread, id 0) publishes the
    regions and the thread count, bumps the generation, wakes sleepers and
    runs its own share. No Python runs between the threads' shares of a run.
    """
    i8p = ir.IntType(8).as_pointer()
    yield_fn = intrinsic(module, "sched_yield", I32, [])

    # glow_worker(i8* ctl, i64 k)
    fn = ir.Function(module, ir.FunctionType(VOID, [i8p, I64]), name="glow_worker")
    ctl, k = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gen_p = _field(b, ctl, CTL_GEN, I32)
    sleepers_p = _field(b, ctl, CTL_SLEEPERS, I32)
    stop_p = _field(b, ctl, CTL_STOP, I32)
    n_p = _field(b, ctl, CTL_NTHREADS, I64)
    regions_p = _field(b, ctl, CTL_REGIONS, i8p.as_pointer())
    start_gen = ir.Constant(I32, 0)  # a pool starts with a fresh control block: generation 0
    wait = fn.append_basic_block("wait")
    spin = fn.append_basic_block("spin")
    sleep = fn.append_basic_block("sleep")
    woke = fn.append_basic_block("woke")
    work = fn.append_basic_block("work")
    done = fn.append_basic_block("done")
    b.branch(wait)
    b.position_at_end(wait)
    mine = b.phi(I32, name="seen")
    mine.add_incoming(start_gen, fn.entry_basic_block)
    clock = intrinsic(module, "llvm.x86.rdtsc", I64, []) if is_x86 else None
    since = b.call(clock, []) if clock is not None else None
    b.branch(spin)
    b.position_at_end(spin)
    spins = b.phi(I64, name="spins")
    spins.add_incoming(i64(0), wait)
    g = b.load_atomic(gen_p, "seq_cst", 4)
    changed = b.icmp_unsigned("!=", g, mine)
    b.cbranch(changed, woke, sleep)
    b.position_at_end(sleep)
    if is_x86:
        b.call(intrinsic(module, "llvm.x86.sse2.pause", VOID, []), [])
    if clock is not None:  # spin for a bounded time (the TSC), whatever a pause costs on this CPU
        more = b.icmp_signed("<", b.sub(b.call(clock, []), since), i64(WORKER_SPIN_CYCLES))
    else:
        more = b.icmp_signed("<", spins, i64(WORKER_SPINS))
    cont = fn.append_basic_block("spin.more")
    park = fn.append_basic_block("park")
    b.cbranch(more, cont, park)
    b.position_at_end(cont)
    spins.add_incoming(b.add(spins, i64(1)), cont)
    b.branch(spin)
    b.position_at_end(park)
    if futex:
        b.atomic_rmw("add", sleepers_p, ir.Constant(I32, 1), "seq_cst")
        futex_call(b, gen_p, FUTEX_WAIT_PRIVATE, mine)
        b.atomic_rmw("sub", sleepers_p, ir.Constant(I32, 1), "seq_cst")
    else:
        b.call(yield_fn, [])
    spins.add_incoming(i64(WORKER_SPINS), b.block)
    b.branch(spin)
    b.position_at_end(woke)
    stop = b.load_atomic(stop_p, "seq_cst", 4)
    b.cbranch(b.icmp_unsigned("!=", stop, ir.Constant(I32, 0)), done, work)
    b.position_at_end(work)
    n = b.load_atomic(n_p, "acquire", 8)
    with b.if_then(b.icmp_signed("<", k, n)):
        regions = b.load(regions_p)
        b.call(entry, [regions, k, n])
    mine.add_incoming(g, b.block)
    b.branch(wait)
    b.position_at_end(done)
    b.ret_void()

    # glow_run(i8* ctl, i8** regions, i64 n): publish, wake, run thread 0's share
    fn = ir.Function(module, ir.FunctionType(VOID, [i8p, i8p.as_pointer(), I64]), name="glow_run")
    ctl, regions, n = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.if_then(b.icmp_signed(">", n, i64(1))):
        b.store(regions, _field(b, ctl, CTL_REGIONS, i8p.as_pointer()))
        b.store_atomic(n, _field(b, ctl, CTL_NTHREADS, I64), "release", 8)
        gen_p = _field(b, ctl, CTL_GEN, I32)
        b.atomic_rmw("add", gen_p, ir.Constant(I32, 1), "seq_cst")
        if futex:
            asleep = b.load_atomic(_field(b, ctl, CTL_SLEEPERS, I32), "seq_cst", 4)
            with b.if_then(b.icmp_signed(">", asleep, ir.Constant(I32, 0))):
                futex_call(b, gen_p, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
    b.call(entry, [regions, i64(0), n])
    b.ret_void()

    # glow_stop(i8* ctl): every worker returns from glow_worker
    fn = ir.Function(module, ir.FunctionType(VOID, [i8p]), name="glow_stop")
    (ctl,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.store_atomic(ir.Constant(I32, 1), _field(b, ctl, CTL_STOP, I32), "seq_cst", 4)
    gen_p = _field(b, ctl, CTL_GEN, I32)
    b.atomic_rmw("add", gen_p, ir.Constant(I32, 1), "seq_cst")
    if futex:
        futex_call(b, gen_p, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
    b.ret_void()
