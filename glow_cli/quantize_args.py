"""``--quantize PROFILE.json`` and its companions, shared by run, compile, bench, compare and bundle."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from glow_core.errors import InputError


def add_quantize_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("int8 quantization (docs/quantization.md)")
    g.add_argument("--quantize", metavar="PROFILE.json", type=Path, default=None,
                   help="convert the network to int8 with this profile (made by 'glow profile' for the same "
                        "input shapes, on any backend)")
    g.add_argument("--schema", choices=("asymmetric", "symmetric", "symmetric_uint8"), default="asymmetric",
                   help="how activations map to integers (default asymmetric)")
    g.add_argument("--calibration", choices=("minmax", "percentile", "entropy"), default="minmax",
                   help="how a range is chosen from the profile (default minmax)")
    g.add_argument("--percentile", metavar="P", type=float, default=99.99,
                   help="with --calibration percentile: the percentile kept (default 99.99)")
    g.add_argument("--per-tensor", action="store_true",
                   help="one scale per weight tensor instead of one per output channel")
    g.add_argument("--keep-float", metavar="KIND_OR_NODE", action="append", default=[],
                   help="keep this node kind (e.g. Add) or node / ONNX node name in float (repeatable)")
    g.add_argument("--auto-keep-float", metavar="SQNR_DB", type=float, default=None,
                   help="also keep float every value whose int8 SQNR, estimated from the profile, is below "
                        "SQNR_DB (e.g. 20), and the nodes that would quantize it")


def quantize_from_args(args: argparse.Namespace) -> Any:
    """The QuantizationConfig the options describe, or None without --quantize."""
    if args.quantize is None:
        given = [o for o, v in (("--keep-float", args.keep_float), ("--per-tensor", args.per_tensor),
                                ("--auto-keep-float", args.auto_keep_float is not None)) if v]
        if given or args.schema != "asymmetric" or args.calibration != "minmax":
            raise InputError(f"{', '.join(given) or '--schema/--calibration'} need(s) --quantize PROFILE.json")
        return None
    from glow_core.quantization import QuantizationConfig

    if not args.quantize.is_file():
        raise InputError(f"--quantize: profile '{args.quantize}' does not exist",
                         hint="make one with 'glow profile MODEL --data DATA -o profile.json'")
    return QuantizationConfig(profile=args.quantize, schema=args.schema, calibration=args.calibration,
                              percentile=args.percentile, per_channel=not args.per_tensor,
                              keep_float=frozenset(args.keep_float), auto_keep_float=args.auto_keep_float)
