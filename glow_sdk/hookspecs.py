"""Hook specifications of the Glow plugin host (pluggy).

A backend distribution declares an entry point in the group ``glow.backends``::

    [project.entry-points."glow.backends"]
    xyz = "glow_backend_xyz.plugin"

The module named there implements the hooks below, each marked with
``@glow_sdk.hookimpl``. The shipped ``interpreter`` and ``cpu`` backends
register through exactly this path.

Everything else a backend provides is a method of :class:`~glow_sdk.backend.Backend` with a default:
the required ``compile`` and ``supported_kinds`` / ``capabilities``, and the optional hooks, each
listed with the SDK API version it arrived in by :data:`glow_sdk.version.HISTORY` (among them, in
2.1: ``claim`` -- the node groups a backend takes from a graph, by default what its capabilities
accept --, ``options``, ``estimate_cost`` and ``min_partition_nodes``). docs/hooks-reference.md
documents them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from glow_sdk.backend import BackendSpec

PROJECT_NAME = "glow"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def glow_backends() -> Sequence[BackendSpec]:
    """Return the backends this plugin provides.

    Each :class:`~glow_sdk.backend.BackendSpec` names the backend (the name
    users pass as ``--backend``), the SDK API version it targets and a factory
    that creates the :class:`~glow_sdk.backend.Backend` object. The factory is
    called lazily, the first time the backend is used, so listing backends
    (``glow backends``) stays cheap.

    Called once per process. What the host does with the result: a spec whose
    SDK API version this glow cannot load is listed as ``incompatible`` (with
    :func:`glow_sdk.version.incompatibility_message`: which versions work, what
    to upgrade) and never created; a name another distribution already
    provides is refused (the first one wins); anything that is not a
    ``BackendSpec``, and any exception raised here, is recorded with its root
    cause and the plugin skipped, while every other backend keeps working.
    docs/hooks-reference.md is the full reference.
    """
    raise NotImplementedError  # pragma: no cover
