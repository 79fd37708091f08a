"""The engines the benchmarks compare, each as a runner: ``runner(model, threads) -> run(feeds) -> outputs``.

A runner loads and compiles the model once (in the worker process of ``bench_trained_models.py``, one fresh
process per engine and round) and returns a function that runs it once per call. Every engine is at its
shipped defaults; the options set, and why:

- ``glow``: the cpu backend, the thread count.
- ``onnxruntime``: ``intra_op_num_threads`` only (its thread spinning left on, as shipped).
- ``openvino``: ``INFERENCE_NUM_THREADS``, and the latency hint its CPU plugin takes by default. On a CPU
  with bfloat16 units (AMX-BF16, AVX512-BF16) OpenVINO's default inference precision is bfloat16;
  ``openvino-f32`` (not a default engine) sets ``INFERENCE_PRECISION_HINT`` f32 to compare float32 with float32.
- ``iree``: ``iree-import-onnx`` (with ``--opset-version 17`` for an older model, as its documentation
  advises), then ``iree-compile`` for ``llvm-cpu`` with the host CPU
  (``--iree-llvmcpu-target-cpu=host``), run on the ``local-task`` driver with at most ``threads`` worker
  groups (``--task_topology_max_group_count``); no other flag.
- ``tvm``: the Relax ONNX frontend, ``tvm.compile`` for ``llvm`` with the host CPU (its LLVM name) and
  ``num-cores`` threads, ``TVM_NUM_THREADS`` set; the default (untuned) schedules unless
  ``GLOW_BENCH_TVM_TRIALS`` asks for MetaSchedule tuning (the ``static_shape_tuning`` pipeline its
  documentation gives for CPUs), whose time is part of the compile time the worker reports.

IREE (``iree-base-compiler``, ``iree-base-runtime``) and TVM (``apache-tvm``) are optional: an engine
that is not installed, or cannot import a model, is listed in the table under "not run" with its error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

Run = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
Runner = Callable[[Path, int], Run]


def _input_names(model: Path) -> list[str]:
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def glow_runner(model: Path, threads: int) -> Run:
    import glow_core

    feeds = model.parent / f"{model.stem}.inputs.npz"  # written by prepare(): the shapes symbolic inputs get
    shapes = {n: a.shape for n, a in np.load(feeds).items()} if feeds.is_file() else None
    net = glow_core.compile(str(model), "cpu", shapes, threads=threads)
    names = list(net.output_names)

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        outs = net.run(feeds)  # one run per call, whatever the number of outputs (as the other engines)
        return [outs[n] for n in names]
    return run


def ort_runner(model: Path, threads: int) -> Run:
    import onnxruntime as ort

    so = ort.SessionOptions()  # onnxruntime's defaults (its thread spinning included): only the thread count set
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return lambda feeds: list(sess.run(None, feeds))


def openvino_runner(model: Path, threads: int, precision: str | None = None) -> Run:
    import openvino as ov

    core = ov.Core()
    # the thread count, and the latency hint OpenVINO's CPU plugin takes by default (one stream)
    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = core.compile_model(str(model), "CPU", config)
    req = compiled.create_infer_request()

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        res = req.infer(feeds)
        return [np.asarray(res[o]) for o in compiled.outputs]
    return run


#: the opset IREE's importer upgrades older models to
IREE_MIN_OPSET = 17


def _opset(model: Path) -> int:
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    return max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _tool(name: str) -> str:
    """A console script installed beside this Python (the venv's bin folder), else by PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.is_file() else name


def iree_runner(model: Path, threads: int) -> Run:
    import iree.compiler as ireec
    import iree.runtime as ireert

    with tempfile.TemporaryDirectory() as d:
        mlir = Path(d) / "model.mlir"
        # IREE's importer documents upgrading older models (--opset-version): its ONNX dialect covers opset 17 on
        cmd = [_tool("iree-import-onnx"), str(model), "-o", str(mlir)]
        if _opset(model) < IREE_MIN_OPSET:
            cmd += ["--opset-version", str(IREE_MIN_OPSET)]
        imp = subprocess.run(cmd, capture_output=True, text=True)
        if imp.returncode != 0:
            raise RuntimeError("iree-import-onnx failed: " + " ".join(imp.stderr.split())[-300:])
        vmfb = ireec.compile_file(str(mlir), target_backends=["llvm-cpu"],
                                  extra_args=["--iree-llvmcpu-target-cpu=host"])
    ireert.flags.parse_flags(f"--task_topology_max_group_count={threads}")
    ctx = ireert.SystemContext(config=ireert.Config("local-task"))
    module = ireert.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(module)
    entry = [f for f in module.function_names if not f.startswith("__") and not f.endswith("$async")]
    if len(entry) != 1:
        raise RuntimeError(f"the IREE module has no single entry function: {module.function_names}")
    fn = ctx.modules[module.name][entry[0]]
    names = _input_names(model)

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = fn(*[feeds[n] for n in names])
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]
    return run


def tvm_runner(model: Path, threads: int) -> Run:
    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when TVM's thread pool starts
    import llvmlite.binding as llvm
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    names = _input_names(model)
    feeds = dict(np.load(model.parent / f"{model.stem}.inputs.npz"))
    mod = from_onnx(onnx.load(str(model)), shape_dict={n: feeds[n].shape for n in names},
                    keep_params_in_input=False)
    target = tvm.target.Target({"kind": "llvm", "mcpu": llvm.get_host_cpu_name(), "num-cores": threads})
    trials = int(os.environ.get("GLOW_BENCH_TVM_TRIALS", "0"))
    if trials > 0:
        with tempfile.TemporaryDirectory() as d, target:
            mod = relax.get_pipeline("static_shape_tuning", target=target, work_dir=d, total_trials=trials)(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
    tensor = tvm.runtime.tensor if hasattr(tvm.runtime, "tensor") else tvm.nd.array

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = vm["main"](*[tensor(feeds[n], tvm.cpu()) for n in names])
        outs = out if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else [out]
        return [o.numpy() for o in outs]
    return run


RUNNERS: Mapping[str, Runner] = {
    "glow": glow_runner, "onnxruntime": ort_runner, "openvino": openvino_runner, "iree": iree_runner,
    "tvm": tvm_runner,
    # OpenVINO in float32: on a CPU with AMX-BF16 or AVX512-BF16 its default inference precision is bfloat16
    "openvino-f32": lambda model, threads: openvino_runner(model, threads, "f32"),
}
