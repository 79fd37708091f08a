"""Helpers of the bundle tests: a model with several inputs and outputs, building and running the example."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bundle"
#: the C library, libm and pthreads functions a bundle may leave undefined (nothing of Python or LLVM)
ALLOWED_UNDEFINED = {
    "memcpy", "memmove", "memset", "sched_yield", "syscall", "pthread_create", "pthread_join",
    *(f + s for f in ("exp", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                      "acosh", "atanh", "erf", "pow", "fmod", "log1p", "expm1") for s in ("", "f")),
}


def multi_io_model() -> onnx.ModelProto:
    """Three inputs (float images, int64 indices, a float vector), three outputs whose names collide as C
    identifiers (``out.0`` / ``out-0``) or are not identifiers at all (``0 probs */``, which would also end a C comment)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["img", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["out.0"]),
        helper.make_node("Gather", ["table", "idx"], ["out-0"], axis=0),
        helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0, axes=[2, 3]),
        helper.make_node("Softmax", ["s"], ["0 probs */"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "multi_io",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [2, 3, 16, 16]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [5]),
         helper.make_tensor_value_info("table", TensorProto.FLOAT, [7, 33])],
        [helper.make_tensor_value_info("out.0", TensorProto.FLOAT, [2, 4, 16, 16]),
         helper.make_tensor_value_info("out-0", TensorProto.FLOAT, [5, 33]),
         helper.make_tensor_value_info("0 probs */", TensorProto.FLOAT, [2, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=7)


def multi_io_feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {"img": rng.standard_normal((2, 3, 16, 16)).astype(np.float32),
            "idx": np.array([0, 6, 3, 3, 1], np.int64),
            "table": rng.standard_normal((7, 33)).astype(np.float32)}


def build_example(bundle_dir: Path, name: str) -> Path:
    """``make`` the example program against the bundle; returns the executable."""
    subprocess.run(["make", "-s", "-f", str(EXAMPLE / "Makefile"), f"BUNDLE={name}", f"BUNDLE_DIR={bundle_dir}"],
                   check=True, capture_output=True, text=True, timeout=300)
    exe = bundle_dir / f"{name}_run"
    assert exe.is_file()
    return exe


def run_example(exe: Path, manifest: dict, feeds: dict[str, np.ndarray], work: Path,
                runs: int = 0) -> tuple[dict[str, np.ndarray], str]:
    """Write the inputs as raw files, run the example, read its outputs back (and its printed text)."""
    ins, outs = work / "in", work / "out"
    ins.mkdir(parents=True, exist_ok=True)
    outs.mkdir(parents=True, exist_ok=True)
    name = manifest["name"]
    for io in manifest["io"]:
        if io["role"] == "input":
            np.ascontiguousarray(feeds[io["name"]]).tofile(ins / f"{io['c_name']}.bin")
    cmd = [str(exe), "-w", str(exe.parent / f"{name}.weights.bin"), "-i", str(ins), "-o", str(outs), "-n", str(runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = {}
    for io in manifest["io"]:
        if io["role"] != "input":
            result[io["name"]] = np.fromfile(outs / f"{io['c_name']}.bin", dtype=io["dtype"]).reshape(io["shape"])
    return result, proc.stdout


def nm_undefined(path: Path) -> set[str] | None:
    """``nm -u`` of an object when binutils is installed (a second opinion on the ELF reader)."""
    if shutil.which("nm") is None:
        return None
    out = subprocess.run(["nm", "-u", str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}
