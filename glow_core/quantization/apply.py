"""``glow_core.compile(..., quantize=...)``: convert a prepared float function with a profile.

Order: match the profile to the prepared function (the same graph for the backend it was made for;
portable keys for another backend: ``profile.match_profile``) -> calibrate -> :func:`~.convert.convert` -> quantization passes -> when the backend
does not run every typed quantized node, :func:`~.qlower.lower_quantized` and the
ordinary lowering and post-lowering pipelines again.
"""

from __future__ import annotations

import os
import dataclasses
from typing import Any

from glow_core.errors import InputError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind
from glow_core.quantization.config import QuantizationConfig
from glow_core.quantization.convert import Conversion, calibrate_all, convert
from glow_core.quantization.profile import Profile, load_profile, match_profile, read_profile
from glow_core.quantization.qlower import QLOWERINGS, lower_quantized
from glow_core.quantization.qpasses import optimize_quantized


#: the plain codes a backend's QLookup may take (the lowering keeps lookups of those native)
_PLAIN8 = frozenset({ElemKind.INT8, ElemKind.UINT8})
#: kinds the conversion runs on the 8-bit codes themselves -> the typed kind that may stand for it natively
ON_CODES = {"MaxPool": "QMaxPool", "Concat": "", "Split": "", "Gather": ""}


def float_only_kinds(backend: Any) -> frozenset[str]:
    """The kinds of :data:`ON_CODES` the backend declares, but neither on int8 / uint8 codes nor as their typed
    kind: they stay float (a scaffolded backend declaring MaxPool for float32 only still runs the model). A kind
    it does not declare at all was lowered before the conversion sees the graph."""
    kinds = backend.supported_kinds()
    return frozenset(k for k, typed in ON_CODES.items()
                     if kinds.get(k) and not _PLAIN8 & kinds[k] and not (typed and kinds.get(typed)))


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


def shape_free(quantize: Any) -> QuantizationConfig:
    """``quantize`` (as :func:`as_config` takes it) for a model compiled per input shape: its profile read once and
    made shape-free (``Profile.shape_free``: a value's range holds at every shape), so that each shape's graph
    matches it by value name."""
    cfg = as_config(quantize)
    profile = cfg.profile if isinstance(cfg.profile, Profile) else read_profile(cfg.profile)
    return dataclasses.replace(cfg, profile=profile.shape_free())


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
    unsupported = float_only_kinds(backend) - cfg.keep_float_kinds
    if unsupported:
        cfg = dataclasses.replace(cfg, keep_float_kinds=cfg.keep_float_kinds | unsupported)
    done = convert(fn, params, cfg, expose, low)
    optimize_quantized(fn)
    typed = [n for n in fn.nodes if n.kind.name in QLOWERINGS or any(o.type.elem.is_quantized for o in n.outputs)]
    if any(not backend.supports(n) for n in typed):
        lower_quantized(fn, native_lookup=_PLAIN8 & backend.supported_kinds().get("QLookup", frozenset()))
        PassManager(lowering_pipeline() + post_lowering_pipeline()).run(fn, PassContext(backend=backend))
    fn.verify()
    return done
