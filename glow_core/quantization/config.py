"""``QuantizationConfig``: the choices of a quantization run, validated up front."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from glow_core.errors import InputError


class QuantizationConfigError(InputError):
    """A quantization setting is unknown, out of range or inconsistent with another."""


#: precision name -> (signed qmin, signed qmax, unsigned qmax)
PRECISIONS: dict[str, tuple[int, int, int]] = {
    "int8": (-128, 127, 255),
    "int16": (-32768, 32767, 65535),
}
SCHEMAS = ("asymmetric", "symmetric", "symmetric_uint8")
CALIBRATIONS = ("minmax", "percentile", "entropy")


@dataclass(frozen=True)
class QuantizationConfig:
    """How values are quantized.

    - ``schema``: ``asymmetric`` (scale and offset, the range maps onto all levels),
      ``symmetric`` (offset 0, range [-a, a]), ``symmetric_uint8`` (offset 0; a value
      that is never negative uses the unsigned levels [0, 255], others as ``symmetric``);
    - ``calibration``: how a range is chosen from a profile record: ``minmax``,
      ``percentile`` (``percentile`` in (50, 100]) or ``entropy`` (KL divergence);
    - ``per_channel``: weights of Conv/MatMul/Gemm get one scale per output channel;
    - ``precision``: ``int8`` or ``int16`` (``symmetric_uint8`` needs ``int8``);
    - ``keep_float_kinds`` / ``keep_float_names``: node kinds and value names that stay float;
    - ``keep_float``: kinds or node names, sorted into the two sets above (a known kind name is a kind);
    - ``auto_keep_float``: a signal-to-quantization-noise ratio in dB, or None; values whose estimated
      SQNR (from the profile's histogram, with the chosen calibration) is lower stay float, and so do
      the nodes that would quantize them;
    - ``profile``: the profile to convert with (a path or a ``Profile``); needed by
      ``glow_core.compile(..., quantize=...)``, not by calibration alone.
    """

    schema: str = "asymmetric"
    calibration: str = "minmax"
    percentile: float = 99.99
    per_channel: bool = True
    precision: str = "int8"
    keep_float_kinds: frozenset[str] = field(default_factory=frozenset)
    keep_float_names: frozenset[str] = field(default_factory=frozenset)
    keep_float: frozenset[str] = field(default_factory=frozenset)
    auto_keep_float: float | None = None
    profile: Any = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.keep_float:
            from glow_core.ir.kinds import all_kinds

            kf = self.keep_float
            if isinstance(kf, str) or not all(isinstance(x, str) for x in kf):
                raise QuantizationConfigError(f"keep_float must be a collection of strings, got {kf!r}")
            known = set(all_kinds())
            object.__setattr__(self, "keep_float_kinds", frozenset(self.keep_float_kinds) | {x for x in kf if x in known})
            object.__setattr__(self, "keep_float_names",
                               frozenset(self.keep_float_names) | {x for x in kf if x not in known})
            object.__setattr__(self, "keep_float", frozenset(kf))
        _one_of("schema", self.schema, SCHEMAS)
        _one_of("calibration", self.calibration, CALIBRATIONS)
        _one_of("precision", self.precision, tuple(PRECISIONS))
        if isinstance(self.percentile, bool) or not isinstance(self.percentile, (int, float)) \
                or not math.isfinite(self.percentile) or not 50.0 < self.percentile <= 100.0:
            raise QuantizationConfigError(f"percentile must be a number in (50, 100], got {self.percentile!r}",
                                          hint="e.g. 99.99 keeps all but the largest 0.01% of magnitudes")
        akf = self.auto_keep_float
        if akf is not None and (isinstance(akf, bool) or not isinstance(akf, (int, float)) or not math.isfinite(akf)
                                or not 0.0 <= akf <= 100.0):
            raise QuantizationConfigError(f"auto_keep_float must be None or an SQNR in dB in [0, 100], got {akf!r}",
                                          hint="e.g. 20 keeps float the values int8 would reproduce with < 20 dB")
        if not isinstance(self.per_channel, bool):
            raise QuantizationConfigError(f"per_channel must be True or False, got {self.per_channel!r}")
        if self.schema == "symmetric_uint8" and self.precision != "int8":
            raise QuantizationConfigError(f"schema symmetric_uint8 needs precision int8, got {self.precision}",
                                          hint="use schema symmetric for int16")
        for what in ("keep_float_kinds", "keep_float_names"):
            v = getattr(self, what)
            if isinstance(v, str) or not all(isinstance(x, str) for x in v):
                raise QuantizationConfigError(f"{what} must be a collection of strings, got {v!r}")
            object.__setattr__(self, what, frozenset(v))
        if self.keep_float_kinds:
            from glow_core.ir.kinds import all_kinds

            known = set(all_kinds())
            unknown = sorted(self.keep_float_kinds - known)
            if unknown:
                raise QuantizationConfigError(f"keep_float_kinds names unknown node kind(s): {', '.join(unknown)}",
                                              hint="see docs/graph-ir.md for the kind table")

    @property
    def qrange(self) -> tuple[int, int]:
        lo, hi, _ = PRECISIONS[self.precision]
        return lo, hi

    @property
    def unsigned_max(self) -> int:
        return PRECISIONS[self.precision][2]

    def keeps_float(self, kind: str, name: str) -> bool:
        return kind in self.keep_float_kinds or name in self.keep_float_names

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "calibration": self.calibration, "percentile": self.percentile,
                "per_channel": self.per_channel, "precision": self.precision,
                "keep_float_kinds": sorted(self.keep_float_kinds), "keep_float_names": sorted(self.keep_float_names),
                **({"auto_keep_float": self.auto_keep_float} if self.auto_keep_float is not None else {}),
                **({"profile": str(self.profile)} if isinstance(self.profile, (str, os.PathLike)) else {})}


def _one_of(what: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise QuantizationConfigError(f"unknown {what} {value!r}", hint="one of: " + ", ".join(allowed))
