"""``glow_core.compile(..., quantize=...)``: convert a prepared float function with a profile.

Order: match the profile to the prepared function (the same graph for the backend it was made for;
portable keys for another backend: ``profile.match_profile``) -> calibrate -> :func:`~.convert.convert` -> quantization passes -> when the backend
does not run every typed quantized node, :func:`~.qlower.lower_quantized` and the
ordinary lowering and post-lowering pipelines again.
"""

from __future__ import annotations

import os
from typing import Any

from glow_core.errors import InputError
from glow_core.ir.graph import Function
from glow_core.quantization.config import QuantizationConfig
from glow_core.quantization.convert import Conversion, calibrate_all, convert
from glow_core.quantization.profile import Profile, load_profile, match_profile
from glow_core.quantization.qlower import QLOWERINGS, lower_quantized
from glow_core.quantization.qpasses import optimize_quantized


def as_config(quantize: Any) -> QuantizationConfig:
    """A QuantizationConfig from a config, or from a profile path / Profile (defaults for the rest)."""
    if isinstance(quantize, QuantizationConfig):
        cfg = quantize
    elif isinstance(quantize, (str, os.PathLike, Profile)):
        cfg = QuantizationConfig(profile=quantize)
    else:
        raise InputError(f"quantize must be a QuantizationConfig or a profile path, got {type(quantize).__name__}")
    if cfg.profile is None:
        raise InputError("quantize needs a profile: QuantizationConfig(profile='profile.json', ...)",
                         hint="make one with `glow profile MODEL --data DATA -o profile.json`")
    return cfg


def quantize_prepared(fn: Function, backend: Any, quantize: Any, expose: str | None = None) -> Conversion:
    """Convert the prepared function ``fn`` (for ``backend``) in place; returns what was converted.

    ``expose``: see :func:`~.convert.convert`.
    """
    from glow_core.passes import PassContext, PassManager
    from glow_core.passes.pipelines import lowering_pipeline, post_lowering_pipeline

    cfg = as_config(quantize)
    if isinstance(cfg.profile, Profile):
        profile = match_profile(cfg.profile, fn, backend.name)
    else:
        profile = load_profile(cfg.profile, fn, backend.name)
    params, low = calibrate_all(profile.records, cfg)
    done = convert(fn, params, cfg, expose, low)
    optimize_quantized(fn)
    typed = [n for n in fn.nodes if n.kind.name in QLOWERINGS or any(o.type.elem.is_quantized for o in n.outputs)]
    if any(not backend.supports(n) for n in typed):
        lower_quantized(fn)
        PassManager(lowering_pipeline() + post_lowering_pipeline()).run(fn, PassContext(backend=backend))
    fn.verify()
    return done
