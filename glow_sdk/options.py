"""Backend options: a declared schema (name, type, default, help) and the check of ``CompileOptions.extra``.

``glow_core.compile(model, backend, options={...})`` passes a dictionary of options to the backend
(``CompileOptions.extra``). Some keys are the core's own (:data:`CORE_OPTIONS`: every backend
accepts them); the rest are the backend's, declared by ``Backend.options()`` (SDK API 2.1)::

    def options(self):
        return [BackendOption("tile", int, 64, "the tile size of the matrix unit")]

A key that is neither is refused with :class:`BackendOptionError`, which lists the known ones; a
value of the wrong type likewise. A backend built for SDK API 2.0 or older that declares no schema
is not checked (it may read any key, as it always could).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from glow_core.errors import BackendError


class BackendOptionError(BackendError):
    """An option key no schema declares, or a value of the wrong type."""


@dataclass(frozen=True)
class BackendOption:
    """One declared option: its key, the Python type(s) of its value, the default and a line of help."""

    name: str
    type: type | tuple[type, ...]
    default: Any = None
    help: str = ""

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` has the declared type (None always: "use the default"; ints pass for floats)."""
        if value is None:
            return True
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if isinstance(value, bool) and bool not in types:
            return False
        return isinstance(value, types) or (float in types and isinstance(value, int))

    def type_text(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        return " or ".join(t.__name__ for t in types)


#: the options the core reads itself; every backend accepts them
CORE_OPTIONS: tuple[BackendOption, ...] = (
    BackendOption("cache", bool, True, "use the compile caches (program and object caches)"),
    BackendOption("fast_math", bool, False, "allow reassociating float arithmetic"),
    BackendOption("max_tensor_bytes", (int, str), None, "the one-tensor memory budget (bytes or 512M, 2G)"),
    BackendOption("max_total_bytes", (int, str), None, "the total memory budget (bytes or 512M, 2G)"),
    BackendOption("profile", bool, False, "compile an instrumented variant (glow bench --profile)"),
    BackendOption("lower_all", bool, False, "lower every high-level node, even those the backend runs"),
    BackendOption("optimization_level", int, 1, "0: no graph optimization before lowering; 1: all of it"),
)


def option_table(schema: Iterable[BackendOption]) -> dict[str, BackendOption]:
    """Key -> option, the core's options first; a backend option may not redeclare a core key."""
    table = {o.name: o for o in CORE_OPTIONS}
    for o in schema:
        table[o.name] = o
    return table


def unknown_keys(extra: Mapping[str, Any], schema: Sequence[BackendOption]) -> list[str]:
    """The keys of ``extra`` neither the core nor ``schema`` declares, sorted."""
    table = option_table(schema)
    return sorted(k for k in extra if k not in table)


def check_options(backend: str, extra: Mapping[str, Any], schema: Sequence[BackendOption]) -> None:
    """Refuse unknown keys (listing the known ones) and values of the wrong type."""
    table = option_table(schema)
    unknown = unknown_keys(extra, schema)
    if unknown:
        raise BackendOptionError(
            f"backend '{backend}' has no option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"choose from: {', '.join(sorted(table))}",
            hint=f"'glow sdk options {backend}' lists them with their types and defaults")
    for key, value in extra.items():
        opt = table[key]
        if not opt.accepts(value):
            raise BackendOptionError(f"backend '{backend}': option '{key}' takes {opt.type_text()}, "
                                     f"got {type(value).__name__} {value!r}", hint=opt.help or None)


def describe_options(schema: Sequence[BackendOption]) -> list[str]:
    """One line per option (the core's, then the backend's): ``name  type  default  help``."""
    table = option_table(schema)
    width = max(len(k) for k in table)
    return [f"{o.name:<{width}}  {o.type_text():<10}  default {o.default!r:<8}  {o.help}" for o in table.values()]


__all__ = ["CORE_OPTIONS", "BackendOption", "BackendOptionError", "check_options", "describe_options",
           "option_table", "unknown_keys"]
