"""``glow sdk new-backend NAME [DIR]``: scaffold a complete backend package ``glow-backend-NAME``.

What it writes (see ``templates.py`` for the small files)::

    DIR/pyproject.toml                        distribution glow-backend-NAME, entry point glow.backends: NAME
    DIR/README.md                             how to try it and bring up hardware
    DIR/glow_backend_NAME/__init__.py
    DIR/glow_backend_NAME/plugin.py           the glow_backends() hook
    DIR/glow_backend_NAME/backend.py          a copy of glow_tools/scaffold/backend.py, renamed
    DIR/glow_backend_NAME/kernels.py          a copy of glow_tools/scaffold/kernels.py (numpy kernels)
    DIR/glow_backend_NAME/conformance_waivers.txt
    DIR/tests/test_conformance.py             runs the conformance suite (level core)
    DIR/tests/test_kernels.py                 kernel unit tests against the reference

``backend.py`` and ``kernels.py`` are real modules of this package (tested
in-process), copied with the backend's name, class name and the current SDK
API version filled in. Right after scaffolding, ``pip install DIR`` and
``glow conformance --backend NAME`` passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from glow_core.errors import GlowError
from glow_sdk.version import CORE_DISTRIBUTION, SDK_API_VERSION, core_requirement
from glow_tools.scaffold import templates

_HERE = Path(__file__).resolve().parent
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
#: names a scaffold may not take: the shipped backends
RESERVED = frozenset({"interpreter", "interpreter-primitives", "cpu"})


class ScaffoldError(GlowError):
    """The backend cannot be scaffolded (bad name, destination not empty)."""


@dataclass(frozen=True)
class BackendNames:
    name: str  # backend and entry-point name
    dist: str  # distribution
    package: str  # import package
    cls: str  # backend class

    @staticmethod
    def of(name: str) -> BackendNames:
        if not NAME_RE.match(name):
            raise ScaffoldError(
                f"'{name}' is not a valid backend name",
                hint="use lowercase letters and digits, words separated by '-' or '_', starting with a letter "
                     "(e.g. xyz, acme-npu)",
            )
        if name in RESERVED:
            raise ScaffoldError(f"'{name}' is the name of a backend shipped with glow; choose another name")
        words = re.split(r"[-_]", name)
        return BackendNames(name, "glow-backend-" + "-".join(words), "glow_backend_" + "_".join(words),
                            "".join(w.capitalize() for w in words) + "Backend")


@dataclass
class Scaffold:
    names: BackendNames
    root: Path
    files: list[Path] = field(default_factory=list)


def render_backend_module(names: BackendNames) -> str:
    """``glow_tools/scaffold/backend.py`` with the backend's names and the current SDK API version."""
    text = (_HERE / "backend.py").read_text()
    swaps = {
        'BACKEND_NAME = "template"': f'BACKEND_NAME = "{names.name}"',
        "SDK_API = 2\n": f"SDK_API = {SDK_API_VERSION}\n",
        "TemplateBackend": names.cls,
    }
    for old, new in swaps.items():
        if old not in text:  # pragma: no cover  (the template and this table go together)
            raise ScaffoldError(f"the backend template lost its marker {old!r}")
        text = text.replace(old, new)
    return text


def render(names: BackendNames) -> dict[str, str]:
    """Relative path -> text of every file of the package."""
    from glow_core import __version__ as glow_version

    fields = {"name": names.name, "dist": names.dist, "package": names.package, "cls": names.cls,
              "sdk": SDK_API_VERSION, "glow": glow_version, "core_dist": CORE_DISTRIBUTION,
              "core_req": core_requirement(SDK_API_VERSION)}
    pkg = names.package
    return {
        "pyproject.toml": templates.PYPROJECT.format(**fields),
        "README.md": templates.README.format(**fields),
        f"{pkg}/__init__.py": templates.INIT.format(**fields),
        f"{pkg}/plugin.py": templates.PLUGIN.format(**fields),
        f"{pkg}/backend.py": render_backend_module(names),
        f"{pkg}/kernels.py": (_HERE / "kernels.py").read_text(),
        f"{pkg}/conformance_waivers.txt": templates.WAIVERS.format(**fields),
        "tests/test_conformance.py": templates.TEST_CONFORMANCE.format(**fields),
        "tests/test_kernels.py": templates.TEST_KERNELS.format(**fields),
    }


def new_backend(name: str, dest: str | Path | None = None) -> Scaffold:
    """Write the package of backend ``name`` into ``dest`` (default ``./glow-backend-NAME``), which must not
    exist or be empty."""
    names = BackendNames.of(name)
    root = Path(dest) if dest is not None else Path(names.dist)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ScaffoldError(f"'{root}' already exists and is not an empty directory",
                            hint="choose another directory, or remove it first")
    out = Scaffold(names, root)
    try:
        for rel, text in render(names).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            out.files.append(path)
    except OSError as e:
        raise ScaffoldError(f"cannot write the package into '{root}': {e.strerror or e}") from None
    return out


__all__ = ["BackendNames", "Scaffold", "ScaffoldError", "new_backend", "render"]
