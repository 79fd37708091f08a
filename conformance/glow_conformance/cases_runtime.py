"""Runtime behaviour: repeated runs, concurrent runs, bad feeds rejected cleanly, buffers, the device.

These run a small model (MatMul + Add + Relu + ReduceSum, a Softmax, an
integer Gather) through ``glow_core.compile`` like a user does, and compare
with the reference on the same inputs. All are mandatory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from glow_conformance.model import Case, Context, Level, Outcome, Result
from glow_core.errors import GlowError, InputError
from glow_sdk.backend import DeviceInfo
from glow_sdk.testing import compare_arrays, tolerance_for

THREADS = 4
RUNS_PER_THREAD = 5


def small_model() -> onnx.ModelProto:
    """x: float32[4, 8], idx: int64[3] -> y = ReduceSum(Relu(x @ W + b)), p = Softmax(x @ W), g = Gather(x, idx)."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((6,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("ReduceSum", ["r"], ["y"], name="sum", axes=[1], keepdims=0),
        helper.make_node("Softmax", ["xw"], ["p"], name="softmax", axis=1),
        helper.make_node("Gather", ["x", "idx"], ["g"], name="gather", axis=0),
    ]
    graph = helper.make_graph(
        nodes, "runtime",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("p", TensorProto.FLOAT, [4, 6]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [3, 8])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((4, 8)).astype(np.float32), "idx": rng.integers(-4, 4, (3,)).astype(np.int64)}


def _net(ctx: Context, which: str):  # type: ignore[no-untyped-def]
    import glow_core

    name = ctx.backend_name if which == "backend" else ctx.reference_name
    key = ("runtime-net", which)
    if key not in ctx.cache:
        ctx.cache[key] = glow_core.compile(small_model(), name)
    return ctx.cache[key]


def _check(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> str:
    for name, w in want.items():
        if name not in got:
            return f"{what}: output {name} is missing"
        c = compare_arrays(got[name], w, tolerance_for("", _elem(w), "composite-accumulate"))
        if not c.ok:
            return f"{what}: output {name}: {c.message}"
    return ""


def _elem(a: np.ndarray):  # type: ignore[no-untyped-def]
    from glow_core.ir.types import ElemKind

    return ElemKind.from_dtype(a.dtype)


def _repeated(ctx: Context) -> Outcome:
    net, ref = _net(ctx, "backend"), _net(ctx, "reference")
    for i, seed in enumerate([1, 2, 1, 3, 1]):
        f = feeds(seed)
        bad = _check(net.run(f), ref.run(f), f"run {i + 1} (inputs of seed {seed})")
        if bad:
            return Outcome(Result.FAIL, bad + " (a result depends on earlier runs: stale state?)")
    first = net.run(feeds(1))
    again = net.run(feeds(1))
    for name in first:
        if not np.array_equal(first[name], again[name], equal_nan=True):
            return Outcome(Result.FAIL, f"two runs on the same inputs gave different {name} (not deterministic)")
    return Outcome(Result.PASS, "5 runs with interleaved inputs agree with the reference; same inputs, same bits")


def _concurrent(ctx: Context) -> Outcome:
    net, ref = _net(ctx, "backend"), _net(ctx, "reference")
    seeds = [100 + i for i in range(THREADS * RUNS_PER_THREAD)]
    want = {s: ref.run(feeds(s)) for s in seeds}
    errors: list[str] = []
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            barrier.wait(timeout=30)
            for s in seeds[t::THREADS]:
                bad = _check(net.run(feeds(s)), want[s], f"thread {t}, inputs of seed {s}")
                if bad:
                    errors.append(bad)
                    return
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {t} raised {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    if any(th.is_alive() for th in threads):
        return Outcome(Result.FAIL, f"{THREADS} concurrent runs did not finish within 120 s (a deadlock?)")
    if errors:
        return Outcome(Result.FAIL, f"concurrent runs from {THREADS} threads: " + "; ".join(errors[:3]))
    return Outcome(Result.PASS, f"{THREADS} threads x {RUNS_PER_THREAD} runs of one compiled network agree")


def _rejects(bad_feeds: Callable[[], dict[str, object]], what: str) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        net, ref = _net(ctx, "backend"), _net(ctx, "reference")
        try:
            net.run(bad_feeds())
        except InputError as e:
            msg = e.one_line()
        except GlowError as e:
            return Outcome(Result.FAIL, f"{what}: raised {type(e).__name__} instead of InputError: {e.one_line()}")
        except Exception as e:  # noqa: BLE001
            return Outcome(Result.FAIL, f"{what}: crashed with {type(e).__name__}: {e} (expected a clean InputError)")
        else:
            return Outcome(Result.FAIL, f"{what}: was accepted (expected an InputError)")
        f = feeds(5)
        bad = _check(net.run(f), ref.run(f), "the next good run")
        if bad:
            return Outcome(Result.FAIL, f"{what} was rejected, but then {bad}")
        return Outcome(Result.PASS, f"rejected: {msg}")

    return run


def _wrong_shape() -> dict[str, object]:
    f: dict[str, object] = dict(feeds(1))
    f["x"] = np.zeros((4, 9), np.float32)
    return f


def _wrong_dtype() -> dict[str, object]:
    f: dict[str, object] = dict(feeds(1))
    f["x"] = np.zeros((4, 8), np.float64)
    return f


def _missing_input() -> dict[str, object]:
    return {"x": feeds(1)["x"]}


def _inputs_untouched(ctx: Context) -> Outcome:
    net = _net(ctx, "backend")
    f = feeds(9)
    copies = {k: v.copy() for k, v in f.items()}
    net.run(f)
    changed = [k for k in f if not np.array_equal(f[k], copies[k])]
    if changed:
        return Outcome(Result.FAIL, f"running wrote into the caller's input array(s): {', '.join(changed)}")
    return Outcome(Result.PASS)


def _outputs_owned(ctx: Context) -> Outcome:
    net = _net(ctx, "backend")
    f = feeds(11)
    first = net.run(f)
    keep = {k: v.copy() for k, v in first.items()}
    for v in first.values():
        if v.flags.writeable:
            v[...] = 0
    second = net.run(f)
    for k, v in second.items():
        if not np.array_equal(v, keep[k], equal_nan=True):
            return Outcome(Result.FAIL, f"output {k} changed after the caller modified an earlier result "
                                        "(outputs must not alias the backend's buffers)")
        if np.shares_memory(v, first[k]):
            return Outcome(Result.FAIL, f"two runs returned the same buffer for output {k}")
    return Outcome(Result.PASS)


def _device(ctx: Context) -> Outcome:
    try:
        dev = ctx.backend.create_device()
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"create_device raised {type(e).__name__}: {e}")
    if not isinstance(dev, DeviceInfo):
        return Outcome(Result.FAIL, f"create_device returned a {type(dev).__name__}, not a glow_sdk.DeviceInfo")
    return Outcome(Result.PASS, f"{dev.name}: {dev.memory_bytes} bytes x {dev.count}")


def _capabilities(ctx: Context) -> Outcome:
    from glow_core.ir.kinds import all_kinds
    from glow_core.ir.types import ElemKind

    try:
        declared = ctx.backend.supported_kinds()
        caps = list(ctx.backend.capabilities())
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"declaring capabilities raised {type(e).__name__}: {e}")
    table = all_kinds()
    unknown = sorted(k for k in declared if k not in table)
    bad_elems = sorted(k for k, es in declared.items() if not all(isinstance(e, ElemKind) for e in es))
    if unknown or bad_elems:
        return Outcome(Result.FAIL, "capabilities name " + "; ".join(
            ([f"kinds unknown to this glow: {', '.join(unknown)}"] if unknown else [])
            + ([f"element kinds that are not ElemKind values for: {', '.join(bad_elems)}"] if bad_elems else [])))
    return Outcome(Result.PASS, f"{len(declared)} kinds in {len(caps)} capability records")


RUNTIME: dict[str, tuple[Callable[[Context], Outcome], str]] = {
    "repeated-runs": (_repeated, "repeated runs with interleaved inputs agree with the reference, deterministically"),
    "concurrent-runs": (_concurrent, f"{THREADS} threads run one compiled network at once"),
    "wrong-shape-rejected": (_rejects(_wrong_shape, "an input of the wrong shape"), "InputError, then runs fine"),
    "wrong-dtype-rejected": (_rejects(_wrong_dtype, "an input of the wrong dtype"), "InputError, then runs fine"),
    "missing-input-rejected": (_rejects(_missing_input, "a missing input"), "InputError, then runs fine"),
    "inputs-untouched": (_inputs_untouched, "running leaves the caller's inputs unchanged"),
    "outputs-owned": (_outputs_owned, "results are fresh arrays owned by the caller"),
    "device": (_device, "create_device() describes the device"),
    "capabilities": (_capabilities, "the declared capabilities name known kinds and element kinds"),
}


def runtime_cases() -> list[Case]:
    return [Case(f"runtime/{name}", "runtime", Level.CORE, True, fn, description=desc)
            for name, (fn, desc) in RUNTIME.items()]


__all__ = ["RUNTIME", "runtime_cases", "small_model"]
