"""The plugin host: discovers backends through entry points, managed by pluggy.

Every backend, shipped or third-party, arrives the same way: an entry point in
the group ``glow.backends`` names a module implementing the hooks of
``glow_sdk.hookspecs``. A plugin that fails to import, raises in its hook,
returns a malformed record, duplicates a name or targets an unsupported SDK
API version is recorded with its root cause and skipped; the others keep
working. Backend objects are created lazily (first :meth:`Registry.get`); a
factory that fails marks its backend as broken, with the cause.

Environment switches:

- ``GLOW_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (kill switch);
  backends can still be registered in-process with :meth:`Registry.register_plugin`.
- ``GLOW_BLOCK_PLUGINS=a,b``: skip the named entry points (listed as ``blocked``).
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from glow_core.errors import PluginError, UnknownBackendError
from glow_sdk import hookspecs
from glow_sdk.backend import Backend, BackendSpec
from glow_sdk.version import incompatibility_message, is_compatible

log = logging.getLogger("glow.plugins")

ENTRY_POINT_GROUP = "glow.backends"
DISABLE_ENV = "GLOW_DISABLE_PLUGIN_AUTOLOAD"
BLOCK_ENV = "GLOW_BLOCK_PLUGINS"

#: Record statuses, in the order ``glow backends`` explains them.
STATUSES = ("ok", "error", "incompatible", "blocked")


@dataclass
class BackendRecord:
    """What the host knows of one backend (or of a plugin that failed).

    ``name`` is the backend name for backends, the entry-point name for a
    plugin that failed before naming any backend. ``error`` is the one-line
    root cause, ``cause`` the full traceback text (empty when there is none).
    """

    name: str
    distribution: str
    dist_version: str
    status: str  # one of STATUSES
    error: str = ""
    cause: str = ""
    spec: BackendSpec | None = None
    plugin: str = ""  # the entry-point (pluggy plugin) name
    _instance: Backend | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def origin(self) -> str:
        """``distribution version`` for messages."""
        return f"{self.distribution} {self.dist_version}".strip()


def env_flag(name: str) -> bool:
    """A boolean environment switch: set and not one of ``0``, ``false``, ``no``, ``off``."""
    value = os.environ.get(name, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def blocked_names() -> set[str]:
    """Entry-point names listed in ``GLOW_BLOCK_PLUGINS`` (comma or space separated)."""
    raw = os.environ.get(BLOCK_ENV, "").replace(" ", ",")
    return {b.strip() for b in raw.split(",") if b.strip()}


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a ``raise ... from`` / implicit-context chain."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` of an exception, followed by its root cause when that differs."""
    def one(e: BaseException) -> str:
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"{type(e).__name__}: {text}" if text else type(e).__name__

    root = root_cause(exc)
    return one(exc) if root is exc else f"{one(exc)} (caused by {one(root)})"


class Registry:
    """Loaded plugins and their backends."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, BackendRecord] = {}
        self.failed: list[BackendRecord] = []
        self._lock = threading.Lock()

    # -- loading -------------------------------------------------------------
    def load_entry_points(self, entry_points: Iterable[md.EntryPoint] | None = None) -> None:
        """Load every entry point of the group (or the ones given), honouring the env switches."""
        if env_flag(DISABLE_ENV):
            log.debug("%s is set: no backend plugins loaded from entry points", DISABLE_ENV)
            return
        blocked = blocked_names()
        eps = md.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
        for ep in sorted(eps, key=lambda e: e.name):
            ep_dist = getattr(ep, "dist", None)
            dist = ep_dist.name if ep_dist is not None else "(unknown distribution)"
            dver = ep_dist.version if ep_dist is not None else ""
            if ep.name in blocked:
                self.pm.set_blocked(ep.name)
                self.failed.append(BackendRecord(ep.name, dist, dver, "blocked", f"blocked by {BLOCK_ENV}",
                                                 plugin=ep.name))
                continue
            try:
                module = ep.load()
            except BaseException as e:  # noqa: BLE001  (a broken plugin must never break the host)
                if isinstance(e, KeyboardInterrupt):
                    raise
                self._fail(ep.name, dist, dver, f"failed to import {ep.value}: {describe_exception(e)}", e)
                continue
            self.register_plugin(module, ep.name, dist, dver)

    def register_plugin(self, plugin: Any, name: str, dist: str = "(in-process)", dist_version: str = "") -> None:
        """Register one plugin object (module or instance) and collect its backends."""
        if self.pm.is_blocked(name):
            self.failed.append(BackendRecord(name, dist, dist_version, "blocked", f"blocked by {BLOCK_ENV}",
                                             plugin=name))
            return
        if self.pm.has_plugin(name):
            other = next((r.distribution for r in self.all_records() if r.plugin == name), "another plugin")
            self._fail(name, dist, dist_version, f"plugin name '{name}' is already registered by {other}")
            return
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except Exception as e:  # noqa: BLE001
            self._fail(name, dist, dist_version,
                       f"plugin does not fit the glow hook specifications: {describe_exception(e)}", e)
            if self.pm.has_plugin(name):
                self.pm.unregister(name=name)
            return
        impls = [i for i in self.pm.hook.glow_backends.get_hookimpls() if i.plugin_name == name]
        if not impls:
            self._fail(name, dist, dist_version,
                       "plugin implements no glow_backends() hook (missing @glow_sdk.hookimpl?)")
            return
        for impl in impls:
            try:
                result: Any = impl.function()
                specs = list(result) if result is not None else None
            except Exception as e:  # noqa: BLE001
                self._fail(name, dist, dist_version, f"its glow_backends() hook raised {describe_exception(e)}", e)
                continue
            if specs is None:
                self._fail(name, dist, dist_version,
                           "its glow_backends() hook returned None, expected a list of BackendSpec")
                continue
            for spec in specs:
                self._add_spec(spec, name, dist, dist_version)

    def _add_spec(self, spec: Any, plugin: str, dist: str, dver: str) -> None:
        if not isinstance(spec, BackendSpec):
            self._fail(plugin, dist, dver,
                       f"glow_backends() returned a {type(spec).__name__}, expected glow_sdk.BackendSpec")
            return
        if not isinstance(spec.name, str) or not spec.name or not callable(spec.factory):
            self._fail(plugin, dist, dver, f"malformed BackendSpec {spec!r}: needs a non-empty name and a factory")
            return
        if spec.name in self.records:
            other = self.records[spec.name]
            self._fail(spec.name, dist, dver,
                       f"duplicate backend name '{spec.name}': already provided by {other.origin}; skipped",
                       plugin=plugin)
            return
        if not is_compatible(spec.sdk_api_version):
            msg = incompatibility_message(spec.sdk_api_version, dist)
            log.warning("backend '%s' (%s) skipped: %s", spec.name, f"{dist} {dver}".strip(), msg)
            self.failed.append(BackendRecord(spec.name, dist, dver, "incompatible", msg, spec=spec, plugin=plugin))
            return
        self.records[spec.name] = BackendRecord(spec.name, dist, dver, "ok", spec=spec, plugin=plugin)

    def _fail(self, name: str, dist: str, dver: str, message: str, exc: BaseException | None = None,
              *, plugin: str = "") -> None:
        cause = "".join(traceback.format_exception(exc)) if exc is not None else ""
        log.warning("backend plugin '%s' (%s) skipped: %s", name, f"{dist} {dver}".strip(), message)
        self.failed.append(BackendRecord(name, dist, dver, "error", message, cause, plugin=plugin or name))

    # -- queries -------------------------------------------------------------
    def names(self) -> list[str]:
        """Names of the backends that can be used."""
        return sorted(n for n, r in self.records.items() if r.ok)

    def all_records(self) -> list[BackendRecord]:
        """Every backend and every failed plugin: usable ones first, by name."""
        good = sorted(self.records.values(), key=lambda r: (not r.ok, r.name))
        return good + self.failed

    def record(self, name: str) -> BackendRecord | None:
        """The record of backend ``name`` (usable or not), or None."""
        rec = self.records.get(name)
        if rec is not None:
            return rec
        return next((r for r in self.failed if r.name == name), None)

    def get(self, name: str) -> Backend:
        """The backend object named ``name``, created on first use."""
        rec = self.record(name)
        if rec is None:
            choices = ", ".join(self.names()) or "(none installed)"
            raise UnknownBackendError(
                f"unknown backend '{name}'; choose one of: {choices}",
                hint="'glow backends' lists what is installed",
            )
        if not rec.ok:
            raise PluginError(f"backend '{name}' ({rec.origin}) is unavailable ({rec.status}): {rec.error}",
                              hint="'glow backends --verbose' shows the details")
        with self._lock:
            if rec._instance is None:
                assert rec.spec is not None
                try:
                    inst = rec.spec.factory()
                except Exception as e:  # noqa: BLE001
                    rec.status, rec.error = "error", f"its factory raised {describe_exception(e)}"
                    rec.cause = "".join(traceback.format_exception(e))
                    raise PluginError(f"backend '{name}' ({rec.origin}) failed to start: {rec.error}") from e
                if not isinstance(inst, Backend):
                    rec.status = "error"
                    rec.error = f"its factory returned a {type(inst).__name__}, not a glow_sdk.Backend"
                    raise PluginError(f"backend '{name}' ({rec.origin}): {rec.error}")
                api = getattr(inst, "sdk_api_version", rec.spec.sdk_api_version)
                if api != rec.spec.sdk_api_version and not is_compatible(api):
                    rec.status, rec.error = "incompatible", incompatibility_message(api, rec.distribution)
                    raise PluginError(f"backend '{name}' ({rec.origin}) is unavailable (incompatible): {rec.error}")
                rec._instance = inst
            return rec._instance


_registry: Registry | None = None
_registry_lock = threading.Lock()


def registry() -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _registry
    with _registry_lock:
        if _registry is None:
            reg = Registry()
            reg.load_entry_points()
            _registry = reg
        return _registry


def reset_registry() -> None:
    """Forget loaded plugins (tests; after installing a package in-process)."""
    global _registry
    with _registry_lock:
        _registry = None


def get_backend(name: str) -> Backend:
    """The backend named ``name`` from the process-wide registry ("choose one of" when unknown)."""
    return registry().get(name)


#: the backends :func:`default_backend` prefers, fastest first
PREFERRED_BACKENDS = ("cpu", "interpreter")


def default_backend() -> str:
    """The fastest usable backend installed: ``cpu`` when present, else ``interpreter``, else the first by name.

    What ``glow_core.compile``, ``InferenceSession`` and ``glow run`` / ``glow compile`` use when no backend
    is named.
    """
    usable = registry().names()
    for name in (*PREFERRED_BACKENDS, *usable):
        if name in usable:
            return name
    raise UnknownBackendError("no usable backend is installed",
                              hint="pip install glow-backend-cpu or glow-backend-interpreter ('glow backends' "
                                   "lists what failed)")


#: The backend the conformance suite and the testing tools compare against (constant
#: folding does not use it: it calls the reference kernels, ``glow_core.reference``).
REFERENCE_BACKEND = os.environ.get("GLOW_REFERENCE_BACKEND", "interpreter")


def reference_backend() -> Backend:
    """The reference backend (``GLOW_REFERENCE_BACKEND``, default ``interpreter``)."""
    try:
        return registry().get(REFERENCE_BACKEND)
    except UnknownBackendError as e:
        raise PluginError(
            f"the reference backend '{REFERENCE_BACKEND}' is not installed: {e}",
            hint="pip install glow-backend-interpreter",
        ) from e


__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendRecord",
    "Registry",
    "default_backend",
    "get_backend",
    "reference_backend",
    "registry",
    "reset_registry",
]
