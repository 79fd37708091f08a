"""Small IR-building helpers shared by the code generator and the emitters.

Everything LLVM IR in this backend is built with ``llvmlite.ir.IRBuilder``
plus these helpers (in the spirit of numba's ``cgutils``):

- loops: :func:`for_range` (a counted loop with a phi index), :func:`carried_loop` (values such as
  vector accumulators carried in phis, not memory);
- index arithmetic: :func:`unravel` (a linear index into coordinates), :func:`strided_offset` (a
  linear index into an element offset under per-axis strides, e.g. of a broadcast operand),
  :func:`window_tap` (the input position one tap of a convolution or pooling window reads);
- branches: :func:`if_likely`, :func:`if_unlikely` (``if`` with a branch-weight hint);
- constants and types: :func:`i64`, :func:`i32`, :func:`const_like`, :func:`splat`. Integer constants
  and splat's operands are made once and shared (llvmlite constants are immutable, and each caches its
  text: printing the IR, most of IR generation's time, prints each shared constant once);
- vector memory: :func:`vload`, :func:`vstore`, :func:`masked_vload`, :func:`masked_vstore`;
- intrinsics: :func:`intrinsic` (declare once per module, by name);
- threads: :func:`partition` (this thread's ``[start, end)`` of a range) and
  :func:`partition_blocks` (the same in whole blocks).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
VOID = ir.VoidType()
I8P = I8.as_pointer()


def i64(v: int) -> ir.Constant:
    return _int_constant(64, int(v))


def i32(v: int) -> ir.Constant:
    return _int_constant(32, int(v))


@functools.lru_cache(maxsize=1 << 14)
def _int_constant(bits: int, v: int) -> ir.Constant:
    return ir.Constant(I64 if bits == 64 else I32, v)


@functools.lru_cache(maxsize=256)
def _splat_operands(t: ir.Type, lanes: int) -> tuple[ir.Constant, ir.Constant]:
    """splat's undefined vector and its all-zero shuffle mask."""
    return ir.Constant(ir.VectorType(t, lanes), ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), [i32(0)] * lanes)


def scalar_type(t: ir.Type) -> ir.Type:
    """The element type of a vector type, or the type itself."""
    return t.element if isinstance(t, ir.VectorType) else t


def lanes_of(t: ir.Type) -> int:
    return t.count if isinstance(t, ir.VectorType) else 1


def vec_type(t: ir.Type, lanes: int) -> ir.Type:
    """``<lanes x t>``, or ``t`` itself for one lane."""
    return ir.VectorType(t, lanes) if lanes > 1 else t


def const_like(t: ir.Type, value: float | bool) -> ir.Constant:
    """A constant of type ``t`` (scalar or vector: every lane) holding ``value``."""
    st = scalar_type(t)
    if isinstance(st, ir.IntType):
        bits = st.width
        v = int(value) & ((1 << bits) - 1)
        c = ir.Constant(st, v)
    else:
        c = ir.Constant(st, float(value))
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [c] * t.count)
    return c


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """Broadcast a scalar into ``<lanes x T>`` (the value itself for one lane)."""
    if lanes == 1:
        return value
    if isinstance(value, ir.Constant):
        return ir.Constant(ir.VectorType(value.type, lanes), [value] * lanes)
    undef, zeros = _splat_operands(value.type, lanes)
    v = builder.insert_element(undef, value, i32(0))
    return builder.shuffle_vector(v, undef, zeros)


def iota(lanes: int, t: ir.IntType = I64) -> ir.Constant:
    """``<0, 1, ..., lanes-1>``."""
    return ir.Constant(ir.VectorType(t, lanes), list(range(lanes)))


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The function ``name`` of ``module``, declared with this signature on first use."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    return ir.Function(module, ir.FunctionType(ret, list(args)), name=name)


def type_suffix(t: ir.Type) -> str:
    """LLVM's overload suffix: ``f32``, ``v16f32``, ``i64``, ``v8i1`` ..."""
    st = scalar_type(t)
    if isinstance(st, ir.IntType):
        s = f"i{st.width}"
    elif isinstance(st, ir.HalfType):
        s = "f16"
    elif isinstance(st, ir.FloatType):
        s = "f32"
    elif isinstance(st, ir.DoubleType):
        s = "f64"
    else:  # pragma: no cover
        raise TypeError(f"no intrinsic suffix for {t}")
    return f"v{t.count}{s}" if isinstance(t, ir.VectorType) else s


def call_intrinsic(builder: ir.IRBuilder, base: str, args: Sequence[ir.Value], ret: ir.Type | None = None) -> ir.Value:
    """``llvm.<base>.<suffix of the first operand>(args...)`` (e.g. ``llvm.sqrt.v16f32``)."""
    t = args[0].type
    fn = intrinsic(builder.module, f"llvm.{base}.{type_suffix(t)}", ret or t, [a.type for a in args])
    return builder.call(fn, list(args))


# -- loops and branches --------------------------------------------------------------------------

@contextlib.contextmanager
def for_range(builder: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, step: int = 1,
              name: str = "i") -> Iterator[ir.Value]:
    """``for (i = start; i < stop; i += step)``: yields ``i`` (i64); the builder ends after the loop.

    The body is skipped entirely when ``start >= stop``.
    """
    start_v = i64(start) if isinstance(start, int) else start
    stop_v = i64(stop) if isinstance(stop, int) else stop
    pre = builder.block
    fn = builder.function
    head = fn.append_basic_block(f"{name}.head")
    body = fn.append_basic_block(f"{name}.body")
    end = fn.append_basic_block(f"{name}.end")
    builder.cbranch(builder.icmp_signed("<", start_v, stop_v), head, end)
    builder.position_at_end(head)
    idx = builder.phi(I64, name=name)
    idx.add_incoming(start_v, pre)
    builder.branch(body)
    builder.position_at_end(body)
    yield idx
    nxt = builder.add(idx, i64(step), name=f"{name}.next")
    idx.add_incoming(nxt, builder.block)
    builder.cbranch(builder.icmp_signed("<", nxt, stop_v), head, end)
    builder.position_at_end(end)


def carried_loop(builder: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, init: Sequence[ir.Value],
                 body: Callable[[ir.IRBuilder, ir.Value, list[ir.Value]], list[ir.Value]], step: int = 1,
                 name: str = "cl") -> list[ir.Value]:
    """``i = start; while i < stop: vals = body(builder, i, vals); i += step``; returns the final ``vals``.

    The values live in phis of the loop header (registers for LLVM, not stack slots), which is how
    the micro-kernels keep their accumulators; the body may run zero times.
    """
    start_v = i64(start) if isinstance(start, int) else start
    stop_v = i64(stop) if isinstance(stop, int) else stop
    fn = builder.block.function
    pre = builder.block
    hdr = fn.append_basic_block(f"{name}.hdr")
    blk = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.end")
    builder.branch(hdr)
    builder.position_at_end(hdr)
    i = builder.phi(I64)
    i.add_incoming(start_v, pre)
    phis = [builder.phi(v.type) for v in init]
    for p, v in zip(phis, init):
        p.add_incoming(v, pre)
    builder.cbranch(builder.icmp_signed("<", i, stop_v), blk, done)
    builder.position_at_end(blk)
    nxt = body(builder, i, list(phis))
    i.add_incoming(builder.add(i, i64(step)), builder.block)
    for p, v in zip(phis, nxt):
        p.add_incoming(v, builder.block)
    builder.branch(hdr)
    builder.position_at_end(done)
    return list(phis)


def unravel(builder: ir.IRBuilder, linear: ir.Value, dims: Sequence[int]) -> list[ir.Value]:
    """The coordinates of ``linear`` in a C-ordered array of shape ``dims`` (i64 values)."""
    coords = []
    rem = linear
    for d in reversed(dims):
        coords.append(builder.urem(rem, i64(d)))
        rem = builder.udiv(rem, i64(d))
    coords.reverse()
    return coords


def strided_offset(builder: ir.IRBuilder, linear: ir.Value, dims: Sequence[int], strides: Sequence[int]) -> ir.Value:
    """Element offset of ``linear`` (C order over ``dims``) under per-axis ``strides``; 0-strides add nothing."""
    if not any(strides):
        return i64(0)
    off: ir.Value = i64(0)
    rem = linear
    for d, st in zip(reversed(dims), reversed(strides)):
        idx = builder.urem(rem, i64(d))
        rem = builder.udiv(rem, i64(d))
        if st:
            off = builder.add(off, builder.mul(idx, i64(st)))
    return off


def window_tap(builder: ir.IRBuilder, out_coords: Sequence[ir.Value], tap_coords: Sequence[ir.Value],
               in_dims: Sequence[int], strides: Sequence[int], pads: Sequence[int],
               dilations: Sequence[int]) -> tuple[ir.Value, ir.Value]:
    """Where one window tap reads: ``(in_bounds, flat index into the spatial input)``.

    Per axis the input position is ``out * stride - pad_begin + tap * dilation``; it is in bounds when
    it lies in ``[0, in_dim)`` (an unsigned compare catches the negative ones).
    """
    inb: ir.Value = ir.Constant(I1, 1)
    flat: ir.Value = i64(0)
    for d in range(len(in_dims)):
        pos = builder.add(builder.sub(builder.mul(out_coords[d], i64(strides[d])), i64(pads[d])),
                          builder.mul(tap_coords[d], i64(dilations[d])))
        inb = builder.and_(inb, builder.icmp_unsigned("<", pos, i64(in_dims[d])))
        flat = builder.add(builder.mul(flat, i64(in_dims[d])), pos)
    return inb, flat


@contextlib.contextmanager
def if_likely(builder: ir.IRBuilder, cond: ir.Value) -> Iterator[None]:
    """``if (cond) {...}``, expecting ``cond`` to hold."""
    with builder.if_then(cond, likely=True):
        yield


@contextlib.contextmanager
def if_unlikely(builder: ir.IRBuilder, cond: ir.Value) -> Iterator[None]:
    """``if (cond) {...}``, expecting ``cond`` not to hold."""
    with builder.if_then(cond, likely=False):
        yield


# -- memory --------------------------------------------------------------------------------------

def elem_ptr(builder: ir.IRBuilder, base: ir.Value, index: ir.Value | int) -> ir.Value:
    """``&base[index]``."""
    return builder.gep(base, [i64(index) if isinstance(index, int) else index], inbounds=True)


def vload(builder: ir.IRBuilder, base: ir.Value, index: ir.Value | int, lanes: int, align: int = 1) -> ir.Value:
    """``lanes`` consecutive elements from ``&base[index]`` (a scalar load for one lane)."""
    p = elem_ptr(builder, base, index)
    if lanes == 1:
        return builder.load(p, align=align)
    vt = ir.VectorType(base.type.pointee, lanes)
    return builder.load(builder.bitcast(p, vt.as_pointer()), align=align)


def vstore(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value | int, align: int = 1) -> None:
    p = elem_ptr(builder, base, index)
    if isinstance(value.type, ir.VectorType):
        p = builder.bitcast(p, value.type.as_pointer())
    builder.store(value, p, align=align)


def lane_mask(builder: ir.IRBuilder, count: ir.Value, lanes: int) -> ir.Value:
    """``<lanes x i1>``: lane j is on when ``j < count``."""
    return builder.icmp_signed("<", iota(lanes), splat(builder, count, lanes))


def masked_vload(builder: ir.IRBuilder, base: ir.Value, index: ir.Value, mask: ir.Value, lanes: int,
                 align: int = 1) -> ir.Value:
    """``llvm.masked.load``: the lanes of ``mask`` from ``&base[index]``, zero elsewhere."""
    et = base.type.pointee
    vt = ir.VectorType(et, lanes)
    p = builder.bitcast(elem_ptr(builder, base, index), vt.as_pointer())
    fn = intrinsic(builder.module, f"llvm.masked.load.{type_suffix(vt)}.p0", vt,
                   [vt.as_pointer(), I32, ir.VectorType(I1, lanes), vt])
    return builder.call(fn, [p, i32(align), mask, ir.Constant(vt, None)])


def masked_vstore(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value, mask: ir.Value,
                  align: int = 1) -> None:
    vt = value.type
    p = builder.bitcast(elem_ptr(builder, base, index), vt.as_pointer())
    fn = intrinsic(builder.module, f"llvm.masked.store.{type_suffix(vt)}.p0", VOID,
                   [vt, vt.as_pointer(), I32, ir.VectorType(I1, vt.count)])
    builder.call(fn, [value, p, i32(align), mask])


def memcpy(builder: ir.IRBuilder, dst: ir.Value, src: ir.Value, nbytes: ir.Value | int) -> None:
    """``memcpy(dst, src, nbytes)`` (any pointer types)."""
    n = i64(nbytes) if isinstance(nbytes, int) else nbytes
    fn = intrinsic(builder.module, "llvm.memcpy.p0.p0.i64", VOID, [I8P, I8P, I64, I1])
    builder.call(fn, [builder.bitcast(dst, I8P), builder.bitcast(src, I8P), n, ir.Constant(I1, 0)])


def memset(builder: ir.IRBuilder, dst: ir.Value, byte: int, nbytes: ir.Value | int) -> None:
    n = i64(nbytes) if isinstance(nbytes, int) else nbytes
    fn = intrinsic(builder.module, "llvm.memset.p0.i64", VOID, [I8P, I8, I64, I1])
    builder.call(fn, [builder.bitcast(dst, I8P), ir.Constant(I8, byte & 0xFF), n, ir.Constant(I1, 0)])


# -- threads -------------------------------------------------------------------------------------

#: the split table every network module holds: ``[n, cut_0 = 0, cut_1, ..., cut_n = SPLIT_ONE]`` (i32): with
#: ``n`` threads, share ``t`` of a range of ``total`` is ``[total * cut_t, total * cut_(t+1)) / SPLIT_ONE``;
#: ``n = 0`` (or another count than the run's) splits evenly. The runtime sets it (``sync.py``, *split*)
SPLIT_GLOBAL = "glow_split"
SPLIT_ONE = 1 << 16
#: entries of the split table: the count, the cuts of up to 64 threads (``sync.MAX_SHARES``), a pinned flag
SPLIT_ENTRIES = 64 + 3
#: ranges from this size on split evenly (``total * SPLIT_ONE`` must not overflow)
SPLIT_MAX_TOTAL = 1 << 46


def split_table(module: ir.Module) -> ir.GlobalVariable:
    """The module's split table (declared here when the network's glue defines it later)."""
    g = module.globals.get(SPLIT_GLOBAL)
    if g is None:
        g = ir.GlobalVariable(module, ir.ArrayType(I32, SPLIT_ENTRIES), name=SPLIT_GLOBAL)
        g.align = 64
    return g  # type: ignore[no-any-return]


def split_entry(builder: ir.IRBuilder, k: ir.Value | int) -> ir.Value:
    """A pointer to entry ``k`` of the module's split table (i32*)."""
    return builder.gep(split_table(builder.module), [i64(0), i64(k) if isinstance(k, int) else k], inbounds=True)


def split_value(builder: ir.IRBuilder, k: ir.Value | int) -> ir.Value:
    """Entry ``k`` of the split table, as an i64."""
    return builder.zext(builder.load(split_entry(builder, k)), I64)


def internal_global(module: ir.Module, name: str, t: ir.Type) -> ir.GlobalVariable:
    """The module's zeroed, 64-byte aligned internal global ``name`` (made on first use)."""
    g = module.globals.get(name)
    if g is None:
        g = ir.GlobalVariable(module, t, name=name)
        g.initializer = ir.Constant(t, None)
        g.linkage = "internal"
        g.align = 64
    return g  # type: ignore[no-any-return]


def partition(builder: ir.IRBuilder, total: ir.Value | int, tid: ir.Value, nthreads: ir.Value) -> tuple[ir.Value, ir.Value]:
    """This thread's share ``[start, end)`` of ``range(total)``: ``total*tid/nthreads`` to ``total*(tid+1)/nthreads``,
    or the cuts of the split table when it holds cuts for ``nthreads`` threads (the runtime moves work from a
    slower thread to a faster one: every kernel's results are the same whatever the split)."""
    n = i64(total) if isinstance(total, int) else total
    start = builder.udiv(builder.mul(n, tid), nthreads)
    end = builder.udiv(builder.mul(n, builder.add(tid, i64(1))), nthreads)
    weighted = builder.and_(builder.icmp_unsigned("==", split_value(builder, 0), nthreads),
                            builder.icmp_unsigned("<", n, i64(SPLIT_MAX_TOTAL)))
    lo = builder.lshr(builder.mul(n, split_value(builder, builder.add(tid, i64(1)))), i64(16))
    hi = builder.lshr(builder.mul(n, split_value(builder, builder.add(tid, i64(2)))), i64(16))
    return builder.select(weighted, lo, start), builder.select(weighted, hi, end)


def partition_blocks(builder: ir.IRBuilder, total: int, block: int, tid: ir.Value,
                     nthreads: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Like :func:`partition`, but the bounds are multiples of ``block`` (the last one is ``total``)."""
    nblocks = (total + block - 1) // block
    b0, b1 = partition(builder, nblocks, tid, nthreads)
    start = builder.mul(b0, i64(block))
    end = builder.mul(b1, i64(block))
    end = builder.select(builder.icmp_signed(">", end, i64(total)), i64(total), end)
    start = builder.select(builder.icmp_signed(">", start, i64(total)), i64(total), start)
    return start, end


def smin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


def smax(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed(">", a, b), a, b)
