"""Profile-guided int8 quantization (docs/quantization.md).

- :func:`profile` runs a model on sample data and records every float value's
  range and histogram (:mod:`.profile`, :mod:`.histogram`, data forms in :mod:`.data`);
- :func:`calibrate` turns a record into (scale, offset) for a
  :class:`QuantizationConfig` (:mod:`.calibration`); weights get per-channel
  ranges (:mod:`.weights`);
- conversion to typed quantized kinds (:mod:`.convert`), the quantization passes
  (:mod:`.qpasses`), lowering onto the ONNX-style quantized kinds (:mod:`.qlower`),
  all driven by ``glow_core.compile(..., quantize=...)`` through :mod:`.apply`;
- :func:`compare_quantized` (:mod:`.report`): agreement with the float model, layers by SQNR.
"""

from __future__ import annotations

from glow_core.quantization.calibration import (
    RANGE_METHODS,
    SCHEMA_RULES,
    CalibrationError,
    QuantParams,
    calibrate,
    calibrate_profile,
    calibrated_range,
    params_for_range,
)
from glow_core.quantization.config import QuantizationConfig, QuantizationConfigError
from glow_core.quantization.data import ImageOptions, open_samples
from glow_core.quantization.histogram import DEFAULT_BINS, Histogram, ValueRecord
from glow_core.quantization.images import ImageError, read_image, resize_bilinear
from glow_core.quantization.profile import (
    Profile,
    ProfileMismatchError,
    ValueInfo,
    check_profile,
    fingerprint,
    load_profile,
    match_profile,
    profile,
    profiled_values,
)
from glow_core.quantization.convert import CONVERTERS, Conversion, convert
from glow_core.quantization.qlower import lower_quantized
from glow_core.quantization.qpasses import optimize_quantized, quantization_pipeline
from glow_core.quantization import lut as _lut  # noqa: E402,F401  (registers the lut-islands pass)
from glow_core.quantization.report import QuantReport, compare_quantized
from glow_core.quantization.weights import (
    WEIGHT_OPERANDS,
    ChannelParams,
    ChannelRanges,
    channel_params,
    weight_channel_ranges,
)

__all__ = [
    "CONVERTERS", "Conversion", "QuantReport", "compare_quantized", "convert", "lower_quantized",
    "optimize_quantized", "quantization_pipeline",
    "DEFAULT_BINS", "RANGE_METHODS", "SCHEMA_RULES", "WEIGHT_OPERANDS", "CalibrationError", "ChannelParams",
    "ChannelRanges", "Histogram", "ImageError", "ImageOptions", "Profile", "ProfileMismatchError", "QuantParams",
    "QuantizationConfig", "QuantizationConfigError", "ValueInfo", "ValueRecord", "calibrate", "calibrate_profile",
    "calibrated_range", "channel_params", "check_profile", "fingerprint", "load_profile", "match_profile",
    "open_samples", "params_for_range", "profile", "profiled_values", "read_image", "resize_bilinear", "weight_channel_ranges",
]
