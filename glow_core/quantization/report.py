"""How good is the int8 network? Agreement with the float model, and the layers that lose most.

:func:`compare_quantized` runs the float and the quantized network on the same
samples and reports, per output, the top-1 agreement (outputs whose last axis
holds two or more scores), the largest and mean absolute error and the mean
cosine similarity; and, per quantized layer, the signal-to-quantization-noise
ratio ``SQNR = 10 log10(sum f^2 / sum (f - q)^2)`` (dB) of its dequantized
result against the float one, worst first: the candidates for ``--keep-float``.
The per-layer figures come from a copy of the quantized network whose converted
results are also outputs (which keeps a few rescales from folding); the output
figures come from the network exactly as ``compile(quantize=...)`` builds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.errors import InputError
from glow_core.pipeline import (
    CompileStats,
    check_input_shapes,
    check_model_arg,
    compile_function,
    compile_prepared,
    import_function,
    prepare_model,
)
from glow_core.plugin_host import get_backend
from glow_core.quantization.convert import Conversion

EXPOSE = "__quant__."


@dataclass
class OutputAgreement:
    """Agreement of one output of a network (int8, bf16) with the float32 one, over the samples ``add``-ed."""

    name: str
    samples: int = 0
    rows: int = 0
    top1_agree: int | None = None
    max_abs: float = 0.0
    #: the float output's largest magnitude (the scale ``max_rel`` divides by)
    ref_max: float = 0.0
    abs_sum: float = 0.0
    count: int = 0
    cosines: list[float] = field(default_factory=list)

    @property
    def top1(self) -> float | None:
        return None if self.top1_agree is None or not self.rows else self.top1_agree / self.rows

    @property
    def max_rel(self) -> float:
        """The largest difference relative to the float output's largest magnitude."""
        return self.max_abs / self.ref_max if self.ref_max > 0 else 0.0

    @property
    def mean_abs(self) -> float:
        return self.abs_sum / self.count if self.count else 0.0

    @property
    def cosine(self) -> float:
        return float(np.mean(self.cosines)) if self.cosines else 1.0

    def add(self, f: np.ndarray, q: np.ndarray) -> None:
        f64, q64 = f.astype(np.float64), q.astype(np.float64)
        diff = np.abs(f64 - q64)
        self.samples += 1
        self.max_abs = max(self.max_abs, float(diff.max()) if diff.size else 0.0)
        self.ref_max = max(self.ref_max, float(np.abs(f64).max()) if f64.size else 0.0)
        self.abs_sum += float(diff.sum())
        self.count += diff.size
        nf, nq = np.linalg.norm(f64), np.linalg.norm(q64)
        self.cosines.append(1.0 if nf == 0 and nq == 0 else float(f64.ravel() @ q64.ravel() / (nf * nq))
                            if nf and nq else 0.0)
        if f.ndim >= 1 and f.shape[-1] >= 2:
            fa, qa = f64.reshape(-1, f.shape[-1]).argmax(axis=1), q64.reshape(-1, f.shape[-1]).argmax(axis=1)
            self.top1_agree = (self.top1_agree or 0) + int((fa == qa).sum())
            self.rows += fa.size

    def line(self) -> str:
        top = "" if self.top1 is None else (f"top-1 agreement {100 * self.top1:.1f}% "
                                            f"({self.top1_agree}/{self.rows})  ")
        return (f"output {self.name}: {top}max abs error {self.max_abs:.4g}  mean abs error {self.mean_abs:.4g}  "
                f"cosine {self.cosine:.5f}")


@dataclass
class LayerNoise:
    """Signal and noise energy of one quantized layer's result over all samples."""

    name: str
    kind: str
    origin: str
    signal: float = 0.0
    noise: float = 0.0

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0:
            return math.inf
        return 10 * math.log10(self.signal / self.noise) if self.signal > 0 else -math.inf


@dataclass
class QuantReport:
    model: str
    backend: str
    samples: int
    conversion: Conversion
    outputs: list[OutputAgreement]
    layers: list[LayerNoise]

    def worst(self, n: int = 5) -> list[LayerNoise]:
        return sorted(self.layers, key=lambda layer: layer.sqnr_db)[:n]

    def lines(self, worst: int = 5) -> list[str]:
        kinds = ", ".join(f"{k} x{len(v)}" for k, v in self.conversion.quantized.items()) or "nothing"
        out = [f"model    {self.model}", f"backend  {self.backend}", f"int8     {kinds}; "
               f"{len(self.conversion.kept_float)} convertible node(s) kept float", f"samples  {self.samples}"]
        auto = list(self.conversion.auto_kept_float)
        if auto:
            out.append(f"float    {len(auto)} node(s) by --auto-keep-float: " + ", ".join(auto[:8])
                       + (f" (+{len(auto) - 8} more)" if len(auto) > 8 else ""))
        out += [o.line() for o in self.outputs]
        out.append(f"worst {min(worst, len(self.layers))} of {len(self.layers)} quantized layers by SQNR "
                   "(signal-to-quantization-noise ratio; keep one float with --keep-float NAME):")
        for i, layer in enumerate(self.worst(worst), 1):
            origin = f"  (ONNX node {layer.origin})" if layer.origin and layer.origin != layer.name else ""
            out.append(f"  {i}. {layer.name:32s} {layer.kind:12s} {layer.sqnr_db:7.2f} dB{origin}")
        return out


def compare_quantized(model: Any, quantize: Any, data: Any, backend: str = "interpreter",
                      input_shapes: Mapping[str, Sequence[int]] | None = None, *, image: Any = None) -> QuantReport:
    """Run the float and the int8 network on ``data`` (as ``glow profile`` reads it) and compare them."""
    import os

    from glow_core.quantization.apply import quantize_prepared
    from glow_core.quantization.data import open_samples
    from glow_core.quantization.profile import profiled_values

    be = get_backend(backend)
    arg, shapes = check_model_arg(model), check_input_shapes(input_shapes)
    fn_q = prepare_model(arg, be, shapes, quantizable=True)
    infos = profiled_values(fn_q)
    conversion = quantize_prepared(fn_q, be, quantize, expose=EXPOSE)
    exposed = {n[len(EXPOSE):]: n for n, _ in fn_q.outputs if n.startswith(EXPOSE)}
    fn_f = prepare_model(arg, be, shapes, quantizable=True)
    values = profiled_values(fn_f)
    for name, out in exposed.items():
        fn_f.set_output(out, values[name][0])
    real_names = [n for n, _ in fn_f.outputs if not n.startswith(EXPOSE)]
    net_f, net_x = compile_prepared(fn_f, be), compile_prepared(fn_q, be)
    net_q = compile_function(import_function(arg, shapes), be, CompileStats(),
                             transform=lambda f: quantize_prepared(f, be, quantize))
    layers = {n: LayerNoise(n, infos[n][1].kind, infos[n][1].origin) for n in exposed}
    outputs = {n: OutputAgreement(n) for n in real_names}
    samples = 0
    for _, feeds in open_samples(data, net_f.input_types, image):
        ff, fx, fq = net_f.run(feeds), net_x.run(feeds), net_q.run(feeds)
        for name, out in exposed.items():
            f, q = ff[out].astype(np.float64), fx[out].astype(np.float64)
            layers[name].signal += float(np.sum(f * f))
            layers[name].noise += float(np.sum((f - q) ** 2))
        for name in real_names:
            if ff[name].dtype.kind == "f":
                outputs[name].add(ff[name], fq[name])
        samples += 1
    if not samples:
        raise InputError("no samples to compare on", hint="give a folder of .npy/.npz/image files or an .npz file")
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "(model)"
    return QuantReport(label, be.name, samples, conversion, [o for o in outputs.values() if o.samples],
                       list(layers.values()))
