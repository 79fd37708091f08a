"""Helpers of the CLI, API and plugin tests: small ONNX models and a ``glow`` subprocess runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

#: seconds one ``glow`` subprocess may take before it counts as hung (a watchdog: >= 5x what the slowest
#: command here takes on a loaded 2-core machine; the zoo model test passes its own)
DEFAULT_TIMEOUT = 600.0


def add_relu_model(batch: int | str = 1, width: int = 10, opset: int = 17) -> onnx.ModelProto:
    """``out = Relu(x + y)``; x is float32[1, width], y is float32[batch, width] (batch may be symbolic)."""
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"], name="add0"),
        helper.make_node("Relu", ["s"], ["out"], name="relu0"),
    ]
    graph = helper.make_graph(
        nodes,
        "add_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, width])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def int_add_model() -> onnx.ModelProto:
    """``out = a + b`` on int64[3] (integer inputs: random feeds are small ints)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["out"], name="iadd")],
        "int_add",
        [helper.make_tensor_value_info("a", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("b", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("out", TensorProto.INT64, [3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def unsupported_op_model() -> onnx.ModelProto:
    """A model using an operator no glow version will import (custom domain), twice, plus a Relu."""
    nodes = [
        helper.make_node("Frobnicate", ["x"], ["f1"], name="frob1", domain="com.example"),
        helper.make_node("Frobnicate", ["f1"], ["f2"], name="frob2", domain="com.example"),
        helper.make_node("Relu", ["f2"], ["out"], name="relu0"),
    ]
    graph = helper.make_graph(
        nodes, "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)], ir_version=8
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]

    def error_line(self) -> str:
        """The single ``glow: error:`` line (ignoring ``glow: warning:`` lines of skipped plugins)."""
        lines = [ln for ln in self.stderr_lines if not ln.startswith("glow: warning:")]
        assert len(lines) == 1, f"expected one line on stderr, got:\n{self.stderr}"
        return lines[0]


def glow(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    pythonpath: Sequence[Path] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> Result:
    """Run ``glow ARGS`` (as ``python -m glow_cli``) in a subprocess."""
    full_env = dict(os.environ)
    for key in ("GLOW_TRACEBACK", "GLOW_BLOCK_PLUGINS", "GLOW_DISABLE_PLUGIN_AUTOLOAD"):
        full_env.pop(key, None)
    full_env.update(env or {})
    if pythonpath:
        old = full_env.get("PYTHONPATH", "")
        full_env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *([old] if old else [])])
    full_env.setdefault("PYTHONFAULTHANDLER", "1")  # a hung run's thread stacks, when it is aborted below
    with subprocess.Popen([sys.executable, "-m", "glow_cli", *args], cwd=str(cwd) if cwd is not None else None,
                          env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(_hung(proc, args, timeout)) from None
    return Result(proc.returncode, stdout, stderr)


def _hung(proc: subprocess.Popen[str], args: Sequence[str], timeout: float) -> str:
    """Abort a ``glow`` that did not finish in time; the message holds what it printed and, from
    faulthandler, where every one of its Python threads was."""
    proc.send_signal(signal.SIGABRT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return (f"glow {' '.join(args)} did not finish within {timeout:.0f} s\n--- stdout:\n{stdout}\n"
            f"--- stderr (with the thread stacks at the abort):\n{stderr}")
