"""The Python API: ``glow_core.compile(model, backend=...)`` -> CompiledNetwork."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from glow_core import budget, compilecache, zoo
from glow_core.errors import (
    BackendError,
    BudgetError,
    ExecutionError,
    GlowError,
    ImportShapeError,
    InputError,
    ModelError,
    UnsupportedError,
)
from glow_core.importer import load_model
from glow_core.importer.onnx_importer import OnnxImporter
from glow_core.importer.subgraphs import has_control_flow
from glow_core.importer.structured import OptShape, SeqShape
from glow_core.ir.graph import Function, Node
from glow_core.ir.types import ElemKind, TensorType
from glow_core.lircompiler import build_lir
from glow_core.plugin_host import get_backend
from glow_sdk.backend import Backend, CompiledFunction, CompileOptions


@dataclass
class CompileStats:
    """Where compile time went (seconds) and the node kinds of the prepared function."""

    import_s: float = 0.0
    optimize_s: float = 0.0
    backend_compile_s: float = 0.0
    #: seconds per graph pass (summed over fixed-point rounds); ``optimize_s`` includes them all
    pass_s: dict[str, float] = field(default_factory=dict)
    #: the backend's own stage timings (the cpu backend: cache key, LIR, IR generation, LLVM stages, load)
    backend_s: dict[str, Any] = field(default_factory=dict)
    nodes_by_kind: dict[str, int] = field(default_factory=dict)
    #: what quantization converted (a glow_core.quantization.convert.Conversion), when it ran
    quantized: Any = None


def compile_options(*, threads: int | None = None, debug: bool = False,
                    extra: Mapping[str, Any] | None = None) -> CompileOptions:
    """The options ``Backend.compile`` receives, with the core's services filled in (``build_lir``)."""
    return CompileOptions(threads=threads, debug=debug, extra=dict(extra or {}), lir_builder=build_lir)


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


class CompiledNetwork:
    """A model compiled for one backend. ``run`` checks feeds before executing."""

    def __init__(self, function: Function, executable: CompiledFunction, backend: Backend, stats: CompileStats) -> None:
        self.function = function
        self.executable = executable
        self.backend = backend
        self.stats = stats
        self.input_types: dict[str, TensorType] = {p.name: p.type for p in function.inputs}
        self.output_names: list[str] = [n for n, _ in function.outputs]
        self._lock = threading.Lock()
        #: (the input_types dict it was made from, ((name, dtype, shape), ...)): see :meth:`_fast_feeds`
        self._expected: tuple[dict[str, TensorType], tuple[tuple[str, np.dtype, tuple[int, ...]], ...]] | None = None

    def _fast_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The feeds when they are exactly the inputs as contiguous arrays of the right dtype and shape
        (what a caller running the same network again passes); None: check them one by one."""
        exp = self._expected
        if exp is None or exp[0] is not self.input_types:
            exp = self._expected = (self.input_types, tuple((n, np.dtype(t.dtype), tuple(t.shape))
                                                            for n, t in self.input_types.items()))
        if type(feeds) is not dict or len(feeds) != len(exp[1]):
            return None
        out: dict[str, np.ndarray] = {}
        for name, dtype, shape in exp[1]:
            a = feeds.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                return None
            out[name] = a
        return out

    def describe_inputs(self) -> str:
        """``name: type, ...`` of the inputs, for messages."""
        return ", ".join(f"{n}: {t}" for n, t in self.input_types.items()) or "(no inputs)"

    def check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check names, dtypes and shapes of ``feeds``; return them as contiguous arrays.

        Python scalars and (nested) lists are converted when they convert
        exactly; numpy arrays must already have the input's dtype and shape.
        """
        fast = self._fast_feeds(feeds)
        if fast is not None:
            return fast
        if not isinstance(feeds, Mapping):
            raise InputError(
                f"run() takes a dict of input name -> numpy array, got {type(feeds).__name__}",
                hint=f"the network takes {self.describe_inputs()}",
            )
        bad_keys = [k for k in feeds if not isinstance(k, str)]
        if bad_keys:
            raise InputError(f"input names must be strings, got {', '.join(repr(k) for k in bad_keys[:3])}",
                             hint=f"the network takes {self.describe_inputs()}")
        missing = [n for n in self.input_types if n not in feeds]
        unknown = [n for n in feeds if n not in self.input_types]
        if missing or unknown:
            what = []
            if missing:
                what.append("missing input(s) " + ", ".join(f"'{n}'" for n in missing))
            if unknown:
                what.append("unknown input(s) " + ", ".join(f"'{n}'" for n in unknown))
            raise InputError("; ".join(what) + f"; the network takes {self.describe_inputs()}")
        return {name: self._check_one(name, t, feeds[name]) for name, t in self.input_types.items()}

    @staticmethod
    def _check_one(name: str, t: TensorType, value: Any) -> np.ndarray:
        if isinstance(value, np.ndarray):
            a = value
        elif isinstance(value, (bool, int, float, complex, np.generic, list, tuple)):
            try:
                a = np.asarray(value)
            except (ValueError, TypeError) as e:
                raise InputError(f"input '{name}' cannot be converted to an array: {e}",
                                 hint=f"pass a numpy array of type {t}") from None
            if a.dtype != t.dtype and a.dtype.kind in "biuf":
                with np.errstate(all="ignore"):
                    converted = a.astype(t.dtype)
                    exact = np.array_equal(converted.astype(a.dtype), a, equal_nan=a.dtype.kind == "f")
                if exact:
                    a = converted
        else:
            raise InputError(f"input '{name}' must be a numpy array, got {type(value).__name__}",
                             hint=f"pass a numpy array of type {t}")
        if a.dtype != t.dtype:
            raise InputError(f"input '{name}' has dtype {a.dtype}, expected {t.dtype} ({t})",
                             hint=f"convert it with .astype(numpy.{t.dtype})")
        if tuple(a.shape) != t.shape:
            raise InputError(f"input '{name}' has shape {list(a.shape)}, expected {list(t.shape)} ({t})",
                             hint="recompile with input_shapes={...} for another shape")
        return np.asarray(a, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check ``feeds`` (names, dtypes, shapes), run once, return outputs by name."""
        checked = self.check_feeds(feeds)
        try:
            return self.executable.execute(checked)
        except GlowError:
            raise
        except MemoryError:
            raise BudgetError(f"backend '{self.backend.name}' ran out of memory running the network",
                              hint="free memory, or compile a smaller model or batch") from None
        except Exception as e:  # noqa: BLE001  (a backend bug must surface as a clear error)
            raise ExecutionError(
                f"backend '{self.backend.name}' failed while running: {type(e).__name__}: {e}",
                hint="this is a bug in the backend; rerun with --traceback for details",
            ) from e


def compile(
    model: str | os.PathLike[str] | onnx.ModelProto | bytes,
    backend: str = "interpreter",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    bind: Mapping[str, np.ndarray] | None = None,
    threads: int | None = None,
    debug: bool = False,
    options: Mapping[str, Any] | None = None,
    devices: str | None = None,
    quantize: Any = None,
) -> CompiledNetwork:
    """Import an ONNX model and compile it for ``backend``.

    ``model`` is a path, ``"zoo:NAME"`` (a light model shipped with onnx), an
    ``onnx.ModelProto`` or the serialized bytes of one. ``input_shapes`` fixes
    symbolic or unknown input dimensions (``{"x": (1, 3, 224, 224)}``).
    ``devices`` (``"cpu:2,xyz:1"``, docs/runtime.md) partitions the network over several devices
    through the runtime instead; ``backend`` is then ignored.
    ``quantize`` (a :class:`glow_core.quantization.QuantizationConfig` with a ``profile``, or a
    profile path) converts the network to int8 with that profile (docs/quantization.md).
    """
    if devices is not None and quantize is not None:
        raise InputError("quantize and devices cannot be combined yet", hint="quantize for one backend")
    if devices is not None:
        from glow_core.runtime.network import compile_on_devices

        return compile_on_devices(model, devices, input_shapes, bind=bind, threads=threads, options=options)
    model = _check_model_arg(model)
    shapes = _check_input_shapes(input_shapes)
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise InputError(f"threads must be a positive integer, got {threads!r}")
    be = get_backend(backend)
    with budget.using(budget.current().with_options(options)):
        return _compile(model, be, shapes, bind, threads, debug, options, quantize)


def _compile(model: str | os.PathLike[str] | onnx.ModelProto, be: Backend, shapes: dict[str, tuple[int, ...]] | None,
             bind: Mapping[str, np.ndarray] | None, threads: int | None, debug: bool,
             options: Mapping[str, Any] | None, quantize: Any = None) -> CompiledNetwork:
    t0 = time.perf_counter()
    copts = compile_options(threads=threads, debug=debug, extra=dict(options or {}))
    pkey, data = compilecache.program_key(model, be, copts, shapes) if bind is None and quantize is None \
        else (None, None)
    if pkey is not None:  # the program cache: served before the import (glow_core/compilecache.py)
        hit = compilecache.load(pkey, be, copts)
        if hit is not None:
            fn, exe, counts = hit
            stats = CompileStats(import_s=time.perf_counter() - t0, nodes_by_kind=counts)
            stats.backend_s = {**dict(getattr(exe, "compile_timings", None) or {}), "program": True}
            return CompiledNetwork(fn, exe, be, stats)
    proto, _ = load_model(model, data)  # (the bytes the key hashed: the file is read once)
    del data
    if has_control_flow(proto.graph):  # split at run-time control flow (docs/control-flow.md)
        if quantize is not None:
            raise UnsupportedError("int8 quantization of a model with If, Loop or Scan is not supported yet",
                                   hint="compile it without --quantize")
        from glow_core.controlflow import Target, compile_staged

        return compile_staged(proto, Target(be, threads, debug, dict(options or {}), budget.current()), shapes, bind)
    stats = CompileStats()
    fn = OnnxImporter(proto, shapes, bind).run()
    stats.import_s = time.perf_counter() - t0
    net = compile_function(fn, be, stats, threads=threads, debug=debug, options=options, quantize=quantize)
    if pkey is not None:
        compilecache.store(pkey, be, net.function, net.executable, stats.nodes_by_kind, proto)
    return net


def compile_function(fn: Function, be: Backend, stats: CompileStats, *, threads: int | None = None,
                     debug: bool = False, options: Mapping[str, Any] | None = None,
                     quantize: Any = None) -> CompiledNetwork:
    """Optimize, lower, check and compile an imported function for ``be`` (the back half of ``compile``)."""
    from glow_core.passes import PassContext

    t1 = time.perf_counter()
    ctx = PassContext(backend=be, debug=debug)
    fn = prepare_function(fn, be, debug=debug, ctx=ctx, quantizable=quantize is not None)
    stats.pass_s = dict(ctx.timings)
    if quantize is not None:
        from glow_core.quantization.apply import quantize_prepared

        stats.quantized = quantize_prepared(fn, be, quantize)
    stats.optimize_s = time.perf_counter() - t1
    stats.nodes_by_kind = fn.count_by_kind()
    budget.check_function(fn)  # what lowering made, before the backend allocates for it
    check_support(fn, be)
    t2 = time.perf_counter()
    try:
        exe = be.compile(fn, compile_options(threads=threads, debug=debug, extra=dict(options or {})))
    except GlowError:
        raise
    except MemoryError:
        raise BudgetError(f"backend '{be.name}' ran out of memory compiling the model",
                          hint="free memory, or lower GLOW_MAX_TOTAL_BYTES") from None
    except Exception as e:  # noqa: BLE001  (a backend bug must surface as a clear error)
        raise BackendError(
            f"backend '{be.name}' failed to compile the model: {type(e).__name__}: {e}",
            hint="this is a bug in the backend; rerun with --traceback for details",
        ) from e
    stats.backend_compile_s = time.perf_counter() - t2
    timings = getattr(exe, "compile_timings", None)
    if isinstance(timings, dict):
        stats.backend_s = dict(timings)
    return CompiledNetwork(fn, exe, be, stats)


def _check_model_arg(model: Any) -> str | os.PathLike[str] | onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except Exception as e:  # noqa: BLE001  (protobuf raises assorted errors on garbage)
            raise ModelError(f"the bytes given are not a serialized ONNX model ({type(e).__name__}: {e})") from None
        return proto
    if isinstance(model, str):
        return zoo.resolve_model(model)
    if isinstance(model, os.PathLike):
        return model
    raise ModelError(
        f"model must be a path, 'zoo:NAME', an onnx.ModelProto or bytes, got {type(model).__name__}"
    )


def _check_input_shapes(input_shapes: Any) -> dict[str, Any] | None:
    if input_shapes is None:
        return None
    if not isinstance(input_shapes, Mapping):
        raise ImportShapeError(
            f"input_shapes must be a dict of input name -> shape, got {type(input_shapes).__name__}"
        )
    out: dict[str, Any] = {}
    for name, shape in input_shapes.items():
        if isinstance(shape, (SeqShape, OptShape)):  # a sequence / optional input (glow_core/importer/structured.py)
            out[str(name)] = shape
            continue
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        try:
            dims = tuple(int(d) for d in shape)
            if any(isinstance(d, float) and not float(d).is_integer() for d in shape):
                raise ValueError
        except (TypeError, ValueError):
            raise ImportShapeError(f"input_shapes['{name}'] = {shape!r} is not a sequence of integers") from None
        if any(d < 0 for d in dims):
            raise ImportShapeError(f"input_shapes['{name}'] = {list(dims)} has a negative dimension")
        out[str(name)] = dims
    return out


if TYPE_CHECKING:
    from glow_core.passes import PassContext


def prepare_function(fn: Function, backend: Backend, debug: bool = False,
                     ctx: PassContext | None = None, quantizable: bool = False) -> Function:
    """Graph optimization and lowering for a backend (the middle of the pipeline). ``quantizable=True``
    builds the graph the int8 conversion (and the profile it reads) sees: no fusion the conversion cannot
    quantize piece by piece (a residual Add in FusedConv, FusedLayerNorm, FusedAttention)."""
    from glow_core.passes import PassContext, PassManager
    from glow_core.passes.pipelines import default_pipeline

    ctx = ctx or PassContext(backend=backend, debug=debug)
    ctx.backend = backend
    ctx.options["quantizable"] = quantizable
    PassManager(default_pipeline()).run(fn, ctx)
    if debug:
        fn.verify()
    return fn


__all__ = ["CompileStats", "CompiledNetwork", "ElemKind", "check_support", "compile", "compile_options"]
