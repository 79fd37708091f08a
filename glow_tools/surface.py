"""The SDK surface: the public API of what a backend consumes, as a comparable record.

A backend reads the graph IR (``glow_core.ir``: types, graph, kinds), the
low-level IR data types (``glow_core.lir``) and the reference kernels
(``glow_core.reference``), and checks its allocations against the memory budget
(``glow_core.budget``). These are part of the backend contract, so their
public surface is recorded per SDK API version in ``glow_sdk/surface.json``;
``tests/sdk/test_surface.py`` compares the record with the live code and fails
when they drift. After a deliberate change: bump ``SDK_API_VERSION`` (and
``SUPPORTED_SDK_API_VERSIONS``) in ``glow_sdk/version.py``, note the change in
its history, and re-record::

    python -m glow_tools.surface --record

The record holds, per module: every public name the module defines (not the
names it imports) with its kind and signature; for classes their bases,
public methods and properties (dataclasses: their fields); for enums their
members. It also holds the node-kind table (operands, results, attributes,
categories, element kinds of every kind) and the keys of the reference
kernel table.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

import glow_sdk
from glow_core.ir.kinds import all_kinds
from glow_core.reference import KERNELS
from glow_sdk.version import SDK_API_VERSION

#: the packages whose public surface the SDK API version covers
COVERED_PACKAGES = ("glow_core.ir", "glow_core.lir", "glow_core.reference", "glow_core.budget")
#: modules of those packages that are implementation, not surface (the kernels are covered by their table)
EXCLUDED_PREFIXES = ("glow_core.reference.kernels.",)
#: where the record lives
RECORD = Path(glow_sdk.__file__).resolve().parent / "surface.json"
#: the command that re-records it
RECORD_COMMAND = "python -m glow_tools.surface --record"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _text(obj: Any) -> str:
    return _ADDRESS.sub("", str(obj))


class _Stable:
    """A default value whose repr does not depend on hash order (sets) or addresses."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        if isinstance(self.value, (set, frozenset)):
            return f"{type(self.value).__name__}({sorted(map(repr, self.value))})"
        return _text(repr(self.value))


def _signature(obj: Any) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = [p.replace(default=_Stable(p.default)) if p.default is not p.empty else p for p in sig.parameters.values()]
    return _text(sig.replace(parameters=params))


def _class_surface(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "class", "bases": [b.__name__ for b in cls.__bases__]}
    if issubclass(cls, enum.Enum):
        out["members"] = {m.name: _text(repr(m.value)) for m in cls}
        return out
    if dataclasses.is_dataclass(cls):
        out["fields"] = {f.name: _text(f.type) for f in dataclasses.fields(cls)}
    members: dict[str, str] = {}
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, property):
            members[name] = "property"
        elif isinstance(value, (staticmethod, classmethod)):
            members[name] = f"{type(value).__name__}{_signature(value.__func__)}"
        elif inspect.isfunction(value):
            members[name] = f"method{_signature(value)}"
        elif not name.startswith("_"):
            members[name] = f"attribute: {type(value).__name__}"
    out["members"] = dict(sorted(members.items()))
    return out


def module_surface(module: Any) -> dict[str, Any]:
    """Public name -> its surface, for the names ``module`` defines itself."""
    out: dict[str, Any] = {}
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        defined_in = getattr(value, "__module__", None)
        if inspect.isclass(value) or inspect.isfunction(value):
            if defined_in != module.__name__:
                continue  # imported, recorded where it is defined
            out[name] = _class_surface(value) if inspect.isclass(value) else {"kind": "function",
                                                                               "signature": _signature(value)}
        elif inspect.ismodule(value):
            continue
        elif name.isupper() or name in getattr(module, "__all__", ()):
            out[name] = {"kind": "constant", "type": type(value).__name__}
    return out


def covered_modules() -> list[str]:
    names: list[str] = []
    for pkg_name in COVERED_PACKAGES:
        pkg = importlib.import_module(pkg_name)
        names.append(pkg_name)
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), prefix=pkg_name + "."):  # a module: itself
            if not info.name.startswith(EXCLUDED_PREFIXES):
                names.append(info.name)
    return sorted(names)


def kind_table() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in sorted(all_kinds().items()):
        out[name] = {
            "inputs": [o.name + ("?" if o.optional else "") + ("*" if o.variadic else "") for o in spec.inputs],
            "outputs": list(spec.outputs) + (["*"] if spec.variadic_outputs else []),
            "attrs": {a.name: [a.type.name, "required" if a.required else _text(repr(a.default))]
                      for a in spec.attrs},
            "categories": sorted(c.name for c in spec.categories),
            "elems": sorted(e.name for e in spec.elems),
        }
    return out


def surface() -> dict[str, Any]:
    """The live surface (what :data:`RECORD` holds when nothing drifted)."""
    return {
        "sdk_api_version": SDK_API_VERSION,
        "modules": {name: module_surface(importlib.import_module(name)) for name in covered_modules()},
        "kinds": kind_table(),
        "reference_kernels": sorted(KERNELS),
    }


def differences(recorded: dict[str, Any], live: dict[str, Any], path: str = "") -> list[str]:
    """Readable differences between two records (``path: recorded -> live``)."""
    if isinstance(recorded, dict) and isinstance(live, dict):
        out: list[str] = []
        for key in sorted(set(recorded) | set(live)):
            where = f"{path}.{key}" if path else str(key)
            if key not in live:
                out.append(f"{where}: removed")
            elif key not in recorded:
                out.append(f"{where}: added")
            else:
                out.extend(differences(recorded[key], live[key], where))
        return out
    return [] if recorded == live else [f"{path}: {recorded!r} -> {live!r}"]


def render(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m glow_tools.surface", description=__doc__.splitlines()[0])
    p.add_argument("--record", action="store_true", help=f"write the live surface to {RECORD}")
    args = p.parse_args(argv)
    live = surface()
    if args.record:
        RECORD.write_text(render(live))
        print(f"recorded the SDK API {SDK_API_VERSION} surface in {RECORD}")
        return 0
    recorded = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    diff = differences(recorded, live)
    for line in diff:
        print(line)
    print("the SDK surface matches its record" if not diff else
          f"the SDK surface changed: bump SDK_API_VERSION and re-record with {RECORD_COMMAND}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
