"""Native synchronization emitted into every module: the worker pool, the shares of a run, the error flag.

``glow_main`` is cut into segments where a kernel touches bytes an earlier one
touched; a thread runs its own share of a segment, takes the shares of threads
that have not started theirs (a worker the OS descheduled on a busy machine
leaves its work to the threads that run), then waits until every share of the
segment is done: spinning with ``pause`` for :data:`SPINS_BEFORE_YIELD` rounds,
then sleeping on a futex on Linux x86-64 (the thread that completes the share
wakes it), elsewhere yielding the core on every round, so a machine with more
runnable threads than cores gets the core back (see *shares* below). One thread takes the short
path: no table is touched.

``glow_error`` is a flag kernels set (``set_error``) when an input is out of
range at run time (an index beyond its axis); they clamp and go on, so the
process never reads outside its memory, and the runtime raises after the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu import balance
from glow_backend_cpu.helpers import I32, I64, VOID, for_range, i64, internal_global, intrinsic, split_table

#: pause rounds a thread waits for a share of a segment before it yields the core on every round
SPINS_BEFORE_YIELD = 2000
SYS_FUTEX_X86_64 = 202
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
ERROR_GLOBAL = "glow_error"
_I8P = ir.IntType(8).as_pointer()


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
    flag = internal_global(module, ERROR_GLOBAL, I32)
    get = ir.Function(module, ir.FunctionType(I32, []), name="glow_get_error")
    b = ir.IRBuilder(get.append_basic_block("entry"))
    b.ret(b.load_atomic(flag, "acquire", 4))
    clear = ir.Function(module, ir.FunctionType(VOID, []), name="glow_clear_error")
    b = ir.IRBuilder(clear.append_basic_block("entry"))
    b.store_atomic(ir.Constant(I32, 0), flag, "release", 4)
    b.ret_void()


def has_futex(triple: str) -> bool:
    """Whether the glue's waits sleep on futexes (Linux x86-64) rather than yield the core."""
    return triple.startswith("x86_64") and "linux" in triple


def emit_glue(module: ir.Module, entry: ir.Function, shares: tuple[ir.Function, ir.Function], segments: int, *,
              is_x86: bool, triple: str) -> None:
    """The glue of a network into ``module``: the error functions, the bodies of the share functions
    (``declare_share_functions``) and the worker functions calling ``entry``. A profiled network's glue is
    the same (its stamps are kept per share, so a thread that takes another's share stamps that share's
    row: ``profiling.py``)."""
    futex = has_futex(triple)
    emit_error_functions(module)
    define_share_functions(module, *shares, segments, is_x86, futex=futex)
    emit_worker_functions(module, entry, is_x86, futex=futex)


def define_error_flag(module: ir.Module) -> None:
    """The error flag with external linkage (the separately compiled glue reads it: ``glue.py``)."""
    internal_global(module, ERROR_GLOBAL, I32).linkage = ""


def set_error(builder: ir.IRBuilder, code: int = 1) -> None:
    """Record a run-time error (an index out of range) from inside a kernel."""
    flag = internal_global(builder.module, ERROR_GLOBAL, I32)
    builder.store_atomic(ir.Constant(I32, code), flag, "monotonic", 4)


# -- the native worker pool --------------------------------------------------------------------------
#
# The control block (``CTL_*`` byte offsets, 64 bytes, owned by the runtime):
CTL_GEN, CTL_SLEEPERS, CTL_STOP, CTL_NTHREADS, CTL_REGIONS, CTL_RUN = 0, 4, 8, 16, 24, 32
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
    ``glow_main(regions, k, n, run)`` when ``k < n``, and waits again, until the
    stop flag is set. ``glow_run`` (the caller's thread, id 0) numbers the run,
    publishes the regions, the thread count and the run number, bumps the
    generation, wakes sleepers and runs ``glow_main`` as thread 0 (a run on one
    thread has number 0 and touches no share table). No Python runs between
    the threads' shares of a run.
    """
    yield_fn = intrinsic(module, "sched_yield", I32, [])
    _emit_worker(module, entry, is_x86, futex, yield_fn)
    _emit_run(module, entry, futex, is_x86)
    _emit_stop(module, futex)


def _emit_worker(module: ir.Module, entry: ir.Function, is_x86: bool, futex: bool, yield_fn: ir.Function) -> None:
    """``glow_worker(i8* ctl, i64 k)``: wait for a new generation, run share ``k`` of it, until stopped."""
    fn = ir.Function(module, ir.FunctionType(VOID, [_I8P, I64]), name="glow_worker")
    ctl, k = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gen_p = _field(b, ctl, CTL_GEN, I32)
    sleepers_p = _field(b, ctl, CTL_SLEEPERS, I32)
    stop_p = _field(b, ctl, CTL_STOP, I32)
    n_p = _field(b, ctl, CTL_NTHREADS, I64)
    regions_p = _field(b, ctl, CTL_REGIONS, _I8P.as_pointer())
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
    g = _emit_worker_wait(b, _WorkerWait(gen_p, sleepers_p, mine, spin, sleep, woke), is_x86, futex, yield_fn)
    b.position_at_end(woke)
    stop = b.load_atomic(stop_p, "seq_cst", 4)
    b.cbranch(b.icmp_unsigned("!=", stop, ir.Constant(I32, 0)), done, work)
    b.position_at_end(work)
    # the run number first: what is read after it (count, regions and their contents) is that run's or
    # a later one's, and a later run's only once that run is over (then every share is taken)
    run = b.load_atomic(_field(b, ctl, CTL_RUN, I32), "acquire", 4)
    n = b.load_atomic(n_p, "acquire", 8)
    with b.if_then(b.icmp_signed("<", k, n)):
        regions = b.load(regions_p)
        b.call(entry, [regions, k, n, run])
    mine.add_incoming(g, b.block)
    b.branch(wait)
    b.position_at_end(done)
    b.ret_void()


@dataclass
class _WorkerWait:
    """What a worker's wait for a new generation reads and where it goes (blocks of ``glow_worker``)."""

    gen_p: ir.Value  #: the generation (i32*)
    sleepers_p: ir.Value  #: the count of workers asleep on the generation's futex (i32*)
    seen: ir.PhiInstr  #: the generation the worker last ran
    spin: ir.Block  #: the wait loop's head
    sleep: ir.Block  #: where a round finds the generation unchanged
    woke: ir.Block  #: where the generation has changed


def _emit_worker_wait(b: ir.IRBuilder, w: _WorkerWait, is_x86: bool, futex: bool,
                      yield_fn: ir.Function) -> ir.Value:
    """The wait loop of ``glow_worker`` (entered from the current block, the ``wait`` block): spin on the
    generation for a bounded time, then park (futex or ``sched_yield``) and spin again; it leaves to
    ``w.woke`` once the generation differs from ``w.seen``. Returns the generation loaded."""
    module = b.module
    fn = b.function
    wait = b.block
    clock = intrinsic(module, "llvm.x86.rdtsc", I64, []) if is_x86 else None
    since = b.call(clock, []) if clock is not None else None
    b.branch(w.spin)
    b.position_at_end(w.spin)
    spins = b.phi(I64, name="spins")
    spins.add_incoming(i64(0), wait)
    g = b.load_atomic(w.gen_p, "seq_cst", 4)
    changed = b.icmp_unsigned("!=", g, w.seen)
    b.cbranch(changed, w.woke, w.sleep)
    b.position_at_end(w.sleep)
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
    b.branch(w.spin)
    b.position_at_end(park)
    if futex:
        b.atomic_rmw("add", w.sleepers_p, ir.Constant(I32, 1), "seq_cst")
        futex_call(b, w.gen_p, FUTEX_WAIT_PRIVATE, w.seen)
        b.atomic_rmw("sub", w.sleepers_p, ir.Constant(I32, 1), "seq_cst")
    else:
        b.call(yield_fn, [])
    spins.add_incoming(i64(WORKER_SPINS), b.block)
    b.branch(w.spin)
    return g


def _emit_run(module: ir.Module, entry: ir.Function, futex: bool, is_x86: bool) -> None:
    """``glow_run(i8* ctl, i8** regions, i64 n)``: publish the run, wake the workers, run thread 0's share."""
    fn = ir.Function(module, ir.FunctionType(VOID, [_I8P, _I8P.as_pointer(), I64]), name="glow_run")
    ctl, regions, n = fn.args
    seq = internal_global(module, RUN_SEQ_GLOBAL, I32)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    solo = b.block
    with b.if_then(b.icmp_signed(">", n, i64(1))):
        # this library's run number (never reset, unlike a pool's generation: pools are remade)
        run = b.add(b.atomic_rmw("add", seq, ir.Constant(I32, 1), "seq_cst"), ir.Constant(I32, 1))
        b.store(regions, _field(b, ctl, CTL_REGIONS, _I8P.as_pointer()))
        b.store_atomic(n, _field(b, ctl, CTL_NTHREADS, I64), "release", 8)
        b.store_atomic(run, _field(b, ctl, CTL_RUN, I32), "release", 4)
        gen_p = _field(b, ctl, CTL_GEN, I32)
        b.atomic_rmw("add", gen_p, ir.Constant(I32, 1), "seq_cst")
        if futex:
            asleep = b.load_atomic(_field(b, ctl, CTL_SLEEPERS, I32), "seq_cst", 4)
            with b.if_then(b.icmp_signed(">", asleep, ir.Constant(I32, 0))):
                futex_call(b, gen_p, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
        parallel = b.block
    tag = b.phi(I32, name="run")
    tag.add_incoming(ir.Constant(I32, 0), solo)
    tag.add_incoming(run, parallel)
    b.call(entry, [regions, i64(0), n, tag])
    if is_x86:  # every share of the run is done: the split of the next one from the threads' speeds
        with b.if_then(b.icmp_signed(">", n, i64(1))):
            b.call(balance.emit_adapt(module), [n])
    b.ret_void()


def _emit_stop(module: ir.Module, futex: bool) -> None:
    """``glow_stop(i8* ctl)``: every worker returns from ``glow_worker``."""
    fn = ir.Function(module, ir.FunctionType(VOID, [_I8P]), name="glow_stop")
    (ctl,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.store_atomic(ir.Constant(I32, 1), _field(b, ctl, CTL_STOP, I32), "seq_cst", 4)
    gen_p = _field(b, ctl, CTL_GEN, I32)
    b.atomic_rmw("add", gen_p, ir.Constant(I32, 1), "seq_cst")
    if futex:
        futex_call(b, gen_p, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
    b.ret_void()


# -- shares: the segments between barriers, claimed by whichever thread is running -------------------
#
# ``glow_main`` is cut into *segments* where a barrier is needed. Share ``p`` of a segment is what
# thread ``p`` of a plain SPMD run would execute there (its part of every kernel, with ``tid = p``, its
# scratch, and the solo kernels in share 0). A thread first claims its own share of a segment, then
# every other share no thread has claimed yet; it then waits until every share is done. A worker that the OS descheduled thus leaves its shares to the threads that run, instead of
# stalling every barrier. Claims and completions are tagged with the run's number (``glow_run_seq``,
# bumped by ``glow_run``): a table entry older than the run is free, one as new is taken, so no table
# is ever reset, and a worker that wakes after its run has ended finds everything taken and done.

#: most threads a run may use: the columns of the share tables (the runtime caps its thread count)
MAX_SHARES = 64
RUN_SEQ_GLOBAL = "glow_run_seq"


def declare_share_functions(module: ir.Module, internal: bool = True) -> tuple[ir.Function, ir.Function]:
    """``i64 glow_share_first(i64 seg, i64 tid, i64 n, i32 run)`` and ``i64 glow_share_next(i64 seg,
    i64 done_share, i64 tid, i64 n, i32 run)``: the share to execute next, or -1 once every share of the
    segment is done. Their bodies come with :func:`define_share_functions`, once the segments are known
    (``internal=False``: in the separately compiled glue, ``glue.py``)."""
    first = ir.Function(module, ir.FunctionType(I64, [I64, I64, I64, I32]), name="glow_share_first")
    nxt = ir.Function(module, ir.FunctionType(I64, [I64, I64, I64, I64, I32]), name="glow_share_next")
    for fn in (first, nxt):
        if internal:
            fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("nounwind")
    return first, nxt


SHARE_TABLES = ("glow_share_claims", "glow_share_done")


def define_share_tables(module: ir.Module, segments: int, internal: bool = True) -> None:
    """The claim and done tables of ``segments`` segments (``internal=False``: the glue declares them)."""
    for name in SHARE_TABLES:
        t = ir.ArrayType(I32, max(segments, 1) * MAX_SHARES)
        g = ir.GlobalVariable(module, t, name=name)
        g.initializer = ir.Constant(t, None)
        if internal:
            g.linkage = "internal"
        g.align = 64


def define_split_table(module: ir.Module, internal: bool = True) -> None:
    """The split table ``helpers.partition`` reads, zeroed (an even split), defined in ``module``
    (``internal=False``: the separately compiled glue refers to it too)."""
    g = split_table(module)
    g.initializer = ir.Constant(g.value_type, None)
    if internal:
        g.linkage = "internal"


def _table(module: ir.Module, name: str, segments: int) -> ir.GlobalVariable:
    """A share table: defined here, or as the glue sees it (an ``external global i32``, its first entry)."""
    g = module.globals.get(name)
    if g is None:
        define_share_tables(module, segments)
        g = module.globals[name]
    return g  # type: ignore[no-any-return]


def define_share_functions(module: ir.Module, first: ir.Function, nxt: ir.Function, segments: int,
                           is_x86: bool, futex: bool = False) -> None:
    """The bodies of the functions :func:`declare_share_functions` made (see the section comment). With
    ``futex`` (Linux x86-64) a thread that waited long for a share sleeps on its done entry, and the
    thread that completes a share wakes the sleepers; elsewhere a waiter yields the core every round."""
    claims = _table(module, "glow_share_claims", segments)
    done = _table(module, "glow_share_done", segments)
    sleepers = internal_global(module, "glow_share_sleepers", I32) if futex else None
    settle = _emit_settle(module, claims, done, is_x86, sleepers)
    seg, tid, n, run = first.args
    b = ir.IRBuilder(first.append_basic_block("entry"))
    with b.if_then(b.icmp_signed("<=", n, i64(1)), likely=False):
        b.ret(i64(0))
    with b.if_then(_try_claim(b, claims, seg, tid, run), likely=True):
        if is_x86:
            balance.stamp_start(b, tid)
        b.ret(tid)
    b.ret(b.call(settle, [seg, tid, n, run]))
    seg, p, tid, n, run = nxt.args
    b = ir.IRBuilder(nxt.append_basic_block("entry"))
    with b.if_then(b.icmp_signed("<=", n, i64(1)), likely=False):
        b.ret(i64(-1))
    # the share's time and width go to the thread's counters (a timed segment's index carries TIMED_BIT)
    seg = balance.account(b, seg, p, tid, n) if is_x86 else b.and_(seg, i64(balance.TIMED_BIT - 1))
    slot = _slot(b, done, seg, p)
    if sleepers is None:
        b.store_atomic(run, slot, "release", 4)
    else:  # the store and the load of the sleepers are ordered (seq_cst): a waiter that counted itself
        b.store_atomic(run, slot, "seq_cst", 4)  # in before this store sees the new tag or is woken
        with b.if_then(b.icmp_signed(">", b.load_atomic(sleepers, "seq_cst", 4), ir.Constant(I32, 0)),
                       likely=False):
            futex_call(b, slot, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
    b.ret(b.call(settle, [seg, tid, n, run]))


def _slot(b: ir.IRBuilder, table: ir.GlobalVariable, seg: ir.Value, p: ir.Value) -> ir.Value:
    at = b.add(b.mul(seg, i64(MAX_SHARES)), p)
    if isinstance(table.value_type, ir.ArrayType):
        return b.gep(table, [i64(0), at], inbounds=True)
    # the glue's view (its first entry, ``external global i32``): a plain offset, which claims nothing of
    # the object's size
    return b.gep(table, [at])


def _older(b: ir.IRBuilder, tag: ir.Value, run: ir.Value) -> ir.Value:
    """``tag`` was written by a run before ``run`` (run numbers wrap: compare their difference)."""
    return b.icmp_signed(">", b.sub(run, tag), ir.Constant(I32, 0))


def _try_claim(b: ir.IRBuilder, claims: ir.GlobalVariable, seg: ir.Value, p: ir.Value, run: ir.Value) -> ir.Value:
    """Claim share ``p`` of ``seg`` for ``run``; true if this thread got it."""
    slot = _slot(b, claims, seg, p)
    tag = b.load_atomic(slot, "monotonic", 4)
    free = _older(b, tag, run)
    before = b.block
    with b.if_then(free):
        pair = b.cmpxchg(slot, tag, run, "acq_rel", "monotonic")
        won = b.extract_value(pair, 1)
        after_cas = b.block
    result = b.phi(ir.IntType(1))
    result.add_incoming(ir.Constant(ir.IntType(1), 0), before)
    result.add_incoming(won, after_cas)
    return result


def _emit_settle(module: ir.Module, claims: ir.GlobalVariable, done: ir.GlobalVariable, is_x86: bool,
                 sleepers: ir.GlobalVariable | None) -> ir.Function:
    """``i64 glow_share_settle(seg, tid, n, run)``: claim a free share of another thread and
    return it, or wait until every share of ``seg`` is done and return -1. The wait spins with ``pause``
    for :data:`SPINS_BEFORE_YIELD` rounds per share, then sleeps on the share's done entry (``sleepers``:
    a futex, woken by the thread that completes it) or yields the core on every round."""
    fn = ir.Function(module, ir.FunctionType(I64, [I64, I64, I64, I32]), name="glow_share_settle")
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    seg, tid, n, run = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with for_range(b, 1, n, name="other") as i:
        q = b.add(tid, i)
        q = b.select(b.icmp_signed(">=", q, n), b.sub(q, n), q)
        with b.if_then(_try_claim(b, claims, seg, q, run), likely=False):
            if is_x86:
                balance.stamp_start(b, tid)
            b.ret(q)
    yield_fn = intrinsic(module, "sched_yield", I32, [])
    with for_range(b, 0, n, name="share") as q:
        slot = _slot(b, done, seg, q)
        check = fn.append_basic_block("wait")
        relax = fn.append_basic_block("relax")
        out = fn.append_basic_block("settled")
        head = b.block
        b.branch(check)
        b.position_at_end(check)
        spins = b.phi(I64, name="spins")
        spins.add_incoming(i64(0), head)
        tag = b.load_atomic(slot, "acquire", 4)
        b.cbranch(_older(b, tag, run), relax, out)
        b.position_at_end(relax)
        if is_x86:
            b.call(intrinsic(module, "llvm.x86.sse2.pause", VOID, []), [])
        with b.if_then(b.icmp_signed(">", spins, i64(SPINS_BEFORE_YIELD)), likely=False):
            if sleepers is not None:  # sleeps only while the entry still holds the tag just read
                b.atomic_rmw("add", sleepers, ir.Constant(I32, 1), "seq_cst")
                futex_call(b, slot, FUTEX_WAIT_PRIVATE, tag)
                b.atomic_rmw("sub", sleepers, ir.Constant(I32, 1), "seq_cst")
            else:
                b.call(yield_fn, [])
        spins.add_incoming(b.add(spins, i64(1)), b.block)
        b.branch(check)
        b.position_at_end(out)
    b.ret(i64(-1))
    return fn
