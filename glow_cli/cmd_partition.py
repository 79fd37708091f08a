"""``glow partition MODEL --devices LIST``: how the runtime would split a model over devices."""

from __future__ import annotations

import argparse
from pathlib import Path

from glow_core import zoo
from glow_cli.common import (Command, add_model_argument, add_shape_argument, load_model_ref, require_sizes,
                             shapes_from_args)
from glow_core.errors import GlowError


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_argument(p)
    p.add_argument("-d", "--devices", required=True, metavar="LIST",
                   help="devices in priority order: [ray:]BACKEND[:COUNT][@SIZE][/CPUS],... e.g. xyz:1,cpu:2@512MiB "
                        "or ray:cpu:4 (docs/runtime.md)")
    add_shape_argument(p)
    p.add_argument("--dot", metavar="FILE.dot", type=Path, default=None,
                   help="also write the partition DAG as Graphviz DOT")
    p.add_argument("--strict", action="store_true",
                   help="fail, listing every node, when any node falls back from the first backend of the list")
    p.add_argument("--compile-all", action="store_true",
                   help="also compile the partitions of the last backend of the list (by default every other "
                        "backend's partitions are compiled, so that partitions a backend refuses show)")
    p.add_argument("--random-weights", action="store_true",
                   help="zoo models only: seeded random weights (the memory figures are the same)")
    p.add_argument("--measure", metavar="N", type=int, default=None,
                   help="also run N requests one at a time on the devices and print their median latency beside "
                        "the plan's estimate (backends without a cost hook calibrated on this machine first)")
    p.add_argument("--export", metavar="DIR", type=Path, default=None,
                   help="also write each partition as an ONNX model (DIR/pN.onnx) and DIR/manifest.json naming "
                        "its backend, device, inputs and outputs (docs/partial-accelerators.md)")


def run(args: argparse.Namespace) -> int:
    from glow_core.runtime import parse_devices
    from glow_core.runtime.host_manager import check_plan
    from glow_core.runtime.errors import PartitionError
    from glow_core.runtime.report import fallback_nodes, format_plan, plan_dot

    devices = parse_devices(args.devices)  # fail fast on a bad list, before reading the model
    proto, label = load_model_ref(args.model)
    if args.random_weights:
        if not zoo.is_zoo_ref(args.model):
            raise GlowError("--random-weights applies to zoo:NAME models only")
        proto = zoo.load_with_random_weights(args.model)
    shapes = shapes_from_args(args.input_shape)
    require_sizes(proto, shapes, "glow partition prints the plan of one shape; give it")
    plan = check_plan(proto, devices, shapes or None, compile_last=args.compile_all)
    if args.strict and plan.fallback:
        lines = fallback_nodes(plan)
        raise PartitionError(f"--strict: {len(lines)} node(s) of {label} fall back from {devices[0].backend}: "
                             + "; ".join(lines), hint="drop --strict to let them run on the next device of the list")
    print(f"model    {label}")
    print(format_plan(plan))
    if args.measure is not None:
        from glow_core.runtime.measure import format_measurement, measure_plan

        print(format_measurement(measure_plan(proto, devices, args.measure, shapes or None)))
    if args.dot is not None:
        try:
            args.dot.write_text(plan_dot(plan), encoding="utf-8")
        except OSError as e:
            raise GlowError(f"cannot write '{args.dot}': {e.strerror or e}") from None
        print(f"partition DAG written to {args.dot}")
    if args.export is not None:
        from glow_cli.partition_export import export_partitions

        files = export_partitions(plan, args.export, label)
        print(f"{len(files) - 1} partition(s) exported as ONNX to {args.export} (manifest: {files[-1].name})")
    return 0


COMMAND = Command(
    name="partition",
    help="show how the runtime splits a model over a list of devices",
    description="Partition MODEL over the devices of --devices (in priority order: each node goes to the first "
                "backend that claims it; partitions that do not fit one device are split by memory; partitions a "
                "backend refuses to compile, or smaller than its minimum, go to the next device) and print each "
                "partition with its backend, device, node count, memory, the tensors cut between partitions, the "
                "bytes moved per request and every refusal with its reason.",
    epilog="examples:\n  glow partition zoo:resnet50 --devices cpu:4@40MiB --dot dag.dot\n"
           "  glow partition zoo:squeezenet --devices xyz:1,cpu:1 --strict",
    add_arguments=add_arguments,
    run=run,
)
