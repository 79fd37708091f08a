"""No kernel reads or writes past a caller's array: large inputs and outputs end at an inaccessible page.

The cpu backend reads a large feed in place and writes a large output into a buffer the caller receives
(``runtime.py``, ``symio.py``). A vector load or store that runs past the last element is harmless inside a
heap block but faults when the array ends at the end of its mapping (an ``np.load(mmap_mode=...)`` file, a
handed output buffer): each case here puts every large input and output right before a ``PROT_NONE`` page, so
an over-read or over-write is a segfault (the run is in a child process, so the suite reports it as a failure).
A matrix product with a run-time right operand of 1,000 columns read its last row's tail vector whole: 8 floats
past the end of the array (a segfault in the partitioned ResNet-50, whose classifier weight is transposed by
the partition before)."""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

PAGE = mmap.PAGESIZE
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded(nbytes: int) -> np.ndarray:
    """``nbytes`` bytes 64-byte aligned, ending right before a page no one may touch (exactly at it when
    ``nbytes`` is a multiple of 64)."""
    pages = -(-max(nbytes, 1) // PAGE) + 1
    raw = np.frombuffer(mmap.mmap(-1, pages * PAGE), dtype=np.uint8)
    guard = raw.ctypes.data + (pages - 1) * PAGE
    if _LIBC.mprotect(guard, PAGE, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    start = ((pages - 1) * PAGE - nbytes) // 64 * 64
    return raw[start:start + nbytes]


def guarded_copy(a: np.ndarray) -> np.ndarray:
    out = guarded(a.nbytes).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, ...]], out_shape: tuple[int, ...],
           consts: list[onnx.TensorProto]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _node(kind: str, ins: list[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node(kind, ins, ["y"], **attrs)


#: name -> (nodes, input shapes); every large array's size is a multiple of 16 floats (it ends at the guard
#: page) while its rows are not (each row ends inside a vector)
CASES: dict[str, tuple[list[onnx.NodeProto], dict[str, tuple[int, ...]]]] = {
    "matmul-runtime-b": ([_node("MatMul", ["a", "b"])], {"a": (1, 2048), "b": (2048, 1000)}),
    "matmul-runtime-b-rows": ([_node("MatMul", ["a", "b"])], {"a": (20, 160), "b": (160, 1000)}),
    "matmul-batched": ([_node("MatMul", ["a", "b"])], {"a": (4, 7, 48), "b": (4, 48, 1000)}),
    "gemm-transposed-b": ([_node("Gemm", ["a", "b"], transB=1)], {"a": (3, 400), "b": (1000, 400)}),
    "conv-odd-channels": ([_node("Conv", ["x", "w"], pads=[1, 1, 1, 1])], {"x": (1, 5, 64, 80), "w": (7, 5, 3, 3)}),
    "add-broadcast-rows": ([_node("Add", ["a", "b"])], {"a": (1000, 48), "b": (1, 48)}),
    "relu": ([_node("Relu", ["a"])], {"a": (3, 1000, 16)}),
    "transpose": ([_node("Transpose", ["a"], perm=[1, 0])], {"a": (1000, 48)}),
    "softmax-rows": ([_node("Softmax", ["a"], axis=-1)], {"a": (48, 1000)}),
    "reduce-sum-rows": ([_node("ReduceSum", ["a", "axes"], keepdims=0)], {"a": (48, 1000)}),
    "maxpool": ([_node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2])], {"x": (1, 5, 64, 80)}),
    "avgpool-global": ([_node("GlobalAveragePool", ["x"])], {"x": (1, 1000, 7, 16)}),
    "layernorm-rows": ([_node("LayerNormalization", ["a", "g", "b2"], axis=-1)], {"a": (48, 1000)}),
    "concat-axis1": ([_node("Concat", ["a", "b"], axis=1)], {"a": (1000, 16), "b": (1000, 32)}),
    "slice-tail": ([_node("Slice", ["a", "st", "en"])], {"a": (1000, 48)}),
    "gather-rows": ([_node("Gather", ["a", "idx"], axis=0)], {"a": (1000, 48)}),
    "conv-depthwise": ([_node("Conv", ["x", "wd"], group=48, pads=[1, 1, 1, 1])], {"x": (1, 48, 30, 20)}),
    "conv-transpose": ([_node("ConvTranspose", ["x", "wt"], strides=[2, 2])], {"x": (1, 5, 64, 80)}),
    "pad-edges": ([_node("Pad", ["a", "pads"], mode="edge")], {"a": (1000, 48)}),
    "resize-nearest": ([_node("Resize", ["x", "", "scales"], mode="nearest")], {"x": (1, 5, 64, 80)}),
    "lstm": ([helper.make_node("LSTM", ["s", "lw", "lr"], ["", "y"], hidden_size=20)], {"s": (50, 4, 80)}),
}
EXTRA = {"axes": np.array([1], np.int64), "g": np.full(1000, 1.5, np.float32), "b2": np.full(1000, 0.25, np.float32),
         "st": np.array([3], np.int64), "en": np.array([997], np.int64),
         "idx": np.array([999, 0, 500, 3, 998], np.int64), "wd": np.ones((48, 1, 3, 3), np.float32),
         "wt": np.full((5, 3, 3, 3), 0.5, np.float32), "pads": np.array([2, 3, 1, 5], np.int64),
         "scales": np.array([1, 1, 2, 1.5], np.float32), "lw": np.full((1, 80, 80), 0.01, np.float32),
         "lr": np.full((1, 80, 20), 0.02, np.float32)}


def _case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    """The case's model, feeds and onnx.reference's answer."""
    nodes, shapes = CASES[name]
    used = {i for n in nodes for i in n.input if i} - set(shapes)
    consts = [onnx.numpy_helper.from_array(EXTRA[k], k) for k in sorted(used)]
    rng = np.random.default_rng(7)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    want = ReferenceEvaluator(_model(nodes, shapes, (), consts)).run(None, feeds)[0]
    return _model(nodes, shapes, want.shape, consts), feeds, want


def _run_guarded(names: list[str], conn: Connection) -> None:
    """Each case compiled and run (1 and 2 threads) with every input and output at a guard page; sends
    ("start", case) before each and ("done", what differed) at the end. (In a child process: a fault kills
    only the child, and the last "start" names the case.)"""
    import glow_core
    from glow_backend_cpu import symio

    symio._mapped = guarded  # every handed output buffer, and a symbolic function's io area, ends at a guard page
    wrong = []
    for name in names:
        model, feeds, want = _case(name)
        for threads in (1, 2):
            conn.send(("start", f"{name} on {threads} thread(s)"))
            try:
                net = glow_core.compile(model, "cpu", threads=threads, options={"cache": False})
                got = net.run({k: guarded_copy(v) for k, v in feeds.items()})["y"]
            except Exception as e:  # noqa: BLE001  (reported with the case)
                wrong.append(f"{name} on {threads} thread(s): {type(e).__name__}: {e}")
                continue
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                wrong.append(f"{name} on {threads} thread(s)")
    conn.send(("done", wrong))


def _in_child(target: Callable[[list[str], Connection], None], names: list[str]) -> tuple[list[str], str]:
    """(cases with a wrong result, the case the child faulted in or '')."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=target, args=(names, there))
    child.start()
    there.close()
    last, wrong = "", None
    while wrong is None:
        if not here.poll(600):
            child.kill()
            return [], f"no answer after {last or 'the start'} (hung)"
        try:
            what, value = here.recv()
        except EOFError:
            break
        if what == "start":
            last = value
        else:
            wrong = value
    child.join(60)
    if wrong is None:
        return [], f"{last or 'the start'} (exit code {child.exitcode})"
    return wrong, ""


def _read_past_the_end(names: list[str], conn: Connection) -> None:
    a = guarded(64 * 16)
    conn.send(("start", "the over-read"))
    ctypes.c_float.from_address(a.ctypes.data + a.nbytes).value  # noqa: B018  (the over-read itself)
    conn.send(("done", []))


def test_a_guard_page_catches_an_over_read() -> None:
    """The harness can fail: a read one float past a guarded array kills the child, and the case is named."""
    wrong, fault = _in_child(_read_past_the_end, [])
    assert fault.startswith("the over-read (exit code -11)") and not wrong


def test_no_kernel_touches_memory_past_its_arrays() -> None:
    wrong, fault = _in_child(_run_guarded, sorted(CASES))
    assert not fault, f"a fault in {fault}"
    assert not wrong, f"wrong results: {wrong}"
