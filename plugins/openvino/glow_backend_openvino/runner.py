"""Running exported parts on OpenVINO: one compiled model per part, a pool of infer requests each.

``execute`` takes an idle infer request, starts it asynchronously (``InferRequest.start_async``), waits
for its completion and hands the request back: several threads (the runtime's pipelined requests) keep
several requests in flight on one compiled model, and OpenVINO runs them concurrently.
``execute_async`` (SDK API 2.2) waits for nothing: each part starts from the completion callback of the
part before it, and the returned future completes from OpenVINO's callback of the last one.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from glow_sdk.backend import CompiledFunction
from glow_sdk.export import HostPart, OnnxPart, UnsupportedError, run_parts, value_names


@functools.lru_cache(maxsize=1)
def ov_core() -> Any:
    """The process's OpenVINO runtime core (imported on first use)."""
    try:
        import openvino as ov
    except ImportError as e:  # pragma: no cover -- a dependency of this distribution
        raise UnsupportedError(f"the openvino backend needs the openvino package: {e}",
                               hint="pip install glow-backend-openvino (it depends on openvino)") from e
    return ov.Core()


#: OpenVINO compile properties: float32 everywhere (no bf16 / f16 inference on CPUs that have them), so
#: that results match glow's within its tolerances
EXACT_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "EXECUTION_MODE_HINT": "ACCURACY"}


class OvPart:
    """One exported part compiled by OpenVINO, with ``requests`` infer requests to run it."""

    def __init__(self, compiled: Any, input_names: Sequence[str], output_names: Sequence[str], requests: int,
                 nodes: int) -> None:
        self.compiled = compiled
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.nodes = nodes
        self.ports = {name: compiled.output(name) for name in self.output_names}
        self.idle: queue.Queue[Any] = queue.Queue()
        for _ in range(max(1, requests)):
            self.idle.put(compiled.create_infer_request())
        #: runs started whose completion callback has not returned yet (``release`` waits for none)
        self._inflight = 0
        self._settled = threading.Condition()

    def _started(self) -> None:
        with self._settled:
            self._inflight += 1

    def _finished(self) -> None:
        with self._settled:
            self._inflight -= 1
            self._settled.notify_all()

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait, without the GIL, until no run is in progress and no completion callback is running; False
        when that did not happen within ``timeout``."""
        with self._settled:
            if not self._settled.wait_for(lambda: self._inflight == 0, timeout=timeout):
                return False
        time.sleep(0.001)  # the last callback's few remaining bytecodes run while this thread waits
        for request in list(self.idle.queue):
            request.wait()
        return True

    def release(self, timeout: float = 60.0) -> None:
        """Drop the infer requests and the compiled model once no completion callback is running.

        A callback runs Python on one of OpenVINO's threads and so needs the GIL; destroying the compiled
        model joins those threads while this thread holds it, so this first waits for every callback to
        return (``settle``). Parts still busy after ``timeout`` are kept alive rather than destroyed (a
        leak, not a hang)."""
        if not self.settle(timeout):
            _KEPT.append(self)
            return
        while True:
            try:
                self.idle.get_nowait()
            except queue.Empty:
                break
        self.compiled = None
        self.ports = {}

    def _inputs(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {n: np.asarray(feeds[n], order="C") for n in self.input_names}

    def _outputs(self, request: Any) -> dict[str, np.ndarray]:
        return {n: np.array(request.get_tensor(port).data, copy=True) for n, port in self.ports.items()}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run: an idle infer request started asynchronously, then waited for."""
        request = self.idle.get()
        self._started()
        try:
            request.set_callback(self._settle, None)
            request.start_async(self._inputs(feeds))
        except BaseException:
            self._finished()
            self.idle.put(request)
            raise
        try:
            request.wait()
            return self._outputs(request)
        finally:
            self.idle.put(request)

    def _settle(self, _: Any) -> None:
        """The completion callback of a run that is waited for."""
        self._finished()

    def start(self, feeds: Mapping[str, np.ndarray], finish: Callable[[dict[str, np.ndarray] | None,
                                                                        BaseException | None], None]) -> None:
        """Start one run and return at once: ``finish(outputs, None)`` (or ``finish(None, error)``) is called
        from OpenVINO's completion callback, on its own thread."""
        request = self.idle.get()

        def completed(_: Any) -> None:
            try:
                try:
                    outputs, error = self._outputs(request), None
                except BaseException as e:  # noqa: BLE001 -- handed to finish
                    outputs, error = None, e
                self.idle.put(request)
                finish(outputs, error)
            finally:
                self._finished()

        self._started()
        try:
            request.set_callback(completed, None)
            request.start_async(self._inputs(feeds))
        except BaseException as e:  # noqa: BLE001 -- handed to finish
            self._finished()
            self.idle.put(request)
            finish(None, e)


def compile_part(part: OnnxPart, device: str, requests: int, threads: int | None) -> OvPart:
    """``part``'s ONNX model read and compiled by OpenVINO for ``device``."""
    core = ov_core()
    model = core.read_model(part.model.SerializeToString(), b"")
    config: dict[str, Any] = dict(EXACT_PROPERTIES)
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    compiled = core.compile_model(model, device, config)
    return OvPart(compiled, part.input_names, part.output_names, requests, len(part.nodes))


class OpenVinoExecutable(CompiledFunction):
    """A compiled function: its parts in order, on OpenVINO or on the host."""

    def __init__(self, function: Any, parts: Sequence[OvPart | HostPart]) -> None:
        super().__init__(function)
        self.function = function
        self.parts = list(parts)
        _LIVE.add(self)
        ids = value_names(function)
        #: function input and output names -> the names the parts read and give values by
        self.names = {**{p.name: ids[id(p)] for p in function.inputs},
                      **{n: ids[id(v)] for n, v in function.outputs}}
        self.constants = {ids[id(c)]: c.payload for c in function.constants}
        #: how many of the function's nodes run on OpenVINO, and on the host
        self.on_openvino = sum(p.nodes for p in self.parts if isinstance(p, OvPart))
        self.on_host = sum(len(p.nodes) for p in self.parts if isinstance(p, HostPart))

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_parts(self.function, self.parts, feeds)

    def execute_async(self, inputs: Mapping[str, Any], memory: Any) -> Future[dict[str, Any]]:
        """One run started at once (SDK API 2.2): each OpenVINO part is started with ``start_async`` and the
        next part starts from its completion callback, so no thread of the caller waits; the future
        completes with the output buffers (on ``memory``) when the last part does."""
        done: Future[dict[str, Any]] = Future()
        env = dict(self.constants)
        env.update({self.names[p]: memory.copy_to_host(inputs[p]) for p in self.input_types})

        def step(i: int) -> None:
            try:
                while i < len(self.parts) and isinstance(self.parts[i], HostPart):
                    env.update(self.parts[i].run({k: env[k] for k in self.parts[i].input_names}))
                    i += 1
                if i == len(self.parts):
                    done.set_result({o: memory.copy_from_host(self._output(o, env)) for o in self.output_types})
                    return
                part = self.parts[i]
                part.start({k: env[k] for k in part.input_names}, lambda out, err: after(i, out, err))
            except BaseException as e:  # noqa: BLE001 -- the handle carries the error
                done.set_exception(e)

        def after(i: int, out: dict[str, np.ndarray] | None, err: BaseException | None) -> None:
            if err is not None or out is None:
                done.set_exception(err or RuntimeError("OpenVINO gave no outputs"))
                return
            env.update(out)
            step(i + 1)

        step(0)
        return done

    def _output(self, name: str, env: Mapping[str, np.ndarray]) -> np.ndarray:
        t = self.output_types[name]
        return np.array(env[self.names[name]], dtype=t.elem.dtype, copy=True).reshape(t.shape)

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, OvPart):
                part.release()
        self.parts.clear()


#: the executables alive, closed at exit (below)
_LIVE: weakref.WeakSet[OpenVinoExecutable] = weakref.WeakSet()
#: parts whose completion callbacks did not return in time: never destroyed (see ``OvPart.release``)
_KEPT: list[Any] = []


@atexit.register
def _settle_at_exit() -> None:
    """At exit, wait for every run to finish, then keep every OpenVINO object alive to the end of the process.

    Destroying a compiled model joins OpenVINO's stream threads: during the interpreter's module teardown
    that aborted the process ("terminate called without an active exception"), and from an exit handler
    it hung a CI run for 20 minutes (``glow run --devices openvino:1,cpu:1``: all output printed, then
    no exit). The process ending frees them all anyway, so nothing is destroyed here: the objects are
    held by a list the interpreter never frees."""
    for exe in list(_LIVE):
        for part in exe.parts:
            if isinstance(part, OvPart):
                part.settle()
        _KEPT.append(exe)
    if ov_core.cache_info().currsize:  # (no core made, none to keep: calling it would import openvino)
        _KEPT.append(ov_core())
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_KEPT))  # never freed, not even by module teardown
