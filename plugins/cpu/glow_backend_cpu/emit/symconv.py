"""Convolutions and pools over symbolic spatial axes (issue 28): the static kernels, run at the bound on an
input whose padding is made to mean what the window expects.

In a function compiled for symbolic dims an image ``[N, C, H, W]`` is laid out at its bound ``[N, C, Hb, Wb]``
and a run fills the leading corner (``glow_backend_cpu/symbolic.py``). A valid output of a window of extent
``e`` (dilated kernel), stride ``s`` and pads ``pb``/``pe`` is one of the first ``floor((H + pb + pe - e) / s)
+ 1``; it reads input rows up to ``H + pe - 1`` (``ceil_mode``: ``H + pe + s - 2``), at most ``pe`` (``pe + s -
1``) rows past the run's size -- where the static kernel, laid out for ``Hb``, finds the padding region of the
buffer instead of its own padding. So the kernel here first fills that region (rows ``H..Hb`` of every plane,
columns ``W..Wb`` of its valid rows) with the value the window's own padding has:

- a convolution (Conv, FusedConv; every path of ``conv.py``: GEMM, Winograd, depthwise, direct): zeros.
  Winograd mixes a tile's inputs with cancelling coefficients, so the whole region is filled, not only the
  ``pe`` rows a direct window reads (garbage there would not cancel exactly in floating point);
- MaxPool: the lowest value (``-inf``), which no maximum keeps (a valid window holds a valid entry);
- AvgPool with ``count_include_pad`` (and no ``ceil_mode``), or without pads: zeros (the divisor is the
  window's size either way);
- a global AvgPool (the window is the bound's spatial extent): its own kernel, the mean of the valid entries;
  a global MaxPool: ``-inf`` and the static kernel.

The static kernel then computes every output of the bound (the valid corner is exact; the rest is padding),
so a run costs the bound's work: computing only the valid output rows is a later optimization. Each thread
fills the whole region before its share of the work (the same values: no barrier is needed). At emit time
the output's size expression is checked against the window formula over a grid of symbol values (the
pipeline derives the sizes from two imports; a kernel that disagreed would read or write the wrong rows).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir

from glow_backend_cpu.emit.context import EMITTERS, SYMBOLIC_EMITTERS, EmitContext, Emitter, Instr, Operand
from glow_backend_cpu.emit.dtypes import storage_type
from glow_backend_cpu.emit.symdims import extent, sym_axes, unsupported
from glow_backend_cpu.helpers import F32, F64, carried_loop, elem_ptr, for_range, i64, memset, partition
from glow_core.ir.defs.nn import window_out_dim
from glow_core.ir.symbolic import SymExpr
from glow_core.ir.types import ElemKind

#: the values each kind's window expects beyond the input (None: zeros), per element kind
LOWEST: dict[ElemKind, float] = {ElemKind.FLOAT32: -math.inf, ElemKind.FLOAT16: -math.inf,
                                 ElemKind.FLOAT64: -math.inf, ElemKind.INT8: -128.0, ElemKind.INT8Q: -128.0,
                                 ElemKind.UINT8: 0.0, ElemKind.UINT8Q: 0.0}

#: the sizes each symbol takes when an output's size expression is checked against the window formula
CHECK_SIZES = range(1, 12)


# -- the padding region ----------------------------------------------------------------------------------

def _fill(b: ir.IRBuilder, x: Operand, start: ir.Value, count: ir.Value, value: float | None) -> None:
    """``count`` elements of ``x`` from ``start`` set to ``value`` (None: zero bytes)."""
    if value is None:
        nbytes = b.mul(count, i64(_bytes(x)))
        memset(b, elem_ptr(b, x.ptr, start), 0, nbytes)
        return
    t = storage_type(x.type.elem)
    c = ir.Constant(t, value) if isinstance(t, (ir.FloatType, ir.HalfType, ir.DoubleType)) else \
        ir.Constant(t, int(value))
    with for_range(b, start, b.add(start, count), name="padfill") as i:
        b.store(c, elem_ptr(b, x.ptr, i))


def _bytes(x: Operand) -> int:
    return int(np.dtype(x.type.dtype).itemsize)


def fill_padding(ctx: EmitContext, x: Operand, value: float | None) -> None:
    """Rows ``H..Hb`` of every valid plane of ``x`` (``[N, C, H(, W)]``) and columns ``W..Wb`` of its valid rows
    set to ``value`` (None: zeros)."""
    b = ctx.builder
    shape = x.type.shape
    sym = set(sym_axes(x))
    rank = len(shape)
    if rank == 3:  # 1-D: one row per plane
        hb, wb, h_sym = 1, shape[2], False
        h: ir.Value = i64(1)
    else:
        hb, wb, h_sym = shape[2], shape[3], 2 in sym
        h = extent(b, x, 2)
    w_sym = rank - 1 in sym
    w = extent(b, x, rank - 1)
    planes = b.mul(extent(b, x, 0), i64(shape[1]))
    with for_range(b, 0, planes, name="plane") as p:
        base = b.mul(p, i64(hb * wb))
        if h_sym:
            _fill(b, x, b.add(base, b.mul(h, i64(wb))), b.mul(b.sub(i64(hb), h), i64(wb)), value)
        if w_sym:
            with for_range(b, 0, h, name="padrow") as r:
                _fill(b, x, b.add(base, b.add(b.mul(r, i64(wb)), w)), b.sub(i64(wb), w), value)


# -- checks -----------------------------------------------------------------------------------------------

def _envs(exprs: list[SymExpr]) -> list[dict[str, int]]:
    names = sorted({s for e in exprs for s in e.symbols})
    out = [{s: v for s in names} for v in CHECK_SIZES]
    out += [{s: v + k for k, s in enumerate(names)} for v in CHECK_SIZES]
    return out + [dict(zip(names, combo)) for combo in itertools.islice(
        itertools.product((1, 2, 5), repeat=len(names)), 64)]


def check_windows(instr: Instr, x: Operand, y: Operand, kernel: list[int]) -> None:
    """Each symbolic spatial axis of ``y`` has the window formula's size at every checked size (else the
    kind is unsupported here: the core compiles per shape)."""
    a = instr.attrs
    nd = x.type.rank - 2
    st, dl, pads = a["strides"], a.get("dilations", [1] * nd), a["pads"]
    ceil = bool(a.get("ceil_mode", False))
    xs, ys = x.type.sym or (None,) * x.type.rank, y.type.sym or (None,) * y.type.rank
    if any(e is not None for e in (*xs[1:2], *ys[1:2])):
        raise unsupported(instr.kind, "a symbolic channel axis")
    for k in range(nd):
        ex, ey = xs[2 + k], ys[2 + k]
        if ex is None and ey is None:
            continue
        if ex is None or ey is None:
            raise unsupported(instr.kind, "a window that makes a symbolic axis fixed")
        for env in _envs([ex, ey]):
            size = ex.evaluate(env)
            try:
                want = window_out_dim(size, kernel[k], st[k], dl[k], pads[k], pads[k + nd], ceil)
            except Exception:  # noqa: BLE001  (a size the window does not fit: no run has it)
                continue
            if ey.evaluate(env) != want:
                raise unsupported(instr.kind, f"output size {ey} where the window gives {want} at input {size}")


def _is_global(instr: Instr, x: Operand) -> bool:
    a = instr.attrs
    return list(a.get("kernel_shape", ())) == list(x.type.shape[2:]) and not any(a["pads"]) and \
        all(s == 1 for s in a["strides"])


# -- the kernels --------------------------------------------------------------------------------------------

def emit_global_avg(ctx: EmitContext, instr: Instr) -> None:
    """The mean of each plane's valid entries (float32, summed in float64)."""
    y, x = instr.outs[0], instr.ins[0]
    assert x is not None
    if x.type.elem is not ElemKind.FLOAT32:
        raise unsupported(instr.kind, f"a global average of {x.type.elem.name}")
    b = ctx.builder
    shape = x.type.shape
    hb, wb = (1, shape[2]) if len(shape) == 3 else (shape[2], shape[3])
    h = i64(1) if len(shape) == 3 else extent(b, x, 2)
    w = extent(b, x, len(shape) - 1)
    count = b.sitofp(b.mul(h, w), F64)
    planes = b.mul(extent(b, x, 0), i64(shape[1]))
    start, end = partition(b, planes, ctx.tid, ctx.nthreads)
    with for_range(b, start, end, name="gap") as p:
        base = b.mul(p, i64(hb * wb))

        def row(b: ir.IRBuilder, r: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            rb = b.add(base, b.mul(r, i64(wb)))

            def col(b: ir.IRBuilder, c: ir.Value, acc2: list[ir.Value]) -> list[ir.Value]:
                return [b.fadd(acc2[0], b.fpext(b.load(elem_ptr(b, x.ptr, b.add(rb, c))), F64))]

            return carried_loop(b, 0, w, acc, col, name="gapc")

        total = carried_loop(b, 0, h, [ir.Constant(F64, 0.0)], row, name="gapr")[0]
        b.store(b.fptrunc(b.fdiv(total, count), F32), elem_ptr(b, y.ptr, p))


def _wrap(static: Emitter) -> Emitter:
    """``static`` behind the padding fill its kind's window needs, when the input has symbolic spatial axes."""

    def emit(ctx: EmitContext, instr: Instr) -> None:
        x, y = instr.ins[0], instr.outs[0]
        assert x is not None
        if not set(sym_axes(x)) - {0} or y.type.size == 0:
            static(ctx, instr)
            return
        if x.type.rank not in (3, 4):
            raise unsupported(instr.kind, f"a {x.type.rank - 2}-D window")
        if x.const_value is not None:  # (its padding is filled in place: a constant region is shared)
            raise unsupported(instr.kind, "a window over a constant")
        kind = instr.kind
        if kind in ("AvgPool", "MaxPool") and _is_global(instr, x):
            if kind == "AvgPool":
                emit_global_avg(ctx, instr)
                return
            fill_padding(ctx, x, _lowest(instr, x))
            static(ctx, instr)
            return
        w = instr.ins[1] if len(instr.ins) > 1 else None
        kernel = list(w.type.shape[2:]) if kind in ("Conv", "FusedConv") and w is not None \
            else list(instr.attrs["kernel_shape"])
        check_windows(instr, x, y, kernel)
        fill_padding(ctx, x, _pad_value(instr, x))
        static(ctx, instr)

    emit.__name__ = f"symbolic_{getattr(static, '__name__', 'emit')}"
    return emit


def _lowest(instr: Instr, x: Operand) -> float:
    v = LOWEST.get(x.type.elem)
    if v is None:
        raise unsupported(instr.kind, f"a max over {x.type.elem.name}")
    return v


def _pad_value(instr: Instr, x: Operand) -> float | None:
    """What the padding region must hold for ``instr``'s window (None: zeros)."""
    if instr.kind == "MaxPool":
        return _lowest(instr, x)
    if instr.kind == "AvgPool":
        a = instr.attrs
        if a.get("ceil_mode") or (any(a["pads"]) and not a.get("count_include_pad")):
            raise unsupported("AvgPool", "an average that excludes the padding (or with ceil_mode)")
    return None


#: the kinds whose static emitters this module wraps
WRAPPED = ("Conv", "FusedConv", "MaxPool", "AvgPool")


def install(table: dict[str, Callable[..., None]] = EMITTERS) -> None:
    """Put the wrapped emitters in place of the static ones (the kinds then read the run's sizes)."""
    for kind in WRAPPED:
        static = table.get(kind)
        if static is None or getattr(static, "__name__", "").startswith("symbolic_"):
            continue
        dict.__setitem__(table, kind, _wrap(static))
        SYMBOLIC_EMITTERS.add(kind)


install()

__all__ = ["WRAPPED", "check_windows", "emit_global_avg", "fill_padding", "install"]
