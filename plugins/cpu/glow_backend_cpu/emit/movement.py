"""Data movement: Transpose, Slice, Concat, Broadcast, Pad, BitCast, Reshape, Tile (a strided copy engine).

Everything here is a copy from ``src`` with some element strides into a
contiguous ``dst`` (:func:`emit_strided_copy`), moved as raw bits of the
element's width (so NaN payloads and every element kind, quantized ones
included, pass unchanged):

- the shape and both stride lists are coalesced to the fewest dimensions;
- when the innermost dimension is contiguous in both, rows are copied with
  ``memcpy`` (vector moves for short rows);
- a transpose (the source is contiguous along another dimension) is copied in
  square tiles, so both sides stay in cache;
- anything else (steps, broadcasts along the row) walks the row with the
  source stride;
- the outer rows (and tiles) are the work items, partitioned over threads.

Reshape and BitCast are views in the low-level IR (no code); their emitters
only run for the rare case of a non-view (a plain copy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EmitContext, Instr, Operand, register_emitter
from glow_backend_cpu.emit.dtypes import bits_type
from glow_backend_cpu.emit.symdims import extent, is_sym, row_space
from glow_backend_cpu.helpers import I64, elem_ptr, for_range, i64, memcpy, partition, smin, unravel, vload, vstore
from glow_core.ir.graph import Node
from glow_core.ir.types import ALL_KINDS, ElemKind

#: rows shorter than this many bytes are moved with vector loads and stores instead of memcpy
MEMCPY_MIN_BYTES = 256
#: transpose tile edge (elements)
TILE = 16
#: below this many elements a copy is one work item
MIN_PARALLEL = 8192
#: aim for this many work items in a parallel copy, each at least COPY_BLOCK elements of a contiguous row
TARGET_ITEMS = 32
COPY_BLOCK = 8192


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        strides[d] = acc
        acc *= shape[d]
    return strides


def _coalesce(shape: Sequence[int], dst: Sequence[int], src: Sequence[int]) -> list[tuple[int, int, int]]:
    dims = [(s, a, b) for s, a, b in zip(shape, dst, src) if s != 1]
    out: list[tuple[int, int, int]] = []
    for s, a, b in dims:
        if out and out[-1][1] == a * s and out[-1][2] == b * s:
            out[-1] = (out[-1][0] * s, a, b)
        else:
            out.append((s, a, b))
    return out or [(1, 1, 1)]


def _bits_ptr(b: ir.IRBuilder, p: ir.Value, elem: ElemKind) -> ir.Value:
    return b.bitcast(p, bits_type(elem).as_pointer())


def _outer_offsets(b: ir.IRBuilder, index: ir.Value, dims: Sequence[tuple[int, int, int]]) -> tuple[ir.Value, ir.Value]:
    """(dst, src) element offsets of flat outer index ``index`` over ``dims`` (innermost last)."""
    do, so = i64(0), i64(0)
    rem = index
    for n, (size, ds, ss) in enumerate(reversed(dims)):
        last = n == len(dims) - 1
        idx = rem if last else b.urem(rem, i64(size))
        if not last:
            rem = b.udiv(rem, i64(size))
        if ds:
            do = b.add(do, b.mul(idx, i64(ds)))
        if ss:
            so = b.add(so, b.mul(idx, i64(ss)))
    return do, so


def emit_strided_copy(ctx: EmitContext, dst: ir.Value, src: ir.Value, elem: ElemKind, shape: Sequence[int],
                      dst_strides: Sequence[int], src_strides: Sequence[int], *, parallel: bool = True) -> None:
    """``dst[i * dst_strides] = src[i * src_strides]`` for every index ``i`` of ``shape`` (element strides)."""
    total = math.prod(shape)
    if total == 0:
        return
    b = ctx.builder
    dst = _bits_ptr(b, dst, elem)
    src = _bits_ptr(b, src, elem)
    dims = _coalesce(shape, dst_strides, src_strides)
    size = elem.itemsize
    n_in, d_in, s_in = dims[-1]
    outer = dims[:-1]
    # a transpose: the source is contiguous along another dimension than the destination
    tdim = next((k for k, (n, ds, ss) in enumerate(outer) if ss == 1), None) if s_in != 1 else None
    if tdim is not None and d_in == 1 and n_in >= 4:
        _tiled(ctx, dst, src, dims, tdim, parallel and total >= MIN_PARALLEL)
        return
    rows = math.prod(d[0] for d in outer)
    contiguous = d_in == 1 and s_in == 1
    # long contiguous rows are split into blocks too, so a few big rows still keep every thread busy
    chunk = n_in
    if contiguous and parallel and total >= MIN_PARALLEL and rows < TARGET_ITEMS:
        chunk = max(COPY_BLOCK, -(-n_in // -(-TARGET_ITEMS // rows)))
    nblk = -(-n_in // chunk)
    items = rows * nblk
    groups = items if parallel and total >= MIN_PARALLEL else 1
    per = items // groups
    start, end = partition(b, groups, ctx.tid, ctx.nthreads)
    with for_range(b, b.mul(start, i64(per)), b.mul(end, i64(per)), name="item") as w:
        r = b.udiv(w, i64(nblk)) if nblk > 1 else w
        do, so = _outer_offsets(b, r, outer) if outer else (i64(0), i64(0))
        if contiguous:
            if nblk > 1:
                c0 = b.mul(b.urem(w, i64(nblk)), i64(chunk))
                n = b.sub(smin(b, b.add(c0, i64(chunk)), i64(n_in)), c0)
                memcpy(b, elem_ptr(b, dst, b.add(do, c0)), elem_ptr(b, src, b.add(so, c0)), b.mul(n, i64(size)))
            elif n_in * size >= MEMCPY_MIN_BYTES:
                memcpy(b, elem_ptr(b, dst, do), elem_ptr(b, src, so), n_in * size)
            else:
                _short_row(b, dst, src, do, so, n_in, ctx.target.vector_lanes * 4 // max(size, 1))
        else:
            with for_range(b, 0, n_in, name="col") as c:
                v = b.load(elem_ptr(b, src, b.add(so, b.mul(c, i64(s_in)))), align=size)
                b.store(v, elem_ptr(b, dst, b.add(do, b.mul(c, i64(d_in)))), align=size)

def _short_row(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, do: ir.Value, so: ir.Value, n: int, lanes: int) -> None:
    lanes = max(1, min(lanes, 64))
    pos = 0
    while lanes >= 1:
        while n - pos >= lanes:
            v = vload(b, src, b.add(so, i64(pos)), lanes)
            vstore(b, v, dst, b.add(do, i64(pos)))
            pos += lanes
        lanes //= 2


def _tiled(ctx: EmitContext, dst: ir.Value, src: ir.Value, dims: list[tuple[int, int, int]], tdim: int,
           parallel: bool) -> None:
    """Copy in TILE x TILE tiles over dimension ``tdim`` (source-contiguous) and the innermost one."""
    b = ctx.builder
    n_t, d_t, _ = dims[tdim]
    n_in, _, s_in = dims[-1]
    others = [d for k, d in enumerate(dims[:-1]) if k != tdim]
    rows = math.prod(d[0] for d in others)
    tt = -(-n_t // TILE)
    ti = -(-n_in // TILE)
    items = rows * tt * ti if parallel else 1
    start, end = partition(b, items, ctx.tid, ctx.nthreads)
    total_tiles = rows * tt * ti
    lo = b.udiv(b.mul(start, i64(total_tiles)), i64(items))
    hi = b.udiv(b.mul(end, i64(total_tiles)), i64(items))
    with for_range(b, lo, hi, name="tile") as w:
        r = b.udiv(w, i64(tt * ti))
        rest = b.urem(w, i64(tt * ti))
        t0 = b.mul(b.udiv(rest, i64(ti)), i64(TILE))
        c0 = b.mul(b.urem(rest, i64(ti)), i64(TILE))
        do, so = _outer_offsets(b, r, others) if others else (i64(0), i64(0))
        t1 = b.select(b.icmp_signed("<", b.add(t0, i64(TILE)), i64(n_t)), b.add(t0, i64(TILE)), i64(n_t))
        c1 = b.select(b.icmp_signed("<", b.add(c0, i64(TILE)), i64(n_in)), b.add(c0, i64(TILE)), i64(n_in))
        with for_range(b, t0, t1, name="tr") as t:
            dt = b.add(do, b.mul(t, i64(d_t)))
            st = b.add(so, t)  # s_t == 1
            with for_range(b, c0, c1, name="tc") as c:
                v = b.load(elem_ptr(b, src, b.add(st, b.mul(c, i64(s_in)))))
                b.store(v, elem_ptr(b, dst, b.add(dt, c)))


# -- the kinds -------------------------------------------------------------------------------------

ANY = frozenset(ALL_KINDS)


def _transpose_rows(ctx: EmitContext, x: Operand, out: Operand, perm: Sequence[int]) -> bool:
    """A transpose with symbolic dims whose last output axis is the source's last (rows of the output are
    contiguous runs of the source, ``[1, s, 12, 64] -> [1, 12, s, 64]``): :func:`_copy_valid_rows`. False
    (nothing emitted) for any other transpose."""
    rank = out.type.rank
    if rank < 2 or perm[-1] != rank - 1:
        return False
    xs = contiguous_strides(x.type.shape)
    return _copy_valid_rows(ctx, x.ptr, out, [xs[p] for p in perm])


def _copy_valid_rows(ctx: EmitContext, src: ir.Value, out: Operand, src_strides: Sequence[int]) -> bool:
    """``out[i] = src[i * src_strides]`` (element strides per output axis, the last one 1) over the output
    rows that hold data (``row_space``) and the valid length of each: one ``memcpy`` per row. False (nothing
    emitted) when the output has no symbolic axis or is empty."""
    rank = out.type.rank
    if rank < 1 or out.type.size == 0 or src_strides[-1] != 1:
        return False
    b = ctx.builder
    space = row_space(b, out, rank - 1)
    if space is None and not is_sym(out, -1):
        return False
    n, size = out.type.shape[-1], out.type.elem.itemsize
    dims = out.type.shape[:-1]
    rows = math.prod(dims)
    count = space.count if space is not None else i64(rows)
    length = b.mul(extent(b, out, -1), i64(size))
    dst, src = (b.bitcast(p, ir.IntType(8).as_pointer()) for p in (out.ptr, src))
    start, end = partition(b, count if out.type.size >= MIN_PARALLEL else i64(1), ctx.tid, ctx.nthreads)
    if out.type.size < MIN_PARALLEL:
        start, end = b.mul(start, count), b.mul(end, count)
    with for_range(b, start, end, name="trow") as r:
        row = space.row(b, r) if space is not None else r
        coords = unravel(b, row, dims) if dims else []
        so: ir.Value = i64(0)
        for k, c in enumerate(coords):
            if dims[k] > 1:
                so = b.add(so, b.mul(c, i64(src_strides[k] * size)))
        memcpy(b, b.gep(dst, [b.mul(row, i64(n * size))]), b.gep(src, [so]), length)
    return True


def _valid_coords(b: ir.IRBuilder, out: Operand, axes: Sequence[int], index: ir.Value) -> list[ir.Value]:
    """The coordinates along ``axes`` of output position ``index`` in the dense range of their valid extents."""
    coords: list[ir.Value] = []
    rem = index
    for n, k in enumerate(reversed(axes)):
        if n == len(axes) - 1:
            coords.append(rem)
            break
        ext = extent(b, out, k)
        coords.append(b.urem(rem, ext))
        rem = b.udiv(rem, ext)
    return list(reversed(coords))


def _transpose_tiles(ctx: EmitContext, x: Operand, out: Operand, perm: Sequence[int]) -> bool:
    """A transpose with symbolic dims that moves the source's last axis (``[1, 12, s, 64] -> [1, 12, 64, s]``):
    TILE x TILE tiles of (the output axis the source is contiguous along, the output's last axis) over their
    valid extents, for each valid position of the other output axes. False for any other transpose."""
    rank = out.type.rank
    ts = perm.index(rank - 1) if rank >= 2 else rank - 1
    if ts == rank - 1 or out.type.size == 0:
        return False
    b, size = ctx.builder, out.type.elem.itemsize
    xs, os_ = contiguous_strides(x.type.shape), contiguous_strides(out.type.shape)
    others = [k for k in range(rank - 1) if k != ts]
    ext = {k: extent(b, out, k) for k in range(rank)}
    tt = b.udiv(b.add(ext[ts], i64(TILE - 1)), i64(TILE))
    tc = b.udiv(b.add(ext[rank - 1], i64(TILE - 1)), i64(TILE))
    count = b.mul(tt, tc)
    for k in others:
        count = b.mul(count, ext[k])
    start, end = partition(b, count if out.type.size >= MIN_PARALLEL else i64(1), ctx.tid, ctx.nthreads)
    if out.type.size < MIN_PARALLEL:
        start, end = b.mul(start, count), b.mul(end, count)
    dst, src = _bits_ptr(b, out.ptr, out.type.elem), _bits_ptr(b, x.ptr, x.type.elem)
    sc = xs[perm[rank - 1]]
    with for_range(b, start, end, name="ttile") as w:
        tile, r = b.urem(w, b.mul(tt, tc)), b.udiv(w, b.mul(tt, tc))
        do, so = i64(0), i64(0)
        for k, c in zip(others, _valid_coords(b, out, others, r) if others else []):
            do, so = b.add(do, b.mul(c, i64(os_[k]))), b.add(so, b.mul(c, i64(xs[perm[k]])))
        t0, c0 = b.mul(b.udiv(tile, tc), i64(TILE)), b.mul(b.urem(tile, tc), i64(TILE))
        t1, c1 = smin(b, b.add(t0, i64(TILE)), ext[ts]), smin(b, b.add(c0, i64(TILE)), ext[rank - 1])
        with for_range(b, t0, t1, name="tt") as t:
            dt, st = b.add(do, b.mul(t, i64(os_[ts]))), b.add(so, t)
            with for_range(b, c0, c1, name="tcol") as c:
                v = b.load(elem_ptr(b, src, b.add(st, b.mul(c, i64(sc)))), align=size)
                b.store(v, elem_ptr(b, dst, b.add(dt, c)), align=size)
    return True


@register_emitter("Transpose", elems=ANY)
def _transpose(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: only the valid entries when the last axis stays last (:func:`_transpose_rows`) or the
    source's last axis moves (:func:`_transpose_tiles`), else the whole bound (padding goes to padding)."""
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    perm = instr.attrs["perm"]
    if out.valid is not None and (_transpose_rows(ctx, x, out, perm) or _transpose_tiles(ctx, x, out, perm)):
        return
    xs = contiguous_strides(x.type.shape)
    emit_strided_copy(ctx, out.ptr, x.ptr, x.type.elem, out.type.shape, contiguous_strides(out.type.shape),
                      [xs[p] for p in perm])


@register_emitter("Slice", elems=ANY)
def _slice(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: only the output rows that hold data when the last axis is read with step 1
    (:func:`_copy_valid_rows`: GPT-2's query, key and value cut from one projection), else the whole bound."""
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    starts, steps = instr.attrs["starts"], instr.attrs["steps"]
    xs = contiguous_strides(x.type.shape)
    if math.prod(out.type.shape) == 0:
        return
    base = sum(s * st for s, st in zip(starts, xs))
    src = elem_ptr(ctx.builder, x.ptr, base)
    strides = [st * step for st, step in zip(xs, steps)]
    if out.valid is not None and _copy_valid_rows(ctx, src, out, strides):
        return
    emit_strided_copy(ctx, out.ptr, src, x.type.elem, out.type.shape, contiguous_strides(out.type.shape), strides)


@register_emitter("Broadcast", elems=ANY)
def _broadcast(ctx: EmitContext, instr: Instr) -> None:
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    shape = out.type.shape
    rank = len(shape)
    xshape = (1,) * (rank - x.type.rank) + tuple(x.type.shape)
    xs = contiguous_strides(xshape)
    emit_strided_copy(ctx, out.ptr, x.ptr, x.type.elem, shape, contiguous_strides(shape),
                      [0 if xshape[d] == 1 else xs[d] for d in range(rank)])


def _concat_symbolic(ctx: EmitContext, instr: Instr) -> None:
    """Concat along a symbolic axis: operand i (its valid extent along the axis, the rest of its bound) lands
    at the run-time offset the valid extents of the operands before it give; per operand, each outer row
    (the axes before ``axis``) is one ``memcpy`` of ``extent * inner`` elements."""
    b, out = ctx.builder, instr.outs[0]
    axis = instr.attrs["axis"] % out.type.rank
    shape, size = out.type.shape, out.type.elem.itemsize
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    if outer * inner == 0:
        return
    dst = b.bitcast(out.ptr, ir.IntType(8).as_pointer())
    start, end = partition(b, outer if out.type.size >= MIN_PARALLEL else 1, ctx.tid, ctx.nthreads)
    if out.type.size < MIN_PARALLEL:
        start, end = b.mul(start, i64(outer)), b.mul(end, i64(outer))
    pos: ir.Value = i64(0)
    for x in instr.ins:
        assert x is not None
        n = x.type.shape[axis]
        ext = x.extent(axis)
        count = i64(ext) if isinstance(ext, int) else smin(b, ext, i64(n))
        count = smin(b, count, b.sub(i64(shape[axis]), pos))  # never past the output's bound
        src = b.bitcast(x.ptr, ir.IntType(8).as_pointer())
        nbytes = b.mul(count, i64(inner * size))
        with for_range(b, start, end, name="cat") as o:
            d = b.mul(b.add(b.mul(o, i64(shape[axis])), pos), i64(inner * size))
            memcpy(b, b.gep(dst, [d]), b.gep(src, [b.mul(o, i64(n * inner * size))]), nbytes)
        pos = b.add(pos, count)


@register_emitter("Concat", elems=ANY, symbolic=True)
def _concat(ctx: EmitContext, instr: Instr) -> None:
    """Symbolic dims: along a symbolic concat axis, :func:`_concat_symbolic`; other symbolic axes are copied
    whole (padding to padding)."""
    out = instr.outs[0]
    axis = instr.attrs["axis"]
    if any(x is not None and x.valid is not None and x.type.sym is not None and x.type.sym[axis] is not None
           for x in instr.ins):
        _concat_symbolic(ctx, instr)
        return
    shape = out.type.shape
    ds = contiguous_strides(shape)
    pos = 0
    for x in instr.ins:
        assert x is not None
        part = x.type.shape
        dst = elem_ptr(ctx.builder, out.ptr, pos * ds[axis]) if part[axis] else out.ptr
        emit_strided_copy(ctx, dst, x.ptr, x.type.elem, part, ds, contiguous_strides(part))
        pos += part[axis]


@register_emitter("Reshape", "BitCast", elems=ANY)
def _reshape(ctx: EmitContext, instr: Instr) -> None:
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    n = min(x.type.nbytes, out.type.nbytes)
    if n:
        emit_strided_copy(ctx, ctx.builder.bitcast(out.ptr, ir.IntType(8).as_pointer()),
                          ctx.builder.bitcast(x.ptr, ir.IntType(8).as_pointer()), ElemKind.UINT8, (n,), (1,), (1,))


def _pad_ok(node: Node) -> bool:
    pads = node.attrs["pads"]
    x = node.inputs[0]
    if any(p < 0 for p in pads) or x is None:
        return False
    return node.attrs["mode"] == "constant" or x.type.size > 0


_NP_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@register_emitter("Pad", elems=ANY, when=_pad_ok, why="non-negative pads (and a non-empty input unless constant)")
def _pad(ctx: EmitContext, instr: Instr) -> None:
    """Output element = input at per-axis index tables (numpy's own padding of ``arange``), or the value."""
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    b = ctx.builder
    shape = out.type.shape
    if math.prod(shape) == 0:
        return
    rank = len(shape)
    pads = instr.attrs["pads"]
    mode = _NP_MODES[instr.attrs["mode"]]
    elem = x.type.elem
    tables = []
    for d in range(rank):
        width = (pads[d], pads[d + rank])
        if mode == "constant":
            t = np.pad(np.arange(x.type.shape[d], dtype=np.int64), width, mode="constant", constant_values=-1)
        else:
            t = np.pad(np.arange(x.type.shape[d], dtype=np.int64), width, mode=mode)  # type: ignore[call-overload]
        tables.append(t)
    xs = contiguous_strides(x.type.shape)
    # per-axis source offsets in elements (-1: padding)
    far = -(1 << 40)  # any sum holding one of these stays negative
    offs = [np.where(t >= 0, t * xs[d], far) for d, t in enumerate(tables)]
    value = np.asarray(instr.attrs["value"]).reshape(()).astype(elem.dtype)
    fill = ir.Constant(bits_type(elem), int(value.reshape(1).view(f"u{elem.itemsize}")[0]))
    dst = _bits_ptr(b, out.ptr, elem)
    src = _bits_ptr(b, x.ptr, elem)
    inner = offs[-1]
    tab_inner = ctx.add_constant(inner.astype(np.int64), "pad_inner")
    outer_shape = shape[:-1]
    rows = math.prod(outer_shape)
    row_off = np.zeros(rows, dtype=np.int64)
    if rank > 1:
        grids = [g.reshape(-1) for g in np.meshgrid(*[offs[d] for d in range(rank - 1)], indexing="ij")]
        pad = np.any(np.stack([g < 0 for g in grids]), axis=0)
        row_off = np.where(pad, far, np.sum(np.stack([np.maximum(g, 0) for g in grids]), axis=0))
    tab_rows = ctx.add_constant(row_off.astype(np.int64), "pad_rows")
    n_in = shape[-1]
    start, end = partition(b, rows if rows * n_in >= MIN_PARALLEL else 1, ctx.tid, ctx.nthreads)
    per = rows if rows * n_in < MIN_PARALLEL else 1
    with for_range(b, b.mul(start, i64(per)), b.mul(end, i64(per)), name="row") as r:
        ro = b.load(elem_ptr(b, tab_rows, r))
        with for_range(b, 0, n_in, name="col") as c:
            io = b.load(elem_ptr(b, tab_inner, c))
            s = b.add(ro, io)
            ok = b.icmp_signed(">=", s, i64(0))
            safe = b.select(ok, s, i64(0))
            v = b.load(elem_ptr(b, src, safe)) if x.type.size else fill
            b.store(b.select(ok, v, fill), elem_ptr(b, dst, b.add(b.mul(r, i64(n_in)), c)))


@register_emitter("Tile", elems=ANY)
def _tile(ctx: EmitContext, instr: Instr) -> None:
    x, out = instr.ins[0], instr.outs[0]
    assert x is not None
    reps = instr.attrs["repeats"]
    xshape = x.type.shape
    if x.type.rank == 0 or math.prod(out.type.shape) == 0:
        emit_strided_copy(ctx, out.ptr, x.ptr, x.type.elem, (1,) if x.type.size else (0,), (1,), (1,))
        return
    # view the output as [r0, n0, r1, n1, ...]: the input repeats along every r axis
    shape, dst_s, src_s = [], [], []
    os_ = contiguous_strides(out.type.shape)
    xs = contiguous_strides(xshape)
    for d, (r, n) in enumerate(zip(reps, xshape)):
        shape += [r, n]
        dst_s += [os_[d] * n, os_[d]]
        src_s += [0, xs[d]]
    emit_strided_copy(ctx, out.ptr, x.ptr, x.type.elem, shape, dst_s, src_s)


__all__ = ["I64", "contiguous_strides", "emit_strided_copy"]
