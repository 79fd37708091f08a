"""Ahead-of-time bundles of the cpu backend: one object file, a C header, the weights.

``CpuBackend.save_bundle`` compiles a prepared function exactly as ``compile``
does (LIR -> LLVM IR -> O3 -> object code), for the host or for another
target LLVM knows (``--target`` / ``--cpu`` / ``--features``), as
position-independent code, and wraps the SPMD entry ``glow_main(regions, tid,
nthreads, run)`` in one exported C function::

    int NAME(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);

- ``constantWeight``: the constant region then the packed-constant region
  (``NAME.weights.bin`` is its image; with embedded weights the object holds it
  and the argument is ignored);
- ``mutableWeight``: every input and output at its offset (``NAME_OFFSET_<io>``);
- ``activations``: the arena of the memory plan, then each thread's scratch.

A function compiled for symbolic dims gets one ``int64_t`` argument per symbol after the three areas; the
entry checks the sizes, lays the caller's dense inputs out at the bounds and compacts the outputs
(``bundle_symbols.py``).

Every other symbol of the object is internal, so bundles link side by side.
With ``threads > 1`` the entry starts threads 1..N-1 with ``pthread_create``
(each runs the native worker loop ``glow_worker``), runs thread 0's share
through ``glow_run``, stops and joins them: the same SPMD code and barrier as
the JIT. It returns :data:`STATUS` codes. Only C library, libm and pthreads
symbols stay undefined (:data:`ALLOWED_UNDEFINED`).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from glow_backend_cpu import __version__
from glow_backend_cpu.bundle_symbols import (
    AREA_PARAMS,
    BAD_SYMBOLS,
    EntrySymbol,
    bundle_symbols,
    dims_text,
    emit_check,
    emit_compact,
    emit_expand,
    emit_set,
    header_lines,
    io_types,
)
from glow_backend_cpu.codegen import ENTRY, REGION_IO, Layout, align_up, generate
from glow_backend_cpu.sync import MAX_SHARES
from glow_backend_cpu.workload import DEFAULT_SOLO_NS
from glow_backend_cpu.helpers import I8, I8P, I32, I64, for_range, i64, memset
from glow_backend_cpu.target import EXTERNAL_SYMBOLS, Codegen, _init_llvm
from glow_core.errors import BackendError
from glow_core.ir.graph import Function
from glow_core.ir.types import TensorType
from glow_sdk.backend import BundleOptions, CompileOptions

ALIGN = 64
#: symbols a bundle may leave undefined: C library, libm, pthreads
ALLOWED_UNDEFINED = frozenset(EXTERNAL_SYMBOLS) | {"pthread_create", "pthread_join"}
#: what the entry returns
STATUS = {"OK": 0, "INDEX_OUT_OF_RANGE": 1, "THREAD_START_FAILED": 2, "MISALIGNED": 3, "BAD_SYMBOLS": BAD_SYMBOLS}
#: the module's functions that become internal (the bundle exports only its entry)
_INTERNAL = (ENTRY, "glow_worker", "glow_run", "glow_stop", "glow_get_error", "glow_clear_error")
#: those of a function compiled for symbolic dims (``symbolic.py``)
_INTERNAL_SYMBOLIC = ("glow_symbols", "glow_set_symbols")
#: feature strings of targets whose LLVM default lacks what a Linux system has (RISC-V: rv64gc, not bare rv64i
#: with soft floats and library atomics)
DEFAULT_FEATURES = {"riscv64": "+m,+a,+f,+d,+c", "riscv32": "+m,+a,+f,+d,+c"}
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile "
    "while main".split())


# -- target --------------------------------------------------------------------------------------------
@contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """LLVM reports unknown CPUs and features on file descriptor 2: collect what it writes."""
    lines: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


def target_codegen(triple: str | None, cpu: str | None, features: str | None) -> Codegen:
    """The code generator for a bundle: the JIT's host settings when nothing is given, else the named target.

    An unknown triple, CPU or feature is a :class:`BackendError` (LLVM itself only warns and ignores them).
    """
    host = llvm.get_process_triple()
    if triple in (None, "", host) and cpu is None and features is None:
        return Codegen(reloc="pic", codemodel="default")
    triple = triple or host
    _init_llvm()  # every target LLVM was built with
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise BackendError(f"LLVM has no target for '{triple}': {e}",
                           hint="use a triple such as x86_64-linux-gnu, aarch64-linux-gnu, riscv64-linux-gnu") from None
    if cpu is None and triple == host:
        cpu = llvm.get_host_cpu_name()
    if features is None:
        features = DEFAULT_FEATURES.get(triple.split("-")[0], "")
    with _captured_stderr() as warnings:
        cg = Codegen(triple=triple, cpu_name=cpu or "", features=features or "", reloc="pic", codemodel="default")
        probe = llvm.parse_assembly(f'target triple = "{triple}"\ndefine void @f() {{\n  ret void\n}}\n')
        cg.tm.emit_object(probe)
    bad = sorted({w.split("'")[1] for w in warnings if "is not a recognized" in w and w.count("'") >= 2})
    if bad:
        raise BackendError(f"target {triple} has no CPU or feature named {', '.join(repr(b) for b in bad)}",
                           hint="check --cpu and --features (features are LLVM's, e.g. +avx2,+fma or +neon)")
    return cg


# -- the areas ---------------------------------------------------------------------------------------
@dataclass
class Areas:
    """Where every region lives inside the three caller-provided areas (byte offsets)."""

    constant_bytes: int
    packed_offset: int
    mutable_bytes: int
    io_offsets: list[int]
    io_sizes: list[int]
    activations_bytes: int
    scratch_offset: int


def _itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def plan_areas(layout: Layout, threads: int) -> Areas:
    packed_offset = align_up(layout.const_bytes, ALIGN)
    offsets, sizes = [], []
    off = 0
    for _role, _name, dtype, shape in layout.io:
        offsets.append(off)
        sizes.append(math.prod(shape) * _itemsize(dtype))
        off = align_up(off + sizes[-1], ALIGN)
    scratch_offset = align_up(layout.arena_bytes, ALIGN)
    return Areas(packed_offset + layout.packed_bytes, packed_offset, off, offsets, sizes,
                 scratch_offset + layout.scratch_stride * threads, scratch_offset)


def weights_image(layout: Layout, constants: dict[str, np.ndarray], areas: Areas) -> bytes:
    """The constant area: the weights kernels read at their offsets, then the packed constants."""
    buf = bytearray(areas.constant_bytes)
    for name, off in layout.const_offsets.items():
        raw = np.ascontiguousarray(constants[name]).reshape(-1).view(np.uint8)
        buf[off:off + raw.size] = raw.tobytes()
    for off, data in layout.packed:
        buf[areas.packed_offset + off:areas.packed_offset + off + len(data)] = data
    return bytes(buf)


# -- the entry point -----------------------------------------------------------------------------------
def _declare(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    return fn if fn is not None else ir.Function(module, ir.FunctionType(ret, list(args)), name=name)


def _emit_parallel(module: ir.Module, threads: int, ptr_bits: int) -> ir.Function:
    """``i32 glow_bundle_parallel(i8** regions)``: start threads 1..N-1, run, stop, join (0, or 2 on failure)."""
    tid_t = ir.IntType(ptr_bits)  # pthread_t: an unsigned long (or a pointer) on the targets bundles support
    arg_t = ir.LiteralStructType([I8P, I64])
    start_t = ir.FunctionType(I8P, [I8P])
    create = _declare(module, "pthread_create", I32, [tid_t.as_pointer(), I8P, start_t.as_pointer(), I8P])
    join = _declare(module, "pthread_join", I32, [tid_t, I8P.as_pointer()])
    worker = module.globals["glow_worker"]
    start = ir.Function(module, start_t, name="glow_bundle_thread")
    start.linkage = "internal"
    b = ir.IRBuilder(start.append_basic_block("entry"))
    a = b.bitcast(start.args[0], arg_t.as_pointer())
    b.call(worker, [b.load(b.gep(a, [i64(0), ir.Constant(I32, 0)])), b.load(b.gep(a, [i64(0), ir.Constant(I32, 1)]))])
    b.ret(ir.Constant(I8P, None))

    fn = ir.Function(module, ir.FunctionType(I32, [I8P.as_pointer()]), name="glow_bundle_parallel")
    fn.linkage = "internal"
    (regions,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctl_t = ir.ArrayType(I8, 64)
    ctl_slot = b.alloca(ctl_t, name="ctl")
    ctl_slot.align = ALIGN
    ctl = b.bitcast(ctl_slot, I8P)
    memset(b, ctl, 0, 64)
    args = b.alloca(arg_t, size=i64(threads), name="args")
    tids = b.alloca(tid_t, size=i64(threads), name="tids")
    created = b.alloca(I64, name="created")
    b.store(i64(0), created)
    with for_range(b, 1, threads, name="start") as k:
        with b.if_then(b.icmp_signed("==", b.load(created), b.sub(k, i64(1)))):
            slot = b.gep(args, [k])
            b.store(ctl, b.gep(slot, [i64(0), ir.Constant(I32, 0)]))
            b.store(k, b.gep(slot, [i64(0), ir.Constant(I32, 1)]))
            rc = b.call(create, [b.gep(tids, [k]), ir.Constant(I8P, None), start, b.bitcast(slot, I8P)])
            with b.if_then(b.icmp_signed("==", rc, ir.Constant(I32, 0))):
                b.store(k, created)
    ok = b.icmp_signed("==", b.load(created), i64(threads - 1))
    with b.if_then(ok):
        b.call(module.globals["glow_run"], [ctl, regions, i64(threads)])
    b.call(module.globals["glow_stop"], [ctl])
    with for_range(b, 1, b.add(b.load(created), i64(1)), name="join") as k:
        b.call(join, [b.load(b.gep(tids, [k])), ir.Constant(I8P.as_pointer(), None)])
    b.ret(b.select(ok, ir.Constant(I32, STATUS["OK"]), ir.Constant(I32, STATUS["THREAD_START_FAILED"])))
    return fn


@dataclass
class SymbolicIo:
    """A bundle of a function compiled for symbolic dims: its symbol arguments and each io region's type."""

    symbols: list[EntrySymbol]
    types: list[TensorType]  # per io region of the layout


def emit_entry(module: ir.Module, name: str, layout: Layout, areas: Areas, threads: int,
               embedded: ir.GlobalVariable | None, ptr_bits: int, symbolic: SymbolicIo | None = None) -> ir.Function:
    """``i32 NAME(i8* constantWeight, i8* mutableWeight, i8* activations[, i64 symbol...])`` (see the module doc
    and ``bundle_symbols.py``)."""
    for sym in _INTERNAL + (_INTERNAL_SYMBOLIC if layout.symbols else ()):
        module.globals[sym].linkage = "internal"
    parallel = _emit_parallel(module, threads, ptr_bits) if threads > 1 else None
    n_sym = len(symbolic.symbols) if symbolic is not None else 0
    fn = ir.Function(module, ir.FunctionType(I32, [I8P, I8P, I8P] + [I64] * n_sym), name=name)
    const, mutable, acts = fn.args[:3]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    intp = ir.IntType(ptr_bits)
    areas_in = [mutable, acts] + ([const] if embedded is None else [])
    bad = ir.Constant(ir.IntType(1), 0)
    for p in areas_in:
        v = b.ptrtoint(p, intp)
        bad = b.or_(bad, b.icmp_unsigned("!=", b.and_(v, ir.Constant(intp, ALIGN - 1)), ir.Constant(intp, 0)))
        bad = b.or_(bad, b.icmp_unsigned("==", v, ir.Constant(intp, 0)))
    with b.if_then(bad, likely=False):
        b.ret(ir.Constant(I32, STATUS["MISALIGNED"]))
    env: dict[str, ir.Value] = {}
    if symbolic is not None:  # no memory is touched before the sizes are checked
        with b.if_then(emit_check(b, symbolic.symbols, fn.args[3:]), likely=False):
            b.ret(ir.Constant(I32, STATUS["BAD_SYMBOLS"]))
        env = emit_set(b, module, symbolic.symbols, fn.args[3:], layout.symbols)
    if embedded is not None:
        const = b.bitcast(embedded, I8P)
    n_regions = REGION_IO + len(layout.io)
    regions = b.alloca(I8P, size=i64(n_regions), name="regions")
    bases = [const, acts, b.gep(acts, [i64(areas.scratch_offset)]), b.gep(const, [i64(areas.packed_offset)])]
    bases += [b.gep(mutable, [i64(off)]) for off in areas.io_offsets]
    for r, p in enumerate(bases):
        b.store(p, b.gep(regions, [i64(r)]))
    io_regions = list(zip(layout.io, bases[REGION_IO:], symbolic.types if symbolic is not None else []))
    for (role, _n, dtype, _shape), base, t in io_regions:
        if role == "input":
            emit_expand(b, base, t, _itemsize(dtype), env)
    b.call(module.globals["glow_clear_error"], [])
    if parallel is None:
        b.call(module.globals[ENTRY], [regions, i64(0), i64(1), ir.Constant(I32, 0)])
    else:
        rc = b.call(parallel, [regions])
        with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
            b.ret(rc)
    for (role, _n, dtype, _shape), base, t in io_regions:
        if role != "input":
            emit_compact(b, base, t, _itemsize(dtype), env)
    err = b.call(module.globals["glow_get_error"], [])
    b.ret(b.select(b.icmp_signed("!=", err, ir.Constant(I32, 0)),
                   ir.Constant(I32, STATUS["INDEX_OUT_OF_RANGE"]), ir.Constant(I32, STATUS["OK"])))
    return fn


def emit_error_node(module: ir.Module, name: str) -> ir.Function:
    """``int NAME_error_node(void)``: after ``GLOW_BUNDLE_INDEX_OUT_OF_RANGE``, the code of the node whose index
    was out of range (the manifest's ``index_checks`` and the header name it); 0 after a run without error."""
    fn = ir.Function(module, ir.FunctionType(I32, []), name=f"{name}_error_node")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(b.call(module.globals["glow_get_error"], []))
    return fn


def add_support(module: ir.Module) -> None:
    """The half-precision conversions LLVM may call (``support.py``), as weak definitions: a C toolchain's
    runtime, when it has them, wins; the bundle needs none."""
    from glow_backend_cpu import support

    support.build_module(module.triple, module.data_layout, into=module, linkage="weak_odr")


# -- C names and the header ------------------------------------------------------------------------------
def check_bundle_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") or name in _C_KEYWORDS or name.startswith("glow_"):
        raise BackendError(f"bundle name {name!r} is not usable as a C function name",
                           hint="use letters, digits and '_', not starting with a digit or 'glow_' (--name)")
    return name


def c_identifiers(names: Sequence[str]) -> list[str]:
    """Each name as the tail of a C identifier ([A-Za-z0-9_]), distinct (``_2``, ``_3``, ... on collision)."""
    out: list[str] = []
    taken: set[str] = set()
    for n in names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", n) or "_"
        cand, k = base, 2
        while cand in taken:
            cand, k = f"{base}_{k}", k + 1
        taken.add(cand)
        out.append(cand)
    return out


def c_string(text: str) -> str:
    out = []
    for byte in text.encode():
        ch = chr(byte)
        # octal escapes for quotes, backslashes, trigraph '?' and '*' '/' (the literal also appears in comments)
        out.append(ch if 32 <= byte < 127 and ch not in '"\\?*/' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


_HEADER_COMMON = """#ifndef GLOW_BUNDLE_COMMON_DEFINED
#define GLOW_BUNDLE_COMMON_DEFINED
/* what a bundle's entry returns */
#define GLOW_BUNDLE_OK 0
#define GLOW_BUNDLE_INDEX_OUT_OF_RANGE 1   /* an index input was out of range: outputs not computed */
#define GLOW_BUNDLE_THREAD_START_FAILED 2  /* pthread_create failed: nothing was computed */
#define GLOW_BUNDLE_MISALIGNED 3           /* an area is NULL or not MEM_ALIGN-aligned: nothing was computed */
/* one input or output: where it lives in the mutable area */
typedef struct {
  const char *name;     /* the model's name */
  const char *c_name;   /* the name in macros (NAME_OFFSET_<c_name>) */
  int is_input;
  uint64_t offset;      /* bytes from the start of the mutable area */
  uint64_t size;        /* bytes */
  const char *dtype;    /* numpy's name: float32, int64, ... */
  int rank;
  const int64_t *shape;
} glow_bundle_io;
/* the whole bundle, for generic callers */
typedef struct {
  const char *name;
  uint64_t constant_mem_size, mutable_mem_size, activations_mem_size, mem_align;
  int threads, weights_embedded, num_io;
  const glow_bundle_io *io;
  int (*entry)(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);
} glow_bundle_config;
#endif
#ifndef GLOW_BUNDLE_BAD_SYMBOLS
#define GLOW_BUNDLE_BAD_SYMBOLS 4          /* a symbol's size is out of its bounds or off its step: nothing was touched */
#endif
"""


_SYMBOLIC_ENTRY_DOC = [
    "/* The symbols' sizes follow the areas (NUM_SYMBOLS of them, in the order above). Write each input",
    "   densely (C order, at the run's shape: SIZE_<io>_AT bytes) at its offset; the outputs are dense at theirs.",
    "   The entry rearranges the inputs in place: write them again before the next call. A size out of its",
    "   bounds or off its step returns GLOW_BUNDLE_BAD_SYMBOLS before any memory is touched. */",
]


def index_checks(function: Function, layout: Layout) -> dict[str, str]:
    """Error code -> what the check is about (``ONNX node 'emb' (Gather): its indices come from input 'ids'``),
    for the manifest and the header."""
    from glow_sdk.diagnostics import INDEX_OPERANDS, model_inputs_of, where_node

    nodes = {n.name: n for n in function.nodes}
    out: dict[str, str] = {}
    for code, node_name in layout.error_sites.items():
        node = nodes.get(node_name)
        if node is None or node.kind.name not in INDEX_OPERANDS:
            out[code] = f"graph node '{node_name}'"
            continue
        sources = model_inputs_of(node.inputs[INDEX_OPERANDS[node.kind.name]])  # type: ignore[arg-type]
        out[code] = where_node(node) + (f": its indices come from input {', '.join(repr(x) for x in sources)}"
                                        if sources else "")
    return out


def header_text(manifest: dict[str, Any]) -> str:
    name = manifest["name"]
    up = name.upper()
    lines = [f"/* {name}.h: the C API of the Glow bundle {name} (glow cpu backend {__version__}, "
             f"target {manifest['triple']}, cpu {manifest['cpu'] or 'generic'}). Generated: do not edit. */",
             f"#ifndef GLOW_BUNDLE_{up}_H", f"#define GLOW_BUNDLE_{up}_H", "", "#include <stdint.h>", "",
             _HEADER_COMMON,
             f"#define {up}_CONSTANT_MEM_SIZE {manifest['constant_mem_size']}ULL"
             + ("  /* the weights are embedded in the object */" if manifest["weights_embedded"] else ""),
             f"#define {up}_MUTABLE_MEM_SIZE {manifest['mutable_mem_size']}ULL",
             f"#define {up}_ACTIVATIONS_MEM_SIZE {manifest['activations_mem_size']}ULL",
             f"#define {up}_MEM_ALIGN {ALIGN}",
             f"#define {up}_THREADS {manifest['threads']}",
             f"#define {up}_WEIGHTS_EMBEDDED {int(manifest['weights_embedded'])}",
             f"#define {up}_NUM_INPUTS {sum(1 for io in manifest['io'] if io['role'] == 'input')}",
             f"#define {up}_NUM_OUTPUTS {sum(1 for io in manifest['io'] if io['role'] != 'input')}", ""]
    for io in manifest["io"]:
        shape = list(io["shape"]) if "dims" not in io else \
            "[" + ", ".join(str(d) for d in io["dims"]) + f"] (at most {list(io['shape'])}: SIZE is at the bounds)"
        lines.append(f"/* {io['role']} {c_string(io['name'])}: {io['dtype']}{shape} */".replace("*/ */", "* / */"))
        lines.append(f"#define {up}_OFFSET_{io['c_name']} {io['offset']}ULL")
        lines.append(f"#define {up}_SIZE_{io['c_name']} {io['size']}ULL")
    symbols = manifest.get("symbols")
    if symbols:
        lines += ["", *header_lines(manifest)]
    params = "".join(f", int64_t {s['c_name']}" for s in symbols or ())
    lines += ["", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
              "/* Runs one inference. The three areas must be MEM_ALIGN-aligned; constantWeight holds",
              f"   {name}.weights.bin (ignored when the weights are embedded). Calls must not overlap. */",
              *(_SYMBOLIC_ENTRY_DOC if symbols else []),
              f"int {name}(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations{params});", "",
              "/* After GLOW_BUNDLE_INDEX_OUT_OF_RANGE: which index check failed (0: none), one of:",
              *[f"   {code}: {text.replace('*/', '* /')}" for code, text in manifest.get("index_checks", {}).items()],
              "*/", f"int {name}_error_node(void);", ""]
    for k, io in enumerate(manifest["io"]):
        dims = ", ".join(str(d) for d in io["shape"]) or "0"
        lines.append(f"static const int64_t {name}_shape_{k}[] = {{{dims}}};")
    lines.append(f"static const glow_bundle_io {name}_io[] = {{")
    for k, io in enumerate(manifest["io"]):
        lines.append(f"  {{{c_string(io['name'])}, \"{io['c_name']}\", {int(io['role'] == 'input')}, "
                     f"{io['offset']}ULL, {io['size']}ULL, \"{io['dtype']}\", {len(io['shape'])}, {name}_shape_{k}}},")
    lines.append("};")
    if not symbols:  # (the config's entry has the three-area signature)
        lines += [f"static const glow_bundle_config {name}_config = {{",
                  f"  \"{name}\", {up}_CONSTANT_MEM_SIZE, {up}_MUTABLE_MEM_SIZE, {up}_ACTIVATIONS_MEM_SIZE, "
                  f"{up}_MEM_ALIGN,", f"  {up}_THREADS, {up}_WEIGHTS_EMBEDDED, {len(manifest['io'])}, {name}_io, {name}",
                  "};"]
    lines += ["", "#ifdef __cplusplus", "}", "#endif", f"#endif /* GLOW_BUNDLE_{up}_H */", ""]
    return "\n".join(lines)


def weights_c_array(name: str, data: bytes) -> str:
    """``NAME.weights.txt``: the weights as the body of a C array (``uint8_t w[] = { #include ... };``)."""
    arr = np.frombuffer(data, dtype=np.uint8)
    width = 16
    rows = []
    hexes = np.char.add("0x", np.char.zfill(np.char.lower(np.char.mod("%x", arr)), 2)) if arr.size else arr
    for i in range(0, arr.size, width):
        rows.append(",".join(hexes[i:i + width].tolist()) + ",")
    return f"/* {name}.weights.bin as a C initializer ({len(data)} bytes) */\n" + "\n".join(rows) + "\n"


# -- writing a bundle ------------------------------------------------------------------------------------
def _symbolic_io(function: Function, layout: Layout, bundle: BundleOptions, name: str) -> SymbolicIo | None:
    """The symbol arguments and io types of a function compiled for symbolic dims (None: a static one).
    ``bundle.symbols`` lists the symbols (name, the symbol the dims name, min, max, step) in the entry's
    order; without them a symbolic function cannot be bundled."""
    spec = list(bundle.symbols)
    if not layout.symbols and not spec:
        return None
    if not spec:
        raise BackendError("the function has symbolic dims but the bundle options name no symbols",
                           hint="bundle through glow_core.bundle.write_bundle (glow bundle)")
    taken = set(AREA_PARAMS) | set(_C_KEYWORDS) | {name}
    symbols = bundle_symbols(spec, layout.symbols, c_identifiers([s.name for s in spec]), taken)
    types = io_types(function)
    return SymbolicIo(symbols, [types[(role, n)] for role, n, _dt, _shape in layout.io])


def save_bundle(function: Function, options: CompileOptions, bundle: BundleOptions, out_dir: Path,
                parallel: bool, solo_ns: float = DEFAULT_SOLO_NS) -> list[Path]:
    """Compile ``function`` into NAME.o / NAME.h / NAME.weights.bin (/ .txt) / NAME.json in ``out_dir``."""
    name = check_bundle_name(bundle.name)
    threads = max(1, min(int(bundle.threads), MAX_SHARES))  # the share tables' columns (sync.py)
    cg = target_codegen(bundle.target, bundle.cpu, bundle.features)
    lir = options.build_lir(function, debug=options.debug)
    module, layout = generate(cg, lir, name=f"glow_{name}", solo_ns=solo_ns)
    run_threads = threads if parallel and layout.parallel_kernels > 0 else 1
    areas = plan_areas(layout, threads)
    image = weights_image(layout, {c.name: c.payload for c in function.constants}, areas)
    embedded = None
    if bundle.embed_weights:
        t = ir.ArrayType(I8, max(len(image), 1))
        embedded = ir.GlobalVariable(module, t, name="glow_bundle_weights")
        embedded.global_constant = True
        embedded.linkage = "internal"
        embedded.align = ALIGN
        embedded.initializer = ir.Constant(t, bytearray(image or b"\0"))
    m = re.search(r"(?:^|-)p:(\d+)", cg.data_layout)  # LLVM's default pointer is 64 bits
    ptr_bits = int(m.group(1)) if m else 64
    symbolic = _symbolic_io(function, layout, bundle, name)
    emit_entry(module, name, layout, areas, run_threads, embedded, ptr_bits, symbolic)
    emit_error_node(module, name)
    add_support(module)
    lib = cg.compile_module(module)
    out_dir.mkdir(parents=True, exist_ok=True)
    c_names = c_identifiers([n for _, n, _, _ in layout.io])
    manifest: dict[str, Any] = {
        "format": 1 if symbolic is None else 2, "name": name, "backend": "cpu", "backend_version": __version__,
        "triple": cg.triple, "cpu": cg.cpu_name, "features": cg.features, "threads": run_threads,
        "weights_embedded": bool(bundle.embed_weights),
        "constant_mem_size": 0 if bundle.embed_weights else areas.constant_bytes,
        "mutable_mem_size": areas.mutable_bytes,
        "activations_mem_size": areas.activations_bytes, "mem_align": ALIGN,
        "index_checks": index_checks(function, layout),
        "io": [{"role": role, "name": n, "c_name": c, "dtype": dt if dt == "bfloat16" else np.dtype(dt).name, "shape": list(shape), "offset": off, "size": size}
               for (role, n, dt, shape), c, off, size in zip(layout.io, c_names, areas.io_offsets, areas.io_sizes)],
    }
    if symbolic is not None:
        manifest["symbols"] = [{"name": s.name, "c_name": s.c_name, "symbol": s.symbol, "min": s.min, "max": s.max,
                                "step": s.step} for s in symbolic.symbols]
        for io, t in zip(manifest["io"], symbolic.types):
            io["dims"] = dims_text(t)
    files = [out_dir / f"{name}.o", out_dir / f"{name}.h", out_dir / f"{name}.json"]
    files[0].write_bytes(lib.object_code)
    files[1].write_text(header_text(manifest))
    files[2].write_text(json.dumps(manifest, indent=1) + "\n")
    if not bundle.embed_weights:
        files.append(out_dir / f"{name}.weights.bin")
        files[-1].write_bytes(image)
    if bundle.weights_text:
        files.append(out_dir / f"{name}.weights.txt")
        files[-1].write_text(weights_c_array(name, image))
    return files


__all__ = ["ALLOWED_UNDEFINED", "STATUS", "c_identifiers", "check_bundle_name", "header_text", "save_bundle",
           "target_codegen"]
