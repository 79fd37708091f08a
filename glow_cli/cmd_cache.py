"""``glow cache info|clear [--backend NAME]``: the backends' on-disk caches.

The core owns the cache root (``glow_sdk.backend.cache_root()``:
``$GLOW_CACHE_DIR`` or ``~/.cache/glow``) and hands backend NAME the folder
``ROOT/NAME`` (``Backend.cache_dir()``). Backends are reached through the
contract only: ``Backend.cache_info()`` and ``Backend.clear_cache()`` (whose
defaults measure / empty that folder; the cpu backend reports its entries and
LRU limit). Folders under the root that belong to no installed backend are
listed by ``info`` and left alone by ``clear``. The core's own folder, the program
cache's remembered model digests (``ROOT/.model-digests``, glow_core/compilecache.py),
is listed by ``info`` and emptied by ``clear`` without ``--backend``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glow_cli.common import Command
from glow_core import compilecache
from glow_core.errors import GlowError
from glow_core.plugin_host import describe_exception, registry
from glow_sdk.backend import CACHE_DIR_ENV, CACHE_MAX_ENV, CacheInfo, cache_root, measure_cache_dir

HEADER = ("BACKEND", "ENTRIES", "BYTES", "SIZE", "LIMIT", "PATH")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("info", "clear"), metavar="ACTION",
                   help="info: location, entries, bytes and limit per backend; clear: empty the caches")
    p.add_argument("-b", "--backend", metavar="NAME", default=None,
                   help="only this backend's cache (default: every installed backend)")


def human(n: int) -> str:
    """Bytes in binary units: ``0 B``, ``512 B``, ``1.5 KiB``, ``1.0 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _names(backend: str | None) -> list[str]:
    if backend is None:
        return registry().names()
    registry().get(backend)  # "unknown backend ...; choose one of" in one line
    return [backend]


def _info(name: str) -> CacheInfo:
    try:
        return registry().get(name).cache_info()
    except GlowError:
        raise
    except Exception as e:  # noqa: BLE001  (a broken backend must not break the listing)
        raise GlowError(f"backend '{name}': cache_info() raised {describe_exception(e)}") from e


def _others(root: Path, names: set[str]) -> list[Path]:
    """Folders under the root that no installed backend owns."""
    try:
        return sorted(p for p in root.iterdir()
                      if p.is_dir() and p.name not in names and p.name != compilecache.DIGESTS_DIR)
    except OSError:
        return []


def info(backend: str | None) -> int:
    root = cache_root()
    print(f"cache root: {root} (${CACHE_DIR_ENV}; limit per backend: ${CACHE_MAX_ENV})")
    rows = []
    for name in _names(backend):
        try:
            ci = _info(name)
        except GlowError as e:
            rows.append((name, "-", "-", "-", "-", f"(unavailable: {e.one_line()})"))
            continue
        rows.append((name, str(ci.entries), str(ci.bytes), human(ci.bytes),
                     human(ci.limit) if ci.limit is not None else "-", str(ci.path)))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    for row in [HEADER, *rows]:
        print("  ".join(c.rjust(w) if i in (1, 2) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
              .rstrip())
    if backend is None:
        if compilecache.digests_dir().is_dir():
            files, size = measure_cache_dir(compilecache.digests_dir())
            print(f"model digests (the program cache's): {compilecache.digests_dir()}  {files} files, {size} bytes")
        others = _others(root, set(registry().names()))
        if others:
            print("other folders (no installed backend owns them; 'glow cache clear' leaves them alone):")
            for p in others:
                files, size = measure_cache_dir(p)
                print(f"  {p}  {files} files, {size} bytes ({human(size)})")
    return 0


def clear(backend: str | None) -> int:
    entries = freed = 0
    for name in _names(backend):
        try:
            n, size = registry().get(name).clear_cache()
        except GlowError:
            raise
        except OSError as e:
            raise GlowError(f"cannot clear the cache of backend '{name}': {e.strerror or e} ({e.filename})") from e
        except Exception as e:  # noqa: BLE001
            raise GlowError(f"backend '{name}': clear_cache() raised {describe_exception(e)}") from e
        print(f"{name}: removed {n} entries, {size} bytes ({human(size)})")
        entries += n
        freed += size
    if backend is None:
        files, size = compilecache.clear_digests()
        if files:
            print(f"model digests: removed {files} files, {size} bytes")
        freed += size
        print(f"all: removed {entries} entries, {freed} bytes ({human(freed)})")
    return 0


def run(args: argparse.Namespace) -> int:
    return info(args.backend) if args.action == "info" else clear(args.backend)


COMMAND = Command(
    name="cache",
    help="show or clear the backends' on-disk caches",
    description="Show (info) or empty (clear) the on-disk caches of the installed backends. Each backend caches "
                f"under ${CACHE_DIR_ENV}/NAME (default ~/.cache/glow/NAME); the cpu backend keeps its object cache "
                f"under ${CACHE_MAX_ENV} (default 1 GiB) by evicting the least recently used entries.",
    epilog="examples:\n  glow cache info\n  glow cache clear --backend cpu\n  glow cache clear",
    add_arguments=add_arguments,
    run=run,
)
