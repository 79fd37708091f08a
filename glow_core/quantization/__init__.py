"""Profile-guided quantization. This stage: profiling (``profile``) and calibration.

- :func:`profile` runs a model on sample data and records every float value's
  range and histogram (:mod:`.profile`, :mod:`.histogram`, data forms in :mod:`.data`);
- :func:`calibrate` turns a record into (scale, offset) for a
  :class:`QuantizationConfig` (:mod:`.calibration`); weights get per-channel
  ranges (:mod:`.weights`).

Conversion of a graph to int8 is the next stage and not available yet.
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
    profile,
    profiled_values,
)
from glow_core.quantization.weights import (
    WEIGHT_OPERANDS,
    ChannelParams,
    ChannelRanges,
    channel_params,
    weight_channel_ranges,
)

__all__ = [
    "DEFAULT_BINS", "RANGE_METHODS", "SCHEMA_RULES", "WEIGHT_OPERANDS", "CalibrationError", "ChannelParams",
    "ChannelRanges", "Histogram", "ImageError", "ImageOptions", "Profile", "ProfileMismatchError", "QuantParams",
    "QuantizationConfig", "QuantizationConfigError", "ValueInfo", "ValueRecord", "calibrate", "calibrate_profile",
    "calibrated_range", "channel_params", "check_profile", "fingerprint", "load_profile", "open_samples",
    "params_for_range", "profile", "profiled_values", "read_image", "resize_bilinear", "weight_channel_ranges",
]
