"""A device manager whose partitions live in a Ray actor (one actor per device).

It offers the local :class:`~glow_core.runtime.device_manager.DeviceManager`'s interface to the
executor (``submit(key, feeds, done)``, ``unload``, ``stop``, memory accounting), so pipelines and
replicas over remote devices go through the same partitioner and executor as local ones.

- **Placement**: the actor reserves the device's CPUs (``ray:cpu:2/4``: 4 each) and is pinned to
  one node (round robin over the alive nodes; a restarted actor goes back to its node if it is alive).
- **Loading** (:meth:`start_load`): the partition travels as the flat description of :mod:`.wire`;
  its weights are put in the object store once (:meth:`Cluster.put_weights`) and passed by
  reference, so each node holds one copy whatever the number of actors and requests; the actor
  compiles the partition (:mod:`.actor`).
- **Requests**: feeds go to the actor as numpy arrays through the object store; the answer comes
  back as a future (``ObjectRef.future()``), handed to this manager's dispatcher thread, which calls
  ``done`` -- no thread ever blocks on an actor without a timeout. A partition whose consumers are
  all remote leaves its outputs in the object store and answers references (:mod:`.transfer`).
- **Faults**: when the actor dies, every call in flight on it fails at once with
  :class:`DeviceExecutionError` naming the device; the device turns ``restarting`` (new calls fail
  at once, the host manager sends requests to other replicas) while a new actor is started and
  the partitions are loaded again from the same weights; after ``max_restarts`` failed restarts,
  or if a restart fails, the device is ``dropped``. A call with no answer within ``call_timeout``
  seconds fails too.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from glow_core.ir.graph import Function
from glow_core.runtime.cluster.actor import PartitionHost
from glow_core.runtime.cluster.connect import Cluster
from glow_core.runtime.cluster.transfer import OutputBundle, RemoteTensor, split_feeds
from glow_core.runtime.cluster.wire import encode_function
from glow_core.runtime.device_manager import DeviceAccount, Done
from glow_core.runtime.devices import DeviceConfig
from glow_core.runtime.errors import DeviceConfigError, DeviceExecutionError
from glow_core.runtime.graphcut import MemoryEstimate

#: seconds to wait for an actor to start, and for one partition to load (compile) in it
START_TIMEOUT = 120.0
LOAD_TIMEOUT = 600.0
#: seconds ``stop`` waits for a killed actor to be gone
KILL_WAIT_S = 10.0


@dataclass
class RemotePartition:
    """A partition loaded on a remote device: what a restarted actor needs to load it again."""

    key: str
    description: bytes
    weights_key: tuple[Any, ...]
    weights: Any  # the object reference
    threads: int | None
    options: Mapping[str, Any] | None
    memory: MemoryEstimate
    outputs: list[str]
    keep_remote: bool  # every consumer is a remote device: outputs stay in the object store


@dataclass
class Call:
    """One run in flight on the actor."""

    done: Done
    key: str
    started: float
    generation: int
    outputs: Any = None  # keep_remote: the reference of the outputs left in the object store


class RayDeviceManager(DeviceAccount):
    """Loads, unloads and runs partitions in one Ray actor (module docstring)."""

    def __init__(self, config: DeviceConfig, cluster: Cluster, *, call_timeout: float = 60.0,
                 max_restarts: int = 3, start_timeout: float = START_TIMEOUT) -> None:
        super().__init__(config)
        self.cluster = cluster
        self.call_timeout, self.max_restarts, self.start_timeout = call_timeout, max_restarts, start_timeout
        self.restarts = 0
        self.state = "starting"  # starting | ok | restarting | dropped | stopped
        self.node = ""
        self.pid = 0  # the actor's process id on its node
        self.last_error = ""
        self._generation = 0
        self._calls: dict[int, Call] = {}
        self._tokens = itertools.count()
        self._events: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._actor: Any = None
        self._ready: Any = None
        self._spawn(None)
        self._thread = threading.Thread(target=self._dispatch, name=f"glow-device-{config.id}", daemon=True)
        self._thread.start()

    @property
    def available(self) -> bool:
        return self.state == "ok"

    def where(self) -> str:
        return f"device {self.id} ({self.config.backend}, Ray actor on node {self.node[:12] or '?'})"

    # -- the actor ------------------------------------------------------------------------------
    def _spawn(self, prefer: str | None, avoid: Sequence[str] = ()) -> None:
        """Create the actor (not waiting for it: :meth:`wait_ready`)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.node = self.cluster.place(self.config.index, prefer, avoid)
        cls = self.cluster.actor_class(PartitionHost)
        self._actor = cls.options(num_cpus=self.config.cpus, max_restarts=0, max_task_retries=0,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(self.node, soft=False)
                                  ).remote(self.id, self.config.backend)
        self._ready = self._actor.ready.remote()

    def wait_ready(self) -> None:
        """Wait (up to ``start_timeout`` s) until the actor answers; else kill it and raise DeviceConfigError."""
        self._await_actor()
        self.state = "ok"

    def _await_actor(self) -> None:
        ray = self.cluster.ray
        try:
            info = ray.get(self._ready, timeout=self.start_timeout)
        except Exception as e:  # noqa: BLE001  (GetTimeoutError, the actor's death, an unschedulable actor)
            self._kill()
            if isinstance(e, ray.exceptions.GetTimeoutError):
                what = f"did not start within {self.start_timeout:g} s"
            else:
                first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
                what = f"could not start ({type(e).__name__}{': ' + first if first else ''})"
            raise DeviceConfigError(
                f"device {self.id}: its Ray actor ({self.config.cpus} CPU(s) on node {self.node[:12]}) {what}; "
                f"the cluster has {self.cluster.resources()}",
                hint="ask for fewer devices or CPUs (ray:BACKEND:COUNT/CPUS), or add nodes to the cluster") from e
        self.node, self.pid = info["node"], int(info["pid"])

    def _kill(self) -> None:
        if self._actor is not None:
            try:
                self.cluster.ray.kill(self._actor, no_restart=True)
            except Exception:  # noqa: BLE001  # pragma: no cover  (already gone)
                pass

    def _await_death(self, timeout: float = KILL_WAIT_S) -> None:
        """Wait until the killed actor answers no more (``ray.kill`` only sends the request: on a busy
        machine a call made right after it still ran, so the actor's CPUs were not yet free when ``stop``
        returned). Pings it until a ping fails, sending the kill again between pings, for at most
        ``timeout`` seconds."""
        ray, actor = self.cluster.ray, self._actor
        if actor is None:
            return
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                ray.get(actor.ready.remote(), timeout=left)
            except Exception:  # noqa: BLE001  (RayActorError: gone; GetTimeoutError: out of time)
                return
            time.sleep(0.05)
            self._kill()

    # -- loading --------------------------------------------------------------------------------
    def start_load(self, key: str, function: Function, estimate: MemoryEstimate, threads: int | None,
                   options: Mapping[str, Any] | None, keep_remote: bool = False) -> Callable[[], MemoryEstimate]:
        """Send ``function`` to the actor to compile; the returned call waits for it and accounts its memory.

        ``keep_remote``: every consumer of the partition's outputs is a remote device, so its runs leave
        the outputs in the object store (:mod:`.transfer`) instead of sending them here.
        """
        with self._lock:
            self._refuse_if_loaded(key)
            self._refuse_unless_fits(key, estimate)
        description, weights = encode_function(function)
        wkey, ref = self.cluster.put_weights(weights)
        threads = threads or self.config.cpus
        answer = self._actor.load.remote(key, description, ref, threads, options,
                                         (estimate.constant_bytes, estimate.activation_bytes, estimate.io_bytes))
        part = RemotePartition(key, description, wkey, ref, threads, options, estimate,
                               [n for n, _ in function.outputs], keep_remote)

        def finish() -> MemoryEstimate:
            try:
                memory = self._load_answer(key, answer)
                with self._lock:
                    self._refuse_unless_fits(key, memory)
                    part.memory = memory
                    self._account(key, part, memory)
            except BaseException:
                self.cluster.release_weights(wkey)
                self._actor.unload.remote(key)
                raise
            return memory

        return finish

    def _load_answer(self, key: str, answer: Any) -> MemoryEstimate:
        ray = self.cluster.ray
        try:
            status, value = ray.get(answer, timeout=LOAD_TIMEOUT)
        except Exception as e:  # noqa: BLE001
            raise DeviceExecutionError(f"{self.where()}: loading partition {key} failed: {type(e).__name__}: {e}",
                                       hint="check the cluster ('ray status') and the actor's log") from e
        if status != "ok":
            raise DeviceExecutionError(f"{self.where()}: compiling partition {key} failed: {value}",
                                       hint="every node needs the same glow-compiler and backend plugins as "
                                            "this machine ('glow backends' there lists them)")
        return MemoryEstimate(*value)

    def load(self, key: str, executable: Any, memory: MemoryEstimate) -> None:
        raise DeviceConfigError(f"device {self.id} is remote: partitions reach it through start_load, "
                                "not as a compiled function")

    def unload(self, key: str) -> None:
        """Free the partition ``key`` here and in the actor (no error if it is not loaded)."""
        with self._lock:
            part = self._release(key)
        if part is None:
            return
        self.cluster.release_weights(part.weights_key)
        if self.state == "ok":
            self._actor.unload.remote(key)  # not waited for: a dead actor holds nothing

    # -- requests -------------------------------------------------------------------------------
    def submit(self, key: str, feeds: Mapping[str, np.ndarray], done: Done) -> None:
        """Send one run of ``key`` to the actor; ``done(outputs, error)`` is called from this device's thread."""
        plain, picks, bundles = split_feeds(feeds)
        with self._lock:
            state = self.state
            part = self.loaded.get(key)
            if state == "ok" and part is not None and part.keep_remote:
                token = next(self._tokens)
                ref, kept = self._actor.run_keep.options(num_returns=2).remote(key, plain, picks, *bundles)
                self._calls[token] = Call(done, key, time.monotonic(), self._generation, kept)
            elif state == "ok":
                token = next(self._tokens)
                ref = self._actor.run.remote(key, plain, picks, *bundles)
                self._calls[token] = Call(done, key, time.monotonic(), self._generation)
        if state != "ok":
            why = {"restarting": "is restarting after its Ray actor died",
                   "dropped": f"was dropped ({self.last_error})", "stopped": "is stopped",
                   "starting": "has not started"}[state]
            self._events.put(("fail", done, DeviceExecutionError(f"{self.where()} {why}; partition {key} not run",
                                                                 hint="retry: other devices keep serving")))
            return
        ref.future().add_done_callback(lambda f: self._events.put(("answer", token, f)))

    def _dispatch(self) -> None:
        while True:
            try:
                event = self._events.get(timeout=0.5)
            except queue.Empty:
                event = ()
            if event is None:
                return
            try:
                if event and event[0] == "fail":
                    event[1](None, event[2])
                elif event:
                    self._answer(event[1], event[2])
                self._expire()
            except Exception:  # noqa: BLE001  # pragma: no cover  (a callback bug must not stop the device)
                pass

    def _answer(self, token: int, future: Any) -> None:
        with self._lock:
            call = self._calls.pop(token, None)
        if call is None:
            return  # already failed (timeout, the actor's death)
        exc = future.exception()
        if exc is not None:
            if isinstance(exc, self.cluster.ray.exceptions.RayActorError):
                self._died(call, exc)
                return
            call.done(None, DeviceExecutionError(f"{self.where()}: running partition {call.key} failed: "
                                                 f"{type(exc).__name__}: {exc}"))
            return
        status, value = future.result()
        if status == "ok":
            self.runs += 1
            if call.outputs is not None:
                with self._lock:
                    part = self.loaded.get(call.key)
                names = part.outputs if part is not None else []
                bundle = OutputBundle(self.cluster.ray, call.outputs, f"{self.where()} (partition {call.key})",
                                      self.call_timeout)
                value = {n: RemoteTensor(bundle, n) for n in names}
            call.done(value, None)
        else:
            call.done(None, DeviceExecutionError(f"{self.where()} failed running partition {call.key}: {value}"))

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [t for t, c in self._calls.items() if now - c.started > self.call_timeout]
            calls = [self._calls.pop(t) for t in late]
        for c in calls:
            c.done(None, DeviceExecutionError(f"{self.where()}: no answer for partition {c.key} within "
                                              f"{self.call_timeout:g} s", hint="check the actor ('ray status')"))

    # -- faults ---------------------------------------------------------------------------------
    def _died(self, call: Call, exc: BaseException) -> None:
        """The actor died: fail every call in flight on it, then restart it (or drop the device)."""
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        restart = False
        with self._lock:
            current = call.generation == self._generation and self.state == "ok"
            calls = [call]
            if current:
                calls += [c for c in self._calls.values() if c.generation == call.generation]
                self._calls = {t: c for t, c in self._calls.items() if c.generation != call.generation}
                self.last_error = f"its Ray actor died: {reason}"
                self.state = "restarting" if self.restarts < self.max_restarts else "dropped"
                restart = self.state == "restarting"
        for c in calls:
            c.done(None, DeviceExecutionError(f"{self.where()}: its Ray actor died while running partition {c.key} "
                                              f"({type(exc).__name__})", hint="retry: the device restarts"))
        if current and restart:
            threading.Thread(target=self._restart, name=f"glow-restart-{self.id}", daemon=True).start()

    def _restart(self) -> None:
        """A new actor on the same node when alive, the partitions loaded again; else drop the device."""
        self.restarts += 1
        try:
            self._kill()
            self._await_death()  # its CPUs free before the new actor asks the node for them
            self._respawn()
            with self._lock:
                parts = list(self.loaded.values())
            answers = [(p.key, self._actor.load.remote(p.key, p.description, p.weights, p.threads, p.options,
                                                       (p.memory.constant_bytes, p.memory.activation_bytes,
                                                        p.memory.io_bytes))) for p in parts]
            for key, answer in answers:
                self._load_answer(key, answer)
        except Exception as e:  # noqa: BLE001
            with self._lock:
                self.last_error = f"restart failed: {type(e).__name__}: {e}"
                if self.state != "stopped":
                    self.state = "dropped"
            return
        with self._lock:
            self._generation += 1
            stopped = self.state == "stopped"
            if not stopped:
                self.state = "ok"
        if stopped:
            self._kill()

    def _respawn(self) -> None:
        """A new actor on the old one's node when it is alive, else (or when it cannot start there) on
        another alive node: a node that died takes its actors' places with it (the cluster may still
        list it as alive for a few seconds, so a node an actor could not start on is avoided next)."""
        tried: list[str] = []
        while True:
            self._spawn(None if tried else self.node, avoid=tried)
            try:
                self._await_actor()
                return
            except DeviceConfigError:
                tried.append(self.node)
                if not [n for n in self.cluster.alive_nodes() if n not in tried]:
                    raise

    def stop(self) -> None:
        """Fail what is in flight, kill the actor, stop the dispatcher."""
        with self._lock:
            self.state = "stopped"
            calls = list(self._calls.values())
            self._calls.clear()
        for c in calls:
            self._events.put(("fail", c.done, DeviceExecutionError(f"{self.where()} was stopped")))
        self._kill()
        self._await_death()
        self._events.put(None)
