"""``glow run MODEL --backend NAME``: compile a model, run it once, summarize the outputs."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from glow_core import zoo
from glow_cli.common import (
    Command,
    add_model_argument,
    add_precision_argument,
    add_shape_argument,
    check_array,
    check_declared,
    fmt_ms,
    fmt_num,
    fmt_shape,
    has_static_shape,
    input_spec,
    load_array,
    load_model_ref,
    model_inputs,
    note,
    positive_int,
    range_spec,
    require_sizes,
    shapes_from_args,
)
from glow_cli.quantize_args import add_quantize_arguments, quantize_from_args
from glow_core.errors import GlowError, InputError

TOP_K = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument("-b", "--backend", metavar="NAME",
                       help="the backend to compile for ('glow backends' lists them; default: the fastest "
                            "installed, cpu when present, else interpreter)")
    where.add_argument("-d", "--devices", metavar="LIST",
                       help="run through the runtime on these devices, e.g. cpu:2, xyz:1,cpu:1, or ray:cpu:4 "
                            "for devices on a Ray cluster (docs/runtime.md)")
    p.add_argument("--input", metavar="NAME=FILE.npy", action="append", type=input_spec, default=[],
                   help="read input NAME from a .npy file (repeatable; give all inputs or none)")
    add_shape_argument(p)
    p.add_argument("--input-range", metavar="NAME=LO:HI", action="append", type=range_spec, default=[],
                   help="random values of input NAME in [LO, HI): integers LO..HI-1, floats uniform (repeatable; "
                        "default: [0, 1) floats, integers 0..9, and an input that indexes a Gather's table "
                        "stays within the table's rows)")
    p.add_argument("-o", "--output", metavar="FILE.npz", type=Path, default=None,
                   help="save every output in an .npz archive, keyed by output name")
    p.add_argument("--threads", metavar="N", type=positive_int, default=None,
                   help="threads the backend may use (default: the backend's choice)")
    add_precision_argument(p)
    p.add_argument("--seed", metavar="S", type=int, default=0,
                   help="seed of the random inputs (default 0)")
    p.add_argument("--random-weights", action="store_true",
                   help="zoo models only: replace their constant placeholder weights with seeded random ones, "
                        "so the outputs are informative")
    add_quantize_arguments(p)


def _given_inputs(specs: list[tuple[str, Path]], proto_inputs: list[str]) -> dict[str, tuple[Path, np.ndarray]]:
    given: dict[str, tuple[Path, np.ndarray]] = {}
    for name, path in specs:
        if name in given:
            raise InputError(f"--input gives '{name}' twice")
        if name not in proto_inputs:
            raise InputError(
                f"--input names '{name}', which is not an input of the model; "
                f"its inputs are: {', '.join(proto_inputs) or '(none)'}"
            )
        given[name] = (path, load_array(name, path))
    return given


def is_score_vector(shape: tuple[int, ...]) -> bool:
    """[K], [1,K] (and [1,K,1,1]): one axis of K >= 2 classes, every other axis 1."""
    big = [d for d in shape if d != 1]
    return len(big) == 1 and big[0] >= 2 and (len(shape) == 1 or shape[0] == 1)


def summarize(name: str, a: np.ndarray) -> list[str]:
    """Lines describing one output: type, statistics and, for class scores, the top 5."""
    head = f"output {name}: {a.dtype}{fmt_shape(a.shape)}"
    if a.size == 0:
        return [head + "  (empty)"]
    if a.dtype == np.bool_:
        return [head + f"  true {int(np.count_nonzero(a))} of {a.size}"]
    if a.dtype.kind not in "biuf":
        return [head]
    x = a.astype(np.float64)
    finite = x[np.isfinite(x)]
    stats = (f"min {fmt_num(finite.min())}  max {fmt_num(finite.max())}  mean {fmt_num(finite.mean())}"
             if finite.size else "no finite values")
    bad = a.size - finite.size
    lines = [f"{head}  {stats}" + (f"  ({bad} NaN/inf)" if bad else "")]
    flat = a.reshape(-1)
    if a.dtype.kind == "f" and is_score_vector(a.shape):
        k = min(TOP_K, flat.size)
        order = np.argsort(-np.nan_to_num(flat.astype(np.float64), nan=-np.inf), kind="stable")[:k]
        lines.append(f"  top-{k}: " + "  ".join(f"{int(i)} ({fmt_num(flat[i])})" for i in order))
    return lines


def _load(args: argparse.Namespace) -> tuple[Any, str]:
    """The model named on the command line (with random weights when asked) and its label."""
    proto, label = load_model_ref(args.model)
    if args.random_weights:
        if not zoo.is_zoo_ref(args.model):
            raise GlowError("--random-weights applies to zoo:NAME models only")
        proto = zoo.load_with_random_weights(args.model, seed=args.seed)
        label += " with random weights"
    elif zoo.has_placeholder_weights(args.model):
        note("the light zoo models carry no trained weights (every weight is 0.02), so all classes score "
             "alike; add --random-weights for informative outputs")
    return proto, label


def _file_inputs(args: argparse.Namespace, proto: Any,
                 shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[Path, np.ndarray]]:
    """The --input arrays, checked against the model's declared inputs; symbolic dimensions they fix go
    into ``shapes``."""
    vis = {vi.name: vi for vi in model_inputs(proto)}
    given = _given_inputs(args.input, list(vis))
    missing = [n for n in vis if n not in given]
    if given and missing:
        raise InputError(
            f"no --input for {', '.join(repr(n) for n in missing)}; the model's inputs are: {', '.join(vis)}",
            hint="give every input with --input NAME=FILE.npy, or none for random inputs",
        )
    for name, (path, arr) in given.items():
        if name in shapes:
            continue  # --input-shape fixed it: check_array compares the file with that shape
        check_declared(name, path, arr, vis[name])
        if not has_static_shape(vis[name]):
            shapes[name] = tuple(arr.shape)  # symbolic dimensions: take them from the file
    return given


def _random_inputs(args: argparse.Namespace, net: Any, proto: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Seeded random feeds (index inputs within their tables, --input-range) and how each was made."""
    ranges: dict[str, Any] = zoo.index_ranges(proto)
    for name, rng in args.input_range:
        if name not in net.input_types:
            raise InputError(f"--input-range names '{name}', which is not an input of the model; its inputs are: "
                             f"{', '.join(net.input_types) or '(none)'}")
        ranges[name] = rng
    feeds = zoo.random_feeds(net.input_types, args.seed, ranges)
    origin = {n: f"random (seed {args.seed})" + (f" in [{fmt_num(ranges[n][0])}, {fmt_num(ranges[n][1])})"
                                                 if n in ranges else "") for n in feeds}
    return feeds, origin


def run(args: argparse.Namespace) -> int:
    from glow_core.api import compile as glow_compile
    from glow_core.plugin_host import default_backend, get_backend

    if args.output is not None and args.output.suffix != ".npz":
        raise GlowError(f"--output '{args.output}' must end in .npz", hint="outputs are saved as a numpy .npz archive")
    if args.devices is not None:
        from glow_core.runtime import parse_devices

        parse_devices(args.devices)  # fail fast on a bad device list, before reading the model
    else:
        args.backend = args.backend or default_backend()
        get_backend(args.backend)  # fail fast on an unknown or broken backend, before reading the model
    if args.input and args.input_range:
        raise InputError("--input-range shapes random inputs; it cannot be combined with --input")

    proto, label = _load(args)
    shapes = shapes_from_args(args.input_shape)
    fixed = set(shapes)
    given = _file_inputs(args, proto, shapes)
    if not given:
        require_sizes(proto, shapes, "random inputs need sizes", "; or give every input with --input NAME=FILE.npy")

    t0 = time.perf_counter()
    net = glow_compile(proto, args.backend or "", shapes or None, threads=args.threads, devices=args.devices,
                       quantize=quantize_from_args(args), precision=args.precision)
    compile_s = time.perf_counter() - t0

    if given:
        feeds = {n: check_array(n, path, arr, net.input_types[n], n in fixed) for n, (path, arr) in given.items()}
        origin = {n: str(path) for n, (path, _) in given.items()}
    else:
        feeds, origin = _random_inputs(args, net, proto)

    t1 = time.perf_counter()
    outputs = net.run(feeds)
    run_s = time.perf_counter() - t1
    _report(args, label, net, origin, outputs, compile_s, run_s)
    return 0


def _report(args: argparse.Namespace, label: str, net: Any, origin: Mapping[str, str],
            outputs: Mapping[str, np.ndarray], compile_s: float, run_s: float) -> None:
    """What ``glow run`` prints after the run (and the held-out metric of a trained zoo model)."""
    from glow_core.plugin_host import registry

    print(f"model    {label}")
    if args.devices is not None:
        plan = net.executable.plan
        print(f"devices  {args.devices}: {len(plan.partitions)} partition(s) on "
              + ", ".join(sorted({p.device for p in plan.partitions})))
    else:
        rec = registry().record(args.backend)
        print(f"backend  {args.backend}" + (f" ({rec.origin})" if rec is not None else ""))
    for n, t in net.input_types.items():
        print(f"input {n}: {t}  {origin[n]}")
    for n in net.output_names:
        for line in summarize(n, outputs[n]):
            print(line)
    st = net.stats
    nodes = sum(st.nodes_by_kind.values())
    print(f"compile  {fmt_ms(compile_s)}  (import {fmt_ms(st.import_s)}, optimize {fmt_ms(st.optimize_s)}, "
          f"backend {fmt_ms(st.backend_compile_s)}; {nodes} nodes)")
    print(f"run      {fmt_ms(run_s)}")
    evaluation = zoo.evaluation(args.model)  # zoo models shipped with a labelled held-out set
    if evaluation is not None:
        print(evaluation.report(net))
    if args.output is not None:
        save_outputs(args.output, outputs)
        print(f"outputs saved to {args.output}")


def save_outputs(path: Path, outputs: Mapping[str, np.ndarray]) -> None:
    try:
        with open(path, "wb") as f:
            save: Any = np.savez  # numpy's stubs do not type arrays passed by keyword
            save(f, **dict(outputs))
    except OSError as e:
        raise GlowError(f"cannot write '{path}': {e.strerror or e}") from None


COMMAND = Command(
    name="run",
    help="compile a model for a backend, run it once and summarize the outputs",
    description="Compile MODEL for the backend named by --backend (default: the fastest installed), run it "
                "once and print, for each output, its type, min/max/mean and (for class scores) the top-5 classes, "
                "then the compile and run times. Without --input, inputs are random: uniform [0, 1) floats, "
                "integers 0..9 (an input that indexes a Gather's table: 0 .. rows-1), fair booleans; "
                "--input-range NAME=LO:HI sets an input's range. "
                "A trained zoo model (zoo:digits) also gets its metric on its held-out set.",
    epilog="examples:\n  glow run zoo:digits\n  glow run zoo:resnet50 --backend interpreter\n"
           "  glow run model.onnx -b interpreter --input x=x.npy --output out.npz\n"
           "  glow run model.onnx -b interpreter --input-shape x=1,3,224,224\n"
           "  glow run bert.onnx --dim batch=1 --dim sequence=128\n"
           "  glow run bert.onnx --input-range attention_mask=0:2",
    add_arguments=add_arguments,
    run=run,
)
