"""Work split by measured thread speed: the glue's half of the split table (``helpers.partition``).

Every kernel splits its range over the threads at the cuts of the split table,
evenly until a run has measured the threads. On a shared machine the cores a
network's threads run on are not equally fast (a virtual CPU whose sibling
hyperthread another tenant keeps busy runs at half speed or less, and which one
is slow changes over minutes), and an even split then waits at every barrier for
the slowest thread.

Each thread times the shares it runs (the time-stamp counter from claiming a
share to completing it) in segments without solo kernels, and adds up the part
of the work those shares hold (the widths of their cuts). After a run, the
caller's thread (``glow_run``) updates the threads' speeds and sets the split
of the next run:

- only a run split evenly is measured. A thread given less work waits at every
  barrier, sleeps, and runs slower after waking (on minilm-l6 split 65 / 35 the
  lighter thread did 2.6 units of work per ms against 4.3 at an even split, and
  as fast as the other when it spun instead of sleeping): a skewed run would
  confirm its own skew;
- a thread's speed is its work per cycle relative to the threads' mean, each
  run's within [1 / :data:`MAX_RATIO`, :data:`MAX_RATIO`] (a preempted share),
  averaged over the measured runs (:data:`SMOOTHING`);
- the split stays even until the fastest thread is :data:`DEAD_BAND` times the
  slowest; then the cuts follow the speeds, and every :data:`PROBE_EVERY`-th
  run is split evenly to measure them again;
- a run that timed too little (:data:`MIN_CYCLES`, or a thread without a
  timed share) changes no speed; a change of thread count starts from equal
  speeds.

Every kernel's results are the same whatever the cuts: a share computes whole
output elements (no kernel splits a reduction over the threads), so only which
thread computes them changes. ``CompiledFunction.set_split`` pins the cuts
(and stops the adaptation) for tests and measurements. x86-64 only (the cycle
counter); elsewhere the split stays even.
"""

from __future__ import annotations

from llvmlite import ir

from glow_backend_cpu.helpers import I32, I64, SPLIT_ENTRIES, SPLIT_ONE, VOID, for_range, i64, internal_global, \
    intrinsic, split_entry, split_value

#: weight of the last measured run in a thread's speed (the rest: the runs before it)
SMOOTHING = 0.25
#: one run's relative speed of a thread is taken within [1 / MAX_RATIO, MAX_RATIO] (a preempted share)
MAX_RATIO = 1.5
#: the split stays even until the fastest thread's speed is this many times the slowest's
DEAD_BAND = 1.25
#: with a skewed split, every PROBE_EVERY-th run runs evenly split, and only such runs are measured
PROBE_EVERY = 8
#: a run adapts the split only when its timed shares took this many cycles in all (about 10 us)
MIN_CYCLES = 20_000
#: the split table's entry holding the pinned flag (``set_split``: no adaptation)
PINNED_ENTRY = SPLIT_ENTRIES - 1
#: one thread's counters (i64): the start of its current share, busy cycles, work; padded to a cache line
_T0, _BUSY, _WORK, _STRIDE = 0, 1, 2, 8
#: threads with counters and speeds: as many as the split table has cuts (``sync.MAX_SHARES`` + 1)
_THREADS = SPLIT_ENTRIES - 2
#: the ``seg`` argument of ``glow_share_next`` has this bit set for a segment whose shares are timed
TIMED_BIT = 1 << 32
ADAPT_FN = "glow_split_adapt"
_F64 = ir.DoubleType()


def _slot(b: ir.IRBuilder, tid: ir.Value, field: int) -> ir.Value:
    counters = internal_global(b.module, "glow_split_counters", ir.ArrayType(I64, _THREADS * _STRIDE))
    return b.gep(counters, [i64(0), b.add(b.mul(tid, i64(_STRIDE)), i64(field))], inbounds=True)


def stamp_start(b: ir.IRBuilder, tid: ir.Value) -> None:
    """Thread ``tid`` starts a share now."""
    clock = intrinsic(b.module, "llvm.readcyclecounter", I64, [])
    b.store(b.call(clock, []), _slot(b, tid, _T0))


def _width(b: ir.IRBuilder, p: ir.Value, n: ir.Value) -> ir.Value:
    """The part of the work share ``p`` of ``n`` holds, in ``SPLIT_ONE`` units."""
    cut = b.sub(split_value(b, b.add(p, i64(2))), split_value(b, b.add(p, i64(1))))
    return b.select(b.icmp_unsigned("==", split_value(b, 0), n), cut, b.udiv(i64(SPLIT_ONE), n))


def account(b: ir.IRBuilder, seg: ir.Value, p: ir.Value, tid: ir.Value, n: ir.Value) -> ir.Value:
    """Thread ``tid`` completed share ``p`` of the segment (``seg`` with :data:`TIMED_BIT` when timed): add
    its cycles and its width to the thread's counters. Returns the segment's index."""
    with b.if_then(b.icmp_unsigned("!=", b.and_(seg, i64(TIMED_BIT)), i64(0))):
        clock = intrinsic(b.module, "llvm.readcyclecounter", I64, [])
        busy = _slot(b, tid, _BUSY)
        b.store(b.add(b.load(busy), b.sub(b.call(clock, []), b.load(_slot(b, tid, _T0)))), busy)
        work = _slot(b, tid, _WORK)
        b.store(b.add(b.load(work), _width(b, p, n)), work)
    return b.and_(seg, i64(TIMED_BIT - 1))


def emit_adapt(module: ir.Module) -> ir.Function:
    """``void glow_split_adapt(i64 n)``: after a run on ``n`` threads, the threads' speeds from it if it ran
    evenly split, and the split of the next run (module doc)."""
    fn = ir.Function(module, ir.FunctionType(VOID, [I64]), name=ADAPT_FN)
    fn.linkage = "internal"
    (n,) = fn.args
    speeds = internal_global(module, "glow_split_speeds", ir.ArrayType(_F64, _THREADS))
    speeds_n = internal_global(module, "glow_split_speeds_n", I64)
    runs = internal_global(module, "glow_split_runs", I64)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    free = b.icmp_unsigned("==", split_value(b, PINNED_ENTRY), i64(0))
    even = b.icmp_unsigned("!=", split_value(b, 0), n)
    with b.if_then(b.and_(free, b.and_(even, _measured(b, n)))):
        _update_speeds(b, speeds, speeds_n, n)
    with b.if_then(free):
        count = b.add(b.load(runs), i64(1))
        b.store(count, runs)
        probe = b.icmp_unsigned("==", b.urem(count, i64(PROBE_EVERY)), i64(0))
        skewed = b.and_(b.icmp_unsigned("==", b.load(speeds_n), n), _outside_dead_band(b, speeds, n))
        with b.if_else(b.and_(skewed, b.not_(probe))) as (then, other):
            with then:
                _set_cuts(b, speeds, n)
            with other:
                b.store(ir.Constant(I32, 0), split_entry(b, 0))
    with for_range(b, 0, n, name="reset") as k:
        b.store(i64(0), _slot(b, k, _BUSY))
        b.store(i64(0), _slot(b, k, _WORK))
    b.ret_void()
    return fn


def _measured(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """Every thread ran timed work in this run, :data:`MIN_CYCLES` of it in all."""
    total = b.alloca(I64)
    b.store(i64(0), total)
    every = b.alloca(ir.IntType(1))
    b.store(ir.Constant(ir.IntType(1), 1), every)
    with for_range(b, 0, n, name="t") as k:
        busy = b.load(_slot(b, k, _BUSY))
        b.store(b.add(b.load(total), busy), total)
        empty = b.or_(b.icmp_signed("<=", busy, i64(0)), b.icmp_signed("<=", b.load(_slot(b, k, _WORK)), i64(0)))
        b.store(b.and_(b.load(every), b.not_(empty)), every)
    return b.and_(b.load(every), b.icmp_signed(">=", b.load(total), i64(MIN_CYCLES)))


def _update_speeds(b: ir.IRBuilder, speeds: ir.GlobalVariable, speeds_n: ir.GlobalVariable, n: ir.Value) -> None:
    """Each thread's work per cycle in this run relative to the threads' mean, within
    [1 / :data:`MAX_RATIO`, :data:`MAX_RATIO`], averaged into its speed (a new thread count starts afresh)."""
    rates = b.alloca(_F64, size=_THREADS)
    total = b.alloca(_F64)
    b.store(ir.Constant(_F64, 0.0), total)
    with for_range(b, 0, n, name="r") as k:
        rate = b.fdiv(b.sitofp(b.load(_slot(b, k, _WORK)), _F64), b.sitofp(b.load(_slot(b, k, _BUSY)), _F64))
        b.store(rate, b.gep(rates, [k], inbounds=True))
        b.store(b.fadd(b.load(total), rate), total)
    mean = b.fdiv(b.load(total), b.sitofp(n, _F64))
    fresh = b.icmp_unsigned("!=", b.load(speeds_n), n)
    lo, hi = ir.Constant(_F64, 1.0 / MAX_RATIO), ir.Constant(_F64, MAX_RATIO)
    with for_range(b, 0, n, name="s") as k:
        rel = b.fdiv(b.load(b.gep(rates, [k], inbounds=True)), mean)
        rel = b.select(b.fcmp_ordered(">", rel, hi), hi, b.select(b.fcmp_ordered(">=", rel, lo), rel, lo))
        at = b.gep(speeds, [i64(0), k], inbounds=True)
        before = b.select(fresh, ir.Constant(_F64, 1.0), b.load(at))  # a new thread count: from equal speeds
        b.store(b.fadd(b.fmul(before, ir.Constant(_F64, 1.0 - SMOOTHING)), b.fmul(rel, ir.Constant(_F64, SMOOTHING))), at)
    b.store(n, speeds_n)


def _outside_dead_band(b: ir.IRBuilder, speeds: ir.GlobalVariable, n: ir.Value) -> ir.Value:
    """The fastest thread's speed is over :data:`DEAD_BAND` times the slowest's."""
    lo, hi = b.alloca(_F64), b.alloca(_F64)
    b.store(ir.Constant(_F64, float("inf")), lo)
    b.store(ir.Constant(_F64, 0.0), hi)
    with for_range(b, 0, n, name="band") as k:
        v = b.load(b.gep(speeds, [i64(0), k], inbounds=True))
        b.store(b.select(b.fcmp_ordered("<", v, b.load(lo)), v, b.load(lo)), lo)
        b.store(b.select(b.fcmp_ordered(">", v, b.load(hi)), v, b.load(hi)), hi)
    return b.fcmp_ordered(">", b.load(hi), b.fmul(b.load(lo), ir.Constant(_F64, DEAD_BAND)))


def _set_cuts(b: ir.IRBuilder, speeds: ir.GlobalVariable, n: ir.Value) -> None:
    """Cuts in proportion to the speeds (each within [1 / MAX_RATIO, MAX_RATIO] of the mean, so no share is
    below ``1 / MAX_RATIO**2`` of an even one): the running sum of the speeds, scaled to ``SPLIT_ONE``."""
    total = b.alloca(_F64)
    b.store(ir.Constant(_F64, 0.0), total)
    with for_range(b, 0, n, name="sum") as k:
        b.store(b.fadd(b.load(total), b.load(b.gep(speeds, [i64(0), k], inbounds=True))), total)
    whole = b.load(total)
    run = b.alloca(_F64)
    b.store(ir.Constant(_F64, 0.0), run)
    b.store(ir.Constant(I32, 0), split_entry(b, 1))
    with for_range(b, 0, n, name="cut") as k:
        b.store(b.fadd(b.load(run), b.load(b.gep(speeds, [i64(0), k], inbounds=True))), run)
        cut = b.fptoui(b.fmul(b.fdiv(b.load(run), whole), ir.Constant(_F64, float(SPLIT_ONE))), I64)
        cut = b.select(b.icmp_unsigned(">", cut, i64(SPLIT_ONE)), i64(SPLIT_ONE), cut)
        last = b.icmp_unsigned("==", k, b.sub(n, i64(1)))
        b.store(b.trunc(b.select(last, i64(SPLIT_ONE), cut), I32), split_entry(b, b.add(k, i64(2))))
    b.store(b.trunc(n, I32), split_entry(b, 0))
