"""The plugin host: discovers backends through entry points, managed by pluggy.

Every backend, shipped or third-party, arrives the same way: an entry point in
the group ``glow.backends`` names a module implementing the hooks of
``glow_sdk.hookspecs``. A plugin that fails to import, raises in its hook,
returns a malformed record, duplicates a name or targets an unsupported SDK
API version is recorded with its root cause and skipped; the others keep
working.

Environment switches:

- ``GLOW_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (kill switch);
  backends can still be registered in-process with :meth:`Registry.register_plugin`.
- ``GLOW_BLOCK_PLUGINS=a,b``: skip the named entry points.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import pluggy

from glow_core.errors import PluginError, UnknownBackendError
from glow_sdk import hookspecs
from glow_sdk.backend import Backend, BackendSpec
from glow_sdk.version import SDK_API_VERSION, SUPPORTED_SDK_API_VERSIONS

log = logging.getLogger("glow.plugins")

ENTRY_POINT_GROUP = "glow.backends"


@dataclass
class BackendRecord:
    """What the host knows of one backend (or of a plugin that failed)."""

    name: str
    distribution: str
    dist_version: str
    status: str  # "ok", "error", "incompatible", "blocked"
    error: str = ""
    cause: str = ""  # root-cause traceback text
    spec: BackendSpec | None = None
    _instance: Backend | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Registry:
    """Loaded plugins and their backends."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, BackendRecord] = {}
        self.failed: list[BackendRecord] = []
        self._lock = threading.Lock()

    # -- loading -------------------------------------------------------------
    def load_entry_points(self) -> None:
        if os.environ.get("GLOW_DISABLE_PLUGIN_AUTOLOAD"):
            return
        blocked = {b.strip() for b in os.environ.get("GLOW_BLOCK_PLUGINS", "").split(",") if b.strip()}
        for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "?"
            dver = ep.dist.version if ep.dist is not None else "?"
            if ep.name in blocked:
                self.pm.set_blocked(ep.name)
                self.failed.append(BackendRecord(ep.name, dist, dver, "blocked", "blocked by GLOW_BLOCK_PLUGINS"))
                continue
            try:
                module = ep.load()
            except BaseException as e:  # noqa: BLE001  (a broken plugin must never break the host)
                if isinstance(e, KeyboardInterrupt):
                    raise
                self._fail(ep.name, dist, dver, f"failed to import {ep.value}: {type(e).__name__}: {e}", e)
                continue
            self.register_plugin(module, ep.name, dist, dver)

    def register_plugin(self, plugin: Any, name: str, dist: str = "(in-process)", dist_version: str = "") -> None:
        """Register one plugin object (module or instance) and collect its backends."""
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except Exception as e:  # noqa: BLE001
            self._fail(name, dist, dist_version, f"plugin does not fit the hook specifications: {e}", e)
            try:
                self.pm.unregister(name=name)
            except Exception:  # noqa: BLE001
                pass
            return
        impls = [i for i in self.pm.hook.glow_backends.get_hookimpls() if i.plugin_name == name]
        for impl in impls:
            try:
                specs = list(impl.function())
            except Exception as e:  # noqa: BLE001
                self._fail(name, dist, dist_version, f"its glow_backends() hook raised {type(e).__name__}: {e}", e)
                continue
            for spec in specs:
                self._add_spec(spec, name, dist, dist_version)

    def _add_spec(self, spec: Any, plugin: str, dist: str, dver: str) -> None:
        if not isinstance(spec, BackendSpec):
            self._fail(plugin, dist, dver, f"glow_backends() returned {type(spec).__name__}, expected glow_sdk.BackendSpec")
            return
        if spec.name in self.records:
            other = self.records[spec.name]
            self._fail(spec.name, dist, dver, f"backend name '{spec.name}' is already provided by {other.distribution}")
            return
        if spec.sdk_api_version not in SUPPORTED_SDK_API_VERSIONS:
            works = ", ".join(str(v) for v in sorted(SUPPORTED_SDK_API_VERSIONS))
            newer = spec.sdk_api_version > SDK_API_VERSION
            todo = "upgrade glow" if newer else f"upgrade {dist} to a release built for SDK API {SDK_API_VERSION}"
            self.failed.append(
                BackendRecord(
                    spec.name, dist, dver, "incompatible",
                    f"targets SDK API version {spec.sdk_api_version}; this glow supports {works}: {todo}",
                )
            )
            return
        self.records[spec.name] = BackendRecord(spec.name, dist, dver, "ok", spec=spec)

    def _fail(self, name: str, dist: str, dver: str, message: str, exc: BaseException | None = None) -> None:
        cause = "".join(traceback.format_exception(exc)) if exc is not None else ""
        log.warning("glow backend plugin %s (%s) skipped: %s", name, dist, message)
        self.failed.append(BackendRecord(name, dist, dver, "error", message, cause))

    # -- queries -------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.records)

    def all_records(self) -> list[BackendRecord]:
        return sorted(self.records.values(), key=lambda r: r.name) + self.failed

    def get(self, name: str) -> Backend:
        rec = self.records.get(name)
        if rec is None:
            bad = next((r for r in self.failed if r.name == name), None)
            if bad is not None:
                raise PluginError(f"backend '{name}' ({bad.distribution}) is unavailable: {bad.error}")
            choices = ", ".join(self.names()) or "(none installed)"
            raise UnknownBackendError(f"unknown backend '{name}'; choose one of: {choices}")
        with self._lock:
            if rec._instance is None:
                assert rec.spec is not None
                try:
                    inst = rec.spec.factory()
                except Exception as e:  # noqa: BLE001
                    raise PluginError(f"backend '{name}' ({rec.distribution}) failed to start: {type(e).__name__}: {e}") from e
                if not isinstance(inst, Backend):
                    raise PluginError(f"backend '{name}' factory returned {type(inst).__name__}, not a glow_sdk.Backend")
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
    return registry().get(name)


#: The backend whose per-node evaluation serves constant folding.
REFERENCE_BACKEND = os.environ.get("GLOW_REFERENCE_BACKEND", "interpreter")


def reference_backend() -> Backend:
    try:
        return registry().get(REFERENCE_BACKEND)
    except UnknownBackendError as e:
        raise PluginError(
            f"constant folding needs the reference backend '{REFERENCE_BACKEND}', which is not installed: {e}",
            hint="pip install glow-backend-interpreter",
        ) from e
