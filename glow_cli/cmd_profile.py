"""``glow profile MODEL --data DATA [--backend B] -o profile.json``: record value ranges for quantization."""

from __future__ import annotations

import argparse

from glow_cli.common import Command, add_model_argument, add_shape_argument, shapes_from_args


def _floats(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of numbers") from None
    return vals


def _size(text: str) -> tuple[int, int]:
    try:
        dims = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not SIZE or HEIGHT,WIDTH") from None
    if len(dims) == 1:
        dims = dims * 2
    if len(dims) != 2 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not SIZE or HEIGHT,WIDTH with positive numbers")
    return dims[0], dims[1]


def _bins(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if not 16 <= v <= 65536:
        raise argparse.ArgumentTypeError(f"must be in [16, 65536], got {v}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    p.add_argument("--data", required=True, metavar="DATA",
                   help="a folder of .npy/.npz/image files (one sample each), or one .npz with samples along axis 0")
    p.add_argument("-b", "--backend", default=None, metavar="NAME",
                   help="the backend that runs the profile (default: the fastest installed; the profile quantizes "
                        "the model for any backend)")
    p.add_argument("-o", "--output", required=True, metavar="PROFILE.json", help="where to write the profile")
    add_shape_argument(p)
    img = p.add_argument_group("image preprocessing: x = (pixel * scale - mean) / std")
    img.add_argument("--image-size", type=_size, metavar="H,W", help="resize to H,W (or SIZE for a square; "
                     "bilinear, half-pixel centres; default: the input's spatial size)")
    img.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW", help="input layout (default NCHW)")
    img.add_argument("--channel-order", choices=("RGB", "BGR"), default="RGB", help="channel order (default RGB)")
    img.add_argument("--scale", type=float, default=1.0 / 255.0, help="multiplies pixels 0..255 (default 1/255)")
    img.add_argument("--mean", type=_floats, default=(0.0,), metavar="M[,M,M]", help="subtracted (default 0)")
    img.add_argument("--std", type=_floats, default=(1.0,), metavar="S[,S,S]", help="divides (default 1)")
    p.add_argument("--bins", type=_bins, default=2048, help="histogram bins per value (default 2048)")
    p.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")


def run(args: argparse.Namespace) -> int:
    from glow_core.plugin_host import default_backend
    from glow_core.quantization.data import ImageOptions
    from glow_core.quantization.profile import profile

    image = ImageOptions(size=args.image_size, layout=args.layout, channel_order=args.channel_order,
                         scale=args.scale, mean=args.mean, std=args.std)
    show = False if getattr(args, "quiet", False) else (True if args.progress else None)
    prof = profile(args.model, args.data, args.backend or default_backend(), shapes_from_args(args.input_shape)
                   or None, image=image, progress=show, bins=args.bins)
    prof.save(args.output)
    observed = sum(1 for r in prof.records.values() if r.observed)
    print(f"profiled {len(prof.records)} values ({observed} with finite samples) of {args.model} on "
          f"{prof.backend} over {prof.samples} sample{'' if prof.samples == 1 else 's'} -> {args.output}")
    if prof.symbolic:
        print("symbolic dims: the samples' shapes were profiled into one record per value; --quantize with this "
              "profile compiles the model per input shape")
    nonfinite = [n for n, r in prof.records.items() if r.nonfinite]
    if nonfinite:
        print(f"note: {len(nonfinite)} value(s) saw NaN or inf (kept out of the ranges): {', '.join(nonfinite[:5])}")
    return 0


COMMAND = Command(
    name="profile",
    help="run a model on sample data and record every value's range and histogram (for quantization)",
    description="Import, optimize and lower MODEL for a backend, run it on every sample of DATA with every float "
                "value exposed, and write each value's min, max, count and histogram to a JSON profile "
                "(docs/quantization.md). Compile with --quantize PROFILE.json (glow run, compile, bench, bundle, "
                "compare) to convert the model to int8 with it, for any backend.",
    epilog="examples:\n  glow profile zoo:squeezenet --data calib/ -o squeezenet.profile.json\n"
           "  glow profile model.onnx --data samples.npz -b cpu -o profile.json\n"
           "  glow profile net.onnx --data images/ --image-size 224 --mean 0.485,0.456,0.406 "
           "--std 0.229,0.224,0.225 -o p.json",
    add_arguments=add_arguments,
    run=run,
)
