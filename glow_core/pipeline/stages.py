"""The stages of a compile: import -> prepare (optimize + lower) -> support check -> backend compile.

Each entry point (``glow_core.compile``, bundles, profiles, the int8 report, the runtime's partitions,
control-flow stages) calls these; the sequence is written here only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from glow_core import budget, progress
from glow_core.errors import InputError, UnsupportedError
from glow_core.importer import import_model
from glow_core.ir.graph import Function, Node
from glow_core.lircompiler import build_lir
from glow_core.passes import PassContext, PassManager
from glow_core.passes.pipelines import lowering_pipeline, optimize_pipeline, post_lowering_pipeline
from glow_core.pipeline.args import check_input_shapes, check_model_arg
from glow_core.pipeline.guard import guard_backend
from glow_core.pipeline.network import CompiledNetwork, CompileStats
from glow_sdk.backend import Backend, CompileOptions

#: a step run on the prepared function before the support check (int8 conversion); its result is kept
#: in ``CompileStats.quantized``
Transform = Callable[[Function], Any]

#: the ``options`` key choosing how much the graph optimizer does: 0 only removes dead nodes before
#: lowering, 1 (the default) runs the whole optimize pipeline (``InferenceSession``'s
#: ``graph_optimization_level``)
OPTIMIZATION_LEVEL = "optimization_level"
#: the ``options`` key turning compiles for symbolic dims off (``False``: a model with open symbols compiles a
#: specialization per input shape even on a backend with symbolic kernels; docs/dynamic-shapes.md)
SYMBOLIC_DIMS = "symbolic_dims"
#: the ``options`` keys only the core reads (the backend never sees them)
CORE_OPTIONS = frozenset({OPTIMIZATION_LEVEL, SYMBOLIC_DIMS})
#: the ``options`` key of the arithmetic precision (``compile(..., precision=...)``): "fp32" (the default, never
#: passed on) or "bf16", passed to a backend that declares the option and refused for the others
PRECISION = "precision"
PRECISIONS = ("fp32", "bf16")


def check_precision(options: Mapping[str, Any] | None, be: Backend) -> None:
    """Refuse an unknown precision, and bf16 on a backend that does not declare the ``precision`` option."""
    value = (options or {}).get(PRECISION)
    if value is None or value == "fp32":
        return
    if value not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    if not any(o.name == PRECISION for o in be.options()):
        raise UnsupportedError(f"backend '{be.name}' does not support precision '{value}'",
                               hint="use the cpu backend, or compile without precision (float32)")


def compile_options(*, threads: int | None = None, debug: bool = False,
                    extra: Mapping[str, Any] | None = None) -> CompileOptions:
    """The options ``Backend.compile`` receives, with the core's services filled in (``build_lir``)."""
    return CompileOptions(threads=threads, debug=debug, extra=dict(extra or {}), lir_builder=build_lir)


def import_function(model: Any, input_shapes: Any = None, bind: Mapping[str, np.ndarray] | None = None,
                    weights: Mapping[str, np.ndarray] | None = None) -> Function:
    """Check the model argument and the input shapes (:mod:`.args`) and import the model into a verified
    function (``weights``: the initializers of a model stripped of them, by name)."""
    model, shapes = check_model_arg(model), check_input_shapes(input_shapes)
    with progress.stage("import"):
        return import_model(model, shapes, bind, weights)


def optimization_level(options: Mapping[str, Any] | None) -> int:
    """The optimization level ``options`` asks for (:data:`OPTIMIZATION_LEVEL`; default 1)."""
    level = (options or {}).get(OPTIMIZATION_LEVEL, 1)
    if not isinstance(level, int) or isinstance(level, bool) or level < 0:
        raise InputError(f"options['{OPTIMIZATION_LEVEL}'] must be a non-negative integer, got {level!r}",
                         hint="0: no graph optimization before lowering; 1 or more: all of it")
    return level


def prepare_function(fn: Function, backend: Backend, debug: bool = False,
                     ctx: PassContext | None = None, quantizable: bool = False) -> Function:
    """Graph optimization and lowering for a backend (the middle of the pipeline). ``quantizable=True``
    builds the graph the int8 conversion (and the profile it reads) sees: no fusion the conversion cannot
    quantize piece by piece (a residual Add in FusedConv, FusedLayerNorm, FusedAttention)."""
    ctx = ctx or PassContext(backend=backend, debug=debug)
    ctx.backend = backend
    ctx.options["quantizable"] = quantizable
    optimize = optimize_pipeline() if optimization_level(ctx.options) > 0 else ["dce"]
    for label, steps in (("optimize", optimize), ("lower", lowering_pipeline()),
                         ("fuse", post_lowering_pipeline())):
        with progress.stage(label):
            PassManager(steps).run(fn, ctx)
    if debug:
        fn.verify()
    return fn


def prepare_model(model: Any, backend: Backend, input_shapes: Any = None, bind: Mapping[str, np.ndarray] | None = None,
                  *, quantizable: bool = False) -> Function:
    """Check the arguments, import ``model`` and prepare it for ``backend``: the front half of every compile."""
    return prepare_function(import_function(model, input_shapes, bind), backend, quantizable=quantizable)


def check_support(function: Function, backend: Backend) -> None:
    """Report every node the backend cannot run, all at once."""
    bad: dict[str, list[Node]] = {}
    for node in function.nodes:
        if not backend.supports(node):
            elems = "/".join(sorted({v.type.elem.value for v in node.inputs if v is not None} or {"-"}))
            bad.setdefault(f"{node.kind.name}({elems})", []).append(node)
    if bad:
        parts = []
        for key, nodes in sorted(bad.items()):
            names = ", ".join(n.origin or n.name for n in nodes[:3]) + (", ..." if len(nodes) > 3 else "")
            parts.append(f"{key} x{len(nodes)} [{names}]")
        raise UnsupportedError(
            f"backend '{backend.name}' cannot run {sum(len(v) for v in bad.values())} node(s): " + "; ".join(parts),
            hint="choose another backend",
        )


def _backend_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` without the keys only the core reads (the graph optimization level): what the backend gets."""
    return {k: v for k, v in (options or {}).items()
            if k not in CORE_OPTIONS and not (k == PRECISION and v in (None, "fp32"))}


def compile_prepared(fn: Function, be: Backend, stats: CompileStats | None = None, *, threads: int | None = None,
                     debug: bool = False, options: Mapping[str, Any] | None = None) -> CompiledNetwork:
    """Check a prepared function against the budget and the backend, and compile it (guarded)."""
    stats = stats if stats is not None else CompileStats()
    stats.nodes_by_kind = fn.count_by_kind()
    budget.check_function(fn)  # what lowering made, before the backend allocates for it
    check_support(fn, be)
    check_precision(options, be)
    t = time.perf_counter()
    with guard_backend(be.name, "to compile the model"), progress.stage(f"{be.name} codegen"):
        exe = be.compile(fn, compile_options(threads=threads, debug=debug, extra=_backend_options(options)))
    stats.backend_compile_s = time.perf_counter() - t
    timings = exe.compile_timings
    if isinstance(timings, dict):
        stats.backend_s = dict(timings)
    return CompiledNetwork(fn, exe, be, stats)


def pass_context(be: Backend, *, debug: bool = False, options: Mapping[str, Any] | None = None) -> PassContext:
    """The pass context a compile with ``options`` prepares its function in (the optimization level, and the
    opt-in reassociation of float arithmetic across nodes: docs/passes.md, "simplify-arith")."""
    ctx = PassContext(backend=be, debug=debug)
    ctx.options[OPTIMIZATION_LEVEL] = optimization_level(options)
    ctx.options["fast_math"] = bool((options or {}).get("fast_math", False))
    return ctx


def compile_function(fn: Function, be: Backend, stats: CompileStats, *, threads: int | None = None,
                     debug: bool = False, options: Mapping[str, Any] | None = None,
                     transform: Transform | None = None) -> CompiledNetwork:
    """Prepare an imported function for ``be`` (``transform``, e.g. int8 conversion, on the prepared graph)
    and compile it: the back half of every compile."""
    t = time.perf_counter()
    ctx = pass_context(be, debug=debug, options=options)
    fn = prepare_function(fn, be, debug=debug, ctx=ctx, quantizable=transform is not None)
    stats.pass_s = dict(ctx.timings)
    if transform is not None:
        stats.quantized = transform(fn)
    stats.optimize_s = time.perf_counter() - t
    return compile_prepared(fn, be, stats, threads=threads, debug=debug, options=options)
