"""Register-blocked fp32 GEMM machinery shared by the Conv and MatMul emitters.

``C[m, n] (+)= sum_k A[m, k] * B[k, n]`` over ``BG`` independent problems
(batch x group). The emitted code follows BLIS:

- a **micro-kernel** (one internal LLVM function per variant) keeps an
  ``rows x (nvec * lanes)`` block of C in vector registers (6 x 64 with
  AVX-512: 24 ``<16 x float>`` accumulators); per k it loads ``nvec`` vectors
  of B, broadcasts one element of A per row and issues one FMA per
  accumulator. Its epilogue adds the bias (per row or per column) and applies
  the activation (none / relu / clip) before the only store of the block;
- **A** is either packed at compile time into MR-row panels (``[panel][K][MR]``,
  zero-padded) when it is a constant (a filter, an FC weight), or read in place
  (row stride ``lda``);
- **B** is either packed at compile time into NR-column panels
  (``[panel][K][NR]``) when constant, read in place, or packed per tile and
  K-block into this thread's scratch by a caller-supplied packer (plain rows
  for MatMul and 1x1 convolutions, im2col for the others);
- the **driver** splits the ``BG x N-tiles x M-panels`` work items over the
  threads in contiguous ranges of equal cost (M-panels innermost, so a thread
  packs each B tile once and a problem with a single N tile still splits over
  M; items of a narrow last N tile weigh less), and blocks K so a packed B
  tile stays in cache (at most ``KC_MAX`` rows, L2; a convolution's im2col
  tile at most ``KC_L1`` rows, L1).

Everything is specialized on compile-time shapes; only the thread id and the
thread count are run-time values (and, in a micro-kernel shared by several
variants, B's row stride and the residual start: ``gemm_merge.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir

from glow_backend_cpu.helpers import (
    I64,
    carried_loop,
    for_range,
    partition,
    smax,
    smin,
    splat,
)

from glow_backend_cpu.emit.bf16 import dot2
from glow_backend_cpu.emit.gemm_dispatch import (
    dispatch_kind,
    dispatch_narrow,
    dispatch_rows,
    dispatch_variant,
    kblock_bounds,
    kblock_flags,
    kind_table,
    narrow_tile,
    valid_kblocks,
)
from glow_backend_cpu.emit.gemm_merge import FLAG_C_SRC, flag_set, flag_thunk, ldb_of, shared_spec, static_flags
from glow_backend_cpu.emit.gemm_share import weighted_share, weighted_share_dyn
from glow_backend_cpu.emit.taps import taps_sum
from glow_backend_cpu.emit.vecops import (
    activation,
    c64,
    F32P,
    fma,
    fn_cache,
    Geometry,
    gep,
    load_maybe_masked,
    module_of,
    prefetch_lines,
    store_maybe_masked,
    unique_name,
    vload,
    vty,
)

#: K is blocked so a packed B tile holds at most this many rows (KC_MAX x NR floats: 256 KiB at NR=64)
KC_MAX = 1024
#: K block of a convolution's im2col tile: ``KC_L1 x (NR + lanes)`` floats (40 KiB with AVX-512) stay in L1
#: while every M panel of the item streams past it; with 1024-row tiles read from L2 the 3x3 layers of
#: ResNet-50 ran 15-25 % slower on one thread (the C block is reloaded once per K block, which is cheap)
KC_L1 = 128
#: ``GemmPlan.prefetch_b`` applies up to this many M panels: beyond, each B block is reused by enough panels to
#: hide its streaming (2 threads, [M, 768] x [768, 3072] chains: 0.67-0.78x the time at M = 2..48, 0.82 at
#: 64, 0.91 at 128, 0.95 at 256, no change at 384 and 768)
PREFETCH_B_PANELS = 64


# -- the micro-kernel -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UKernel:
    """One micro-kernel variant; emitted once per module as an internal function.

    Call: ``uk(a, a_stride, b, c, ldc, kc, flags, bias, bias_rs, pf, c0, aux)``. The K block is summed from
    zero, then added to C, or with flags bit 0 "first K block" to nothing (with ``c_src``: to the block at
    ``c0``, row stride ``ldc``); flags bit 1 "last K block" applies bias and activation.
    A element (i, k): ``a[(i // mr_panel) * a_stride + k * mr_panel + i % mr_panel]`` when packed,
    ``a[i + k * a_stride]`` with ``a_cols``, ``a[i * a_stride + k]`` otherwise.
    B element (k, j): ``b[k * ldb + j]``. Bias "row": ``bias[i * bias_rs]``; "col":
    ``bias[i * bias_rs + j]``.
    """

    lanes: int
    rows: int
    nvec: int
    tail: int  # valid lanes of the last vector
    a_packed: bool
    mr_panel: int
    ldb: int
    b_align: int
    bias: str = "none"
    act: str = "none"
    lo: float = -math.inf
    hi: float = math.inf
    unroll: int = 2
    #: A element (i, k) at ``a[i + k * a_stride]`` (a packed B tile read transposed); overrides a_packed
    a_cols: bool = False
    #: cache lines of ``pf`` to prefetch into L2 per ``unroll`` k steps (0: none): the operand the next call
    #: streams from memory, fetched while this call computes
    prefetch: int = 0
    #: the first K block adds the block at ``c0`` (a residual; it may be C itself), and prefetches the next M
    #: panel's block (``c0 + rows * ldc``) into L2: read from L3 when it is needed, it stalled each call
    #: (ResNet-50's 1x1 projections with a residual ran 10 % slower)
    c_src: bool = False
    #: B read in place from a stride-1 convolution's input: B row ``k = c * T + t`` (T taps) is
    #: ``b + c * tap_stride + taps[t]``, its vector j loaded under the 16-bit lane mask
    #: ``aux[t * tap_masks + j]`` (padding, and pixels past the plane, read as 0); K blocks hold whole channels
    taps: tuple[int, ...] = ()
    tap_stride: int = 0
    tap_masks: int = 0
    #: which (tap, vector) loads go under their masks, ``tap_masked[t * nvec + j]`` (the others are whole)
    tap_masked: tuple[bool, ...] = ()
    #: "amx" / "native" / "emulate": A and B hold bf16 pairs, each k step is two k (``bf16.py``); "": float32
    bf16: str = ""
    #: a shared variant (``gemm_merge.py``): ``ldb`` and ``c_src`` come with the flags
    dynamic: bool = False


UK_ARGS = [F32P, I64, F32P, F32P, I64, I64, I64, F32P, I64, F32P, F32P, F32P]



def get_ukernel(mod: ir.Module, spec: UKernel) -> ir.Function:
    """The micro-kernel of ``spec`` in ``mod``: variants that differ only in what ``gemm_merge.shared_spec``
    moves to run time share one function, each called through an inlined thunk that sets its flags."""
    cache = fn_cache(mod)
    fn = cache.get(spec)
    if fn is not None:
        return fn
    shared = shared_spec(spec)
    if spec.bf16 == "amx":
        from glow_backend_cpu.emit.amx import build_amx_ukernel  # (amx.py builds on this module's epilogue)
        fn = build_amx_ukernel(mod, spec, UK_ARGS, _finish, _add_start)
    elif shared is not None:
        fn = flag_thunk(mod, get_ukernel(mod, shared), static_flags(spec))
    else:
        fn = _build_ukernel(mod, spec)
    cache[spec] = fn
    return fn


def _b_row(b: ir.IRBuilder, s: UKernel, brow: ir.Value) -> list[ir.Value]:
    """The ``nvec`` vectors of one row of the B tile at ``brow``. B read in place (not a packed tile, whose rows
    are zero-padded to whole vectors): the tail tile's last vector loads only its valid lanes, since past the
    last row's end may be the end of the caller's memory."""
    W, V = s.lanes, s.nvec
    in_place_tail = s.b_align < 64 and s.tail < W
    return [load_maybe_masked(b, gep(b, brow, j * W), W, s.tail) if in_place_tail and j == V - 1 else
            vload(b, gep(b, brow, j * W), W, min(s.b_align, 64) if j == 0 else min(s.b_align, W * 4))
            for j in range(V)]


def _build_ukernel(mod: ir.Module, s: UKernel) -> ir.Function:
    a_kind = 'c' if s.a_cols else 'p' if s.a_packed else 'r'
    name = unique_name(mod, f"glow.uk.{s.rows}x{s.nvec}x{s.lanes}.t{s.tail}.{a_kind}{'.taps' if s.taps else ''}")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), UK_ARGS), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")  # shared by every call site of the module: compiled once
    c_src = s.c_src or s.dynamic
    for i in (0, 2, 7) if c_src else (0, 2, 3, 7):  # c0 may be C itself (an in-place residual)
        fn.args[i].add_attribute("noalias")
    a, a_stride, bp, cp, ldc, kc, flags, bias, bias_rs, pf, c0, aux = fn.args
    W, R, V = s.lanes, s.rows, s.nvec
    vt = vty(W)
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)

    a_rows = _a_rows(b, s, a, a_stride)
    c_rows = [gep(b, cp, b.mul(c64(i), ldc)) for i in range(R)]
    a_step = a_stride if s.a_cols else c64(s.mr_panel if s.a_packed else 1)
    ldb = ldb_of(b, flags) if s.dynamic else c64(s.ldb)

    first, src_on = _first_block(b, s, flags, c0, ldc)
    U = max(1, s.unroll)

    def k_step(b: ir.IRBuilder, k: ir.Value, acc: list[list[ir.Value]]) -> list[list[ir.Value]]:
        bv = _b_row(b, s, gep(b, bp, b.mul(k, ldb)))
        ka = b.mul(k, a_step)
        out = []
        for i in range(R):
            av = splat(b, b.load(gep(b, a_rows[i], ka), align=4), W)
            out.append([dot2(b, s.bf16, av, bv[j], acc[i][j]) if s.bf16 else fma(b, av, bv[j], acc[i][j])
                        for j in range(V)])
        return out

    Acc = list[list[ir.Value]]

    def k_loop(b: ir.IRBuilder, init_sets: list[Acc], start: ir.Value, stop: ir.Value, step: int,
               tag: str) -> list[Acc]:
        """A loop over k carrying accumulator sets in phis (step u feeds set u % len(sets))."""
        S = len(init_sets)

        def flat(sets: list[Acc]) -> list[ir.Value]:
            return [v for st in sets for row in st for v in row]

        def nested(vals: list[ir.Value]) -> list[Acc]:
            return [[vals[(t * R + i) * V:(t * R + i + 1) * V] for i in range(R)] for t in range(S)]

        def body(b: ir.IRBuilder, k: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
            cur = nested(vals)
            if s.prefetch and step > 1:
                prefetch_lines(b, gep(b, pf, b.mul(k, c64(s.prefetch * 16 // step))), s.prefetch)
            for u in range(step):
                cur[u % S] = k_step(b, b.add(k, c64(u)) if u else k, cur[u % S])
            return flat(cur)

        return nested(carried_loop(b, start, stop, flat(init_sets), body, step=step, name=tag))

    # every K block sums from zero and is then added to C (or, first, to c0 / nothing): blocked summation,
    # whose rounding error grows with the block length instead of K
    zeros = [[ir.Constant(vt, None)] * V for _ in range(R)]
    if s.taps:
        acc = taps_sum(b, s, zeros, a_rows, a_step, bp, kc, pf, aux)
    else:
        kmain = b.mul(b.sdiv(kc, c64(U)), c64(U))
        # few accumulators (a GEMV-like block) cannot hide the FMA latency: keep independent partial sums
        S = 1 if R * V >= 8 else min(U, -(-8 // (R * V)))
        sets = k_loop(b, [zeros] * S, c64(0), kmain, U, "kmain")
        acc = sets[0]
        for other in sets[1:]:
            acc = [[b.fadd(acc[i][j], other[i][j]) for j in range(V)] for i in range(R)]
        if U > 1:
            acc = k_loop(b, [acc], kmain, kc, 1, "krest")[0]
    acc = _add_start(b, s, acc, first, c_rows, [gep(b, c0, b.mul(c64(i), ldc)) for i in range(R)] if c_src else None,
                     src_on)

    _finish(b, s, acc, flags, bias, bias_rs, c_rows)
    b.ret_void()
    return fn


def _first_block(b: ir.IRBuilder, s: UKernel, flags: ir.Value, c0: ir.Value,
                 ldc: ir.Value) -> tuple[ir.Value, ir.Value | None]:
    """(first K block?, does it start from c0? (a shared kernel: its flag; else None)). A kernel that may
    start from c0 prefetches the residual block of the next M panel (the next R rows, read by its first K
    block, the only one that adds it) into L2 while this call computes."""
    first = b.icmp_signed("!=", b.and_(flags, c64(1)), c64(0))
    src_on = flag_set(b, flags, FLAG_C_SRC) if s.dynamic else None
    if s.c_src or s.dynamic:
        with b.if_then(first if src_on is None else b.and_(first, src_on)):
            for i in range(s.rows):
                prefetch_lines(b, gep(b, c0, b.mul(c64(s.rows + i), ldc)), s.nvec)
    return first, src_on


def _a_rows(b: ir.IRBuilder, s: UKernel, a: ir.Value, a_stride: ir.Value) -> list[ir.Value]:
    """Pointers to element (i, 0) of A for each row i of the block."""
    rows = []
    for i in range(s.rows):
        if s.a_cols:
            off = c64(i)
        elif s.a_packed:
            off = b.add(b.mul(c64(i // s.mr_panel), a_stride), c64(i % s.mr_panel))
        else:
            off = b.mul(c64(i), a_stride)
        rows.append(gep(b, a, off))
    return rows


def _finish(b: ir.IRBuilder, s: UKernel, acc: list[list[ir.Value]], flags: ir.Value, bias: ir.Value,
            bias_rs: ir.Value, c_rows: list[ir.Value]) -> None:
    """Store the block; on the last K block (flags bit 1) after adding the bias and applying the activation."""
    W, R, V = s.lanes, s.rows, s.nvec
    vt = vty(W)
    fn = b.block.function

    def vvalid(j: int) -> int:
        return s.tail if j == V - 1 else W

    last = b.icmp_signed("!=", b.and_(flags, c64(2)), c64(0))
    epi = fn.append_basic_block("epilogue")
    store = fn.append_basic_block("store")
    pre_epi = b.block
    b.cbranch(last, epi, store)
    b.position_at_end(epi)
    fin = []
    for i in range(R):
        row = []
        for j in range(V):
            v = acc[i][j]
            if s.bias == "row":
                v = b.fadd(v, splat(b, b.load(gep(b, bias, b.mul(c64(i), bias_rs)), align=4), W))
            elif s.bias == "col":
                bptr = gep(b, gep(b, bias, b.mul(c64(i), bias_rs)), j * W)
                v = b.fadd(v, load_maybe_masked(b, bptr, W, vvalid(j)))
            row.append(activation(b, v, s.act, s.lo, s.hi))
        fin.append(row)
    epi_end = b.block
    b.branch(store)
    b.position_at_end(store)
    phis = [[b.phi(vt) for _ in range(V)] for _ in range(R)]
    for i in range(R):
        for j in range(V):
            phis[i][j].add_incoming(acc[i][j], pre_epi)
            phis[i][j].add_incoming(fin[i][j], epi_end)
    for i in range(R):
        for j in range(V):
            store_maybe_masked(b, phis[i][j], gep(b, c_rows[i], j * W), vvalid(j))


Block = list[list[ir.Value]]


def _phis(b: ir.IRBuilder, incoming: list[tuple[Block, ir.Block]]) -> Block:
    """One phi per value of the blocks in ``incoming`` (at the builder's block, which they all branch to)."""
    first = incoming[0][0]
    out = [[b.phi(v.type) for v in row] for row in first]
    for vals, blk in incoming:
        for i, row in enumerate(vals):
            for j, v in enumerate(row):
                out[i][j].add_incoming(v, blk)
    return out


def _add_start(b: ir.IRBuilder, s: UKernel, acc: list[list[ir.Value]], first: ir.Value, c_rows: list[ir.Value],
               src_rows: list[ir.Value] | None, src_on: ir.Value | None = None) -> list[list[ir.Value]]:
    """``acc`` plus the block it continues: C after the first K block; on the first, the block at
    ``src_rows`` (a residual; when ``src_on``, only if it is true) or nothing."""
    W, R, V = s.lanes, s.rows, s.nvec
    fn = b.block.function

    def plus(rows: list[ir.Value]) -> list[list[ir.Value]]:
        return [[b.fadd(acc[i][j], load_maybe_masked(b, gep(b, rows[i], j * W), W, s.tail if j == V - 1 else W))
                 for j in range(V)] for i in range(R)]

    with_c = fn.append_basic_block("add.c")
    joined = fn.append_basic_block("add.done")
    incoming: list[tuple[Block, ir.Block]] = []
    if src_rows is None:
        incoming.append((acc, b.block))
        b.cbranch(first, joined, with_c)
    else:
        with_src = fn.append_basic_block("add.src")
        if src_on is None:
            b.cbranch(first, with_src, with_c)
        else:
            on_first = fn.append_basic_block("add.first")
            b.cbranch(first, on_first, with_c)
            b.position_at_end(on_first)
            incoming.append((acc, on_first))
            b.cbranch(src_on, with_src, joined)
        b.position_at_end(with_src)
        incoming.append((plus(src_rows), b.block))
        b.branch(joined)
    b.position_at_end(with_c)
    incoming.append((plus(c_rows), b.block))
    b.branch(joined)
    b.position_at_end(joined)
    return _phis(b, incoming)


# -- the driver -------------------------------------------------------------------------------------------------

#: (builder, bg, m0) -> pointer to A element (m0, k0=0) and the a_stride argument
APtr = Callable[[ir.IRBuilder, ir.Value, ir.Value], tuple[ir.Value, ir.Value]]
#: (builder, bg, n0, nt, k0) -> pointer to B element (k0, n0) in a [k][ldb] layout (constant or in place)
BPtr = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value, ir.Value], ir.Value]
#: (builder, bg, n0, width, k0, kc, kb, dst): pack B rows k0..k0+kc, columns n0..n0+width into dst[k][NR]
BPack = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value, ir.Value], None]
#: (builder, bg, m0, n0) -> pointer (C or bias) for the block at (m0, n0)
CPtr = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], ir.Value]
#: (builder, bg, mp0, mp1): convert the rows of A's M panels mp0..mp1 to where ``a_ptr`` points (bf16 pairs
#: from float32 activations)
AConv = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], None]


#: a product of at most this many k sums them one after another (one FMA chain per output element, as
#: onnxruntime and numpy's BLAS do), not in the partial sums a narrow block keeps to hide the FMA latency: in
#: float32 the order decides where terms near the float range overflow (fuzz seed 5, case 2090: a MatMul with
#: K = 4 gave NaN where both give -1.1e38), and so short a sum gains nothing from them
SEQUENTIAL_K = 32


@dataclass
class GemmPlan:
    """A batch of ``BG`` GEMMs ``C[M, N] = A[M, K] B[K, N]`` and how to reach their operands."""

    geo: Geometry
    BG: int
    M: int
    N: int
    K: int
    a_ptr: APtr
    a_packed: bool
    c_ptr: CPtr
    ldc: int
    #: B: constant/in place (b_ptr, with ldb) or packed per tile (b_pack)
    b_ptr: BPtr | None = None
    ldb: int = 0
    b_align: int = 4
    b_pack: BPack | None = None
    #: row stride (floats) of the packed B tile; 0: NR
    pack_ld: int = 0
    #: K block boundaries (k0 values, strictly increasing, first 0); default: even blocks of at most KC_MAX
    k_blocks: list[int] | None = None
    #: (packed A) each micro-kernel call prefetches the next M panel's A block into L2
    prefetch_a: bool = False
    #: (B constant, packed ``[panel][K][NR]``: the block after each one is the next in memory) with a few M
    #: panels, the calls over one B block prefetch the next block into L2, each its share: the first M panel
    #: of a block no longer waits for it to stream in from L3 or memory while the other panels compute
    prefetch_b: bool = False
    #: C starts from this block (row stride ldc, e.g. a residual to add) instead of zero
    c_init: CPtr | None = None
    bias: str = "none"
    bias_ptr: CPtr | None = None
    bias_rs: int = 0
    act: str = "none"
    lo: float = -math.inf
    hi: float = math.inf
    #: k steps per iteration of the micro-kernel's loop (a narrow block also keeps that many partial sums)
    unroll: int = 2
    #: B read in place by taps (see ``UKernel.taps``; ``b_ptr`` gives the tile's base, a tile's masks are
    #: ``geo.nvec`` a tap): the taps' offsets, the channel stride, the tile's mask table
    #: ``(builder, nt) -> pointer``, and each N tile's kind, an index into ``tap_kinds``: (vectors, valid
    #: lanes of the last, which (tap, vector) loads go under their masks)
    taps: tuple[int, ...] = ()
    tap_stride: int = 0
    aux_ptr: Callable[[ir.IRBuilder, ir.Value], ir.Value] | None = None
    tap_tiles: list[int] | None = None
    tap_kinds: list[tuple[int, int, tuple[bool, ...]]] | None = None
    #: symbolic dims (``Operand.valid``): the rows of C a run holds (only the M panels covering them are
    #: computed; the last one may run on into padding rows, never past M) and the K a run sums over (only
    #: those rows of B and columns of A enter; None: all of M / K)
    m_valid: ir.Value | None = None
    k_valid: ir.Value | None = None
    #: the batch x group problems a run holds when they are a prefix of the BG (symbolic batch axes)
    bg_valid: ir.Value | None = None
    #: the columns of C a run holds (a symbolic N): only the N tiles covering them are computed (the last
    #: one may run on into padding columns, never past N)
    n_valid: ir.Value | None = None
    #: bf16 pairs (``UKernel.bf16``; K, the blocks and the strides count pairs); with ``a_conv``, an item's
    #: rows of A are converted before its K blocks (unless the last item converted the same rows)
    bf16: str = ""
    a_conv: AConv | None = None

    @property
    def panels(self) -> int:
        """M panels of MR rows."""
        return -(-self.M // self.geo.mr)

    @property
    def tiles(self) -> int:
        """N tiles of NR columns."""
        return -(-self.N // self.geo.nr)

    @property
    def m_tail(self) -> int:
        """Rows of the last M panel."""
        return self.M - (self.panels - 1) * self.geo.mr

    @property
    def n_tail(self) -> int:
        """Columns of the last N tile."""
        return self.N - (self.tiles - 1) * self.geo.nr

    def tile_vectors(self, last: bool) -> tuple[int, int]:
        """(vectors, valid lanes of the last one) of an N tile: the last one (``last``) or any other."""
        W = self.geo.lanes
        if not last:
            return self.geo.nvec, W
        nvec = -(-self.n_tail // W)
        return nvec, self.n_tail - (nvec - 1) * W

    @property
    def prefetch_lines(self) -> int:
        """Cache lines each micro-kernel call prefetches per ``unroll`` k steps: the next M panel's A block (2
        k steps of a packed panel: 2 * MR floats) with ``prefetch_a``, its share of the next B block with
        ``prefetch_b`` (``b_prefetch_rate``), else 0."""
        if self.prefetch_a and self.a_packed:
            return -(-self.geo.mr // 8)
        return self.b_prefetch_rate * max(1, self.unroll) if self.b_prefetch_rate else 0

    @property
    def b_prefetch_rate(self) -> int:
        """With ``prefetch_b``: lines of the next B block each call prefetches per k step. A B row is
        ``b_row_lines`` lines, shared among the M panels (at least one line each); with a symbolic M, whose
        panels are known at run time only, one line (two lines ran 4-12 % slower at M = 16..128). 0 when
        off, past ``PREFETCH_B_PANELS`` panels, and for a single row (a matrix-vector product: its call
        streams its own block as fast as memory serves it, and a second stream only competes with it)."""
        MP = self.panels
        if not self.prefetch_b or self.M < 2 or self.unroll < 2:
            return 0
        if self.m_valid is not None:
            return 1
        return -(-self.b_row_lines // MP) if MP <= PREFETCH_B_PANELS else 0

    @property
    def b_row_lines(self) -> int:
        """Cache lines (64 bytes) of a packed B row (NR floats)."""
        return max(1, self.geo.nr // 16)

    def blocks(self) -> list[int]:
        if self.k_blocks is not None:
            return self.k_blocks
        nb = max(1, -(-self.K // KC_MAX))
        kc = -(-self.K // nb)
        return list(range(0, self.K, kc)) or [0]

    @property
    def scratch_bytes(self) -> int:
        if self.b_pack is None:
            return 0
        kb = self.blocks() + [self.K]
        kc = max(kb[i + 1] - kb[i] for i in range(len(kb) - 1))
        return kc * (self.pack_ld or self.geo.nr) * 4


def emit_gemm(b: ir.IRBuilder, plan: GemmPlan, tid: ir.Value, nthreads: ir.Value,
              scratch: ir.Value | None) -> None:
    """Emit this thread's share of ``plan`` at the builder's position."""
    geo = plan.geo
    W, MR, NR = geo.lanes, geo.mr, geo.nr
    if plan.M == 0 or plan.N == 0 or plan.BG == 0:
        return
    MP, NT, m_tail = plan.panels, plan.tiles, plan.m_tail
    n_tail_vec = plan.tile_vectors(True)[0]
    mod = module_of(b)

    def uk(rows: int, nvec: int, tail: int, masked: tuple[bool, ...] = ()) -> ir.Function:
        return get_ukernel(mod, UKernel(
            lanes=W, rows=rows, nvec=nvec, tail=tail, a_packed=plan.a_packed, mr_panel=MR,
            ldb=(plan.pack_ld or NR) if plan.b_pack is not None else plan.ldb,
            b_align=64 if plan.b_pack is not None else plan.b_align,
            bias=plan.bias, act=plan.act, lo=plan.lo, hi=plan.hi,
            unroll=1 if plan.K <= SEQUENTIAL_K and not plan.taps else plan.unroll, prefetch=plan.prefetch_lines,
            c_src=plan.c_init is not None, taps=plan.taps, tap_stride=plan.tap_stride,
            tap_masks=geo.nvec if plan.taps else 0, tap_masked=masked, bf16=plan.bf16))

    # variants by (n tail?, m tail?)
    variants = {}
    for nt_last in (False, True) if not plan.tap_kinds else ():
        for mp_last in (False, True):
            variants[(nt_last, mp_last)] = uk(m_tail if mp_last else MR, *plan.tile_vectors(nt_last))

    kind_of = kind_table(b, plan.tap_tiles) if plan.tap_kinds else None
    mpv, ntv = c64(MP), c64(NT)
    if plan.m_valid is None and plan.bg_valid is None and plan.n_valid is None:
        lo, hi = weighted_share(b, tid, nthreads, plan.BG, NT, MP, geo.nvec, n_tail_vec)
    else:
        if plan.m_valid is not None:
            # at least one panel (no division by zero below; an empty M computes one panel of padding)
            mpv = smax(b, smin(b, b.udiv(b.add(plan.m_valid, c64(MR - 1)), c64(MR)), c64(MP)), c64(1))
        bg = c64(plan.BG) if plan.bg_valid is None else smin(b, plan.bg_valid, c64(plan.BG))
        if plan.n_valid is None:
            lo, hi = weighted_share_dyn(b, tid, nthreads, bg, NT, mpv, geo.nvec, n_tail_vec)
        else:  # the valid tiles, each weighed alike (at least one: an empty N computes a tile of padding)
            ntv = smax(b, smin(b, b.udiv(b.add(plan.n_valid, c64(NR - 1)), c64(NR)), c64(NT)), c64(1))
            lo, hi = partition(b, b.mul(b.mul(bg, ntv), mpv), tid, nthreads)
    if plan.bf16 == "amx":  # this thread's tiles, configured for the GEMM's calls and released after them
        from glow_backend_cpu.emit.amx import configure_tiles, release_tiles
        configure_tiles(b)
        _gemm_items(b, plan, lo, hi, scratch, variants, uk, kind_of, mpv, ntv)
        release_tiles(b)
    else:
        _gemm_items(b, plan, lo, hi, scratch, variants, uk, kind_of, mpv, ntv)


def _gemm_items(b: ir.IRBuilder, plan: GemmPlan, lo: ir.Value, hi: ir.Value, scratch: ir.Value | None,
                variants: dict[tuple[bool, bool], ir.Function], uk: Callable[..., ir.Function],
                kind_of: ir.Value | None, mpv: ir.Value, ntv: ir.Value) -> None:
    """The work items ``[lo, hi)``: (batch x group, N tile, M panel), M panels innermost; ``mpv`` M panels
    per (batch, N tile) and ``ntv`` N tiles per batch (all ``MP`` / ``NT`` but with a symbolic M / N)."""
    MR, NR, N = plan.geo.mr, plan.geo.nr, plan.N
    MP, NT, m_tail, n_tail = plan.panels, plan.tiles, plan.m_tail, plan.n_tail
    kbs = plan.blocks() + [plan.K]
    # a symbolic M: the run's last panel computes only its valid rows (at M = 16, 16 rows instead of 18)
    rows_last = None
    if plan.m_valid is not None and plan.bf16 != "amx" and not plan.tap_kinds:
        rows_last = smax(b, smin(b, b.sub(plan.m_valid, b.mul(b.sub(mpv, c64(1)), c64(MR))), c64(MR)), c64(1))

    fn = b.block.function
    pre = b.block
    hdr = fn.append_basic_block("gemm.items")
    body = fn.append_basic_block("gemm.item")
    done = fn.append_basic_block("gemm.done")
    b.branch(hdr)
    b.position_at_end(hdr)
    p = b.phi(I64, name="p")
    p.add_incoming(lo, pre)
    last = b.phi(I64, name="a.last")  # the (bg, mp0, mp1) whose A rows a_conv converted last
    last.add_incoming(c64(-1), pre)
    b.cbranch(b.icmp_signed("<", p, hi), body, done)
    b.position_at_end(body)
    pair = b.udiv(p, mpv)
    mp0 = b.sub(p, b.mul(pair, mpv))
    cnt = smin(b, b.sub(mpv, mp0), b.sub(hi, p))
    mp1 = b.add(mp0, cnt)
    bg = b.udiv(pair, ntv)
    nt = b.sub(pair, b.mul(bg, ntv))
    n0 = b.mul(nt, c64(NR))
    width = smin(b, c64(NR), b.sub(c64(N), n0))
    nt_last = b.icmp_signed("==", nt, c64(NT - 1))
    narrow = narrow_tile(b, plan, nt, n0, ntv)
    key = b.add(b.mul(b.add(b.mul(bg, c64(MP + 1)), mp0), c64(MP + 1)), mp1)

    if plan.a_conv is not None:
        with b.if_then(b.icmp_signed("!=", key, last)):
            plan.a_conv(b, bg, mp0, mp1)
    nkb: int | ir.Value = len(kbs) - 1
    if plan.k_valid is not None:
        nkb = valid_kblocks(b, kbs, plan.k_valid)
    with for_range(b, 0, nkb, name="kb") as kb:
        k0, k1 = kblock_bounds(b, kbs, kb)
        if plan.k_valid is not None:
            k1 = smin(b, k1, smin(b, plan.k_valid, c64(plan.K)))
        kc = b.sub(k1, k0)
        if plan.b_pack is not None:
            assert scratch is not None
            plan.b_pack(b, bg, n0, width, k0, kc, kb, scratch)
            btile = scratch
        else:
            assert plan.b_ptr is not None
            btile = plan.b_ptr(b, bg, n0, nt, k0)
        flags = kblock_flags(b, kb, nkb)
        with for_range(b, mp0, mp1, name="mp") as mp:
            args = _call_args(b, plan, (bg, mp, nt, n0), k0, kc, btile, flags)
            mp_last = b.icmp_signed("==", mp, c64(MP - 1))
            if plan.tap_kinds:
                dispatch_kind(b, plan, uk, kind_of, nt, mp_last, args, m_tail)
            elif rows_last is not None:
                is_last = b.icmp_signed("==", mp, b.sub(mpv, c64(1)))
                dispatch_rows(b, plan, uk, variants, nt_last, b.select(is_last, rows_last, c64(MR)), args)
            else:
                dispatch_narrow(b, plan, uk, narrow, mp_last, args, lambda: dispatch_variant(
                    b, variants, nt_last, mp_last, args, n_tail == NR, m_tail == MR))
    p.add_incoming(b.add(p, cnt), b.block)
    last.add_incoming(key, b.block)
    b.branch(hdr)
    b.position_at_end(done)


def _call_args(b: ir.IRBuilder, plan: GemmPlan, item: tuple[ir.Value, ir.Value, ir.Value, ir.Value], k0: ir.Value,
               kc: ir.Value, btile: ir.Value, flags: ir.Value) -> list[ir.Value]:
    """The micro-kernel's arguments (``UK_ARGS``) for M panel ``mp`` of ``item`` = (bg, mp, nt, n0) over the K
    block at ``k0`` of ``kc`` rows."""
    bg, mp, nt, n0 = item
    MR = plan.geo.mr
    m0 = b.mul(mp, c64(MR))
    aptr, astride = plan.a_ptr(b, bg, m0)
    aptr = gep(b, aptr, b.mul(k0, c64(MR)) if plan.a_packed else k0)
    cptr = plan.c_ptr(b, bg, m0, n0)
    bias = plan.bias_ptr(b, bg, m0, n0) if plan.bias_ptr is not None else ir.Constant(F32P, None)
    # the next panel's A block (past the last panel: a harmless hint at whatever follows)
    pf = next_b_share(b, plan, btile, kc, mp) if plan.b_prefetch_rate else \
        gep(b, aptr, b.mul(astride, c64(1))) if plan.prefetch_lines else ir.Constant(F32P, None)
    c0 = plan.c_init(b, bg, m0, n0) if plan.c_init is not None else ir.Constant(F32P, None)
    aux = plan.aux_ptr(b, nt) if plan.aux_ptr is not None else ir.Constant(F32P, None)
    return [aptr, astride, btile, cptr, c64(plan.ldc), kc, flags, bias, c64(plan.bias_rs), pf, c0, aux]


def next_b_share(b: ir.IRBuilder, plan: GemmPlan, btile: ir.Value, kc: ir.Value, mp: ir.Value) -> ir.Value:
    """Where M panel ``mp``'s call starts prefetching the next B block (``GemmPlan.prefetch_b``): the block
    after ``btile`` (``kc`` rows of NR floats), at line ``(mp * rate mod row lines) * kc`` of it; the call
    prefetches ``rate`` lines per k step from there. Past the last block it is a hint at whatever follows."""
    rate, lines = plan.b_prefetch_rate, plan.b_row_lines
    line = b.urem(b.mul(mp, c64(rate)), c64(lines))
    return gep(b, btile, b.mul(kc, b.add(c64(plan.geo.nr), b.mul(line, c64(16)))))
