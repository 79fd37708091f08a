"""The Python API, the facade over the compiler: ``compile``, ``profile`` and ``load_bundle``.

``glow_core.compile(model, backend=...)`` returns a :class:`CompiledNetwork`. The work is done below:
the driver picks the route (:mod:`glow_core.driver`), the pipeline compiles (:mod:`glow_core.pipeline`).
Nothing in ``glow_core`` imports this module; it is the top of the core (docs/architecture.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from glow_core.bundle import LoadedBundle
from glow_core.bundle import load_bundle as _load_bundle
from glow_core.driver import compile_model
from glow_core.importer.symbols import DimBound
from glow_core.ir.types import ElemKind
from glow_core.pipeline import CompiledNetwork, CompileStats, check_input_shapes, check_support, compile_options
from glow_core.pipeline.specialize import CacheLimits, DynamicNetwork
from glow_core.plugin_host import default_backend
from glow_core.quantization.profile import DEFAULT_BINS, Profile
from glow_core.quantization.profile import profile as _profile


def compile(
    model: str | os.PathLike[str] | onnx.ModelProto | bytes,
    backend: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    bind: Mapping[str, np.ndarray] | None = None,
    threads: int | None = None,
    debug: bool = False,
    options: Mapping[str, Any] | None = None,
    devices: str | None = None,
    quantize: Any = None,
    dims: Mapping[str, int | tuple[int | None, int | None] | DimBound] | None = None,
    specializations: CacheLimits | None = None,
    precision: str | None = None,
) -> CompiledNetwork | DynamicNetwork:
    """Import an ONNX model and compile it for ``backend``.

    ``model`` is a path, ``"zoo:NAME"`` (a light model shipped with onnx), an
    ``onnx.ModelProto`` or the serialized bytes of one. ``backend`` is a name as listed by
    ``glow backends``; None picks the fastest installed (``cpu`` when present, else ``interpreter``:
    :func:`glow_core.plugin_host.default_backend`). ``input_shapes`` fixes
    symbolic or unknown input dimensions (``{"x": (1, 3, 224, 224)}``).
    ``devices`` (``"cpu:2,xyz:1"``, docs/runtime.md) partitions the network over several devices
    through the runtime instead; ``backend`` is then ignored.
    ``quantize`` (a :class:`glow_core.quantization.QuantizationConfig` with a ``profile``, or a
    profile path) converts the network to int8 with that profile (docs/quantization.md).

    A model whose inputs have symbolic or unknown dims that ``input_shapes`` and ``dims`` leave open
    compiles to a :class:`DynamicNetwork`: its ``run`` accepts every conforming shape, compiling a
    specialization per input signature on first use (kept in an LRU bounded by ``specializations``, a
    :class:`CacheLimits`; the weights are held once). ``dims`` maps a symbol to a size (``{"sequence": 128}``,
    applied to every input that names it) or to a bound (``{"sequence": (1, 512)}`` or a :class:`DimBound`);
    a feed out of bounds is an ``InputError`` (docs/dynamic-shapes.md).

    ``precision="bf16"`` (the ``options`` key ``precision``) runs the float32 GEMMs (FullyConnected /
    MatMul with a constant weight, the GEMM path of convolutions) on bfloat16 operands with float32 sums
    (docs/performance.md, "bf16"); a backend without the option refuses it (``UnsupportedError``). The
    default, "fp32", computes in float32 throughout.
    """
    if precision is not None:
        options = {**dict(options or {}), "precision": precision}
    return compile_model(model, backend or _default(devices), input_shapes, bind=bind, threads=threads, debug=debug,
                         options=options, devices=devices, quantize=quantize, dims=dims,
                         specializations=specializations)


def _default(devices: str | None) -> str:
    """The backend when none is named: ignored with ``devices``, else the fastest installed."""
    return "" if devices is not None else default_backend()


def profile(model: Any, data: Any, backend: str | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
            *, image: Any = None, progress: bool | None = None, bins: int = DEFAULT_BINS,
            threads: int | None = None, dims: Mapping[str, int] | None = None) -> Profile:
    """Profile ``model`` on sample ``data`` for int8 quantization (docs/quantization.md); ``backend`` None:
    the fastest installed (the profile quantizes the model for any backend, docs/quantization.md).

    ``data`` is a path (a folder of .npy/.npz/image files, or one .npz/.npy with samples along axis 0),
    a mapping input name -> array with samples along axis 0, or an iterable of feed dicts. ``image`` is an
    :class:`~glow_core.quantization.data.ImageOptions` for image folders. ``progress`` None draws the
    bar only when stderr is a terminal. ``dims`` fixes symbols (``{"batch": 1}``) in every input that names them:
    a profile is recorded at one static shape.
    """
    return _profile(model, data, backend or default_backend(), check_input_shapes(input_shapes, dims), image=image,
                    progress=progress, bins=bins, threads=threads)


def load_bundle(directory: str | os.PathLike[str], name: str | None = None, *, cc: str | None = None) -> LoadedBundle:
    """Link the ahead-of-time bundle in ``directory`` (``glow bundle``) into a shared library and load it
    to run it from Python; ``name`` picks the bundle when the folder holds several; needs a C compiler
    (``cc``, ``$CC`` or ``cc`` on the path)."""
    return _load_bundle(directory, name, cc=cc)


__all__ = ["CacheLimits", "CompileStats", "CompiledNetwork", "DimBound", "DynamicNetwork", "ElemKind", "check_support", "compile", "compile_options",
           "load_bundle", "profile"]
