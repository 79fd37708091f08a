"""A content-addressed on-disk cache of compiled object code.

The key is a SHA-256 over everything the object code depends on:

- the prepared graph function (its printed text) and every constant's name,
  type and bytes;
- the compile options that change code;
- the host: triple, CPU name and features, optimization level, llvmlite and
  LLVM versions (``Codegen.identity``);
- the versions of glow and of this backend, and a digest of the sources of
  this backend and of the low-level IR (so editing a kernel emitter never
  serves stale code).

An entry is three files named by the key in the backend's cache folder,
``glow_sdk.backend.cache_root() / "cpu"`` (``$GLOW_CACHE_DIR/cpu``, default
``~/.cache/glow/cpu``): ``KEY.o`` (the object code: the objects of the parts
of a parallel compile back to back), ``KEY.json`` (the region layout, the size of
each object, a SHA-256 of the object code and one of the metadata itself) and ``KEY.bin`` (the constants emitters packed at compile time, an
image of the packed-constant region, mapped read-only into memory on a hit).
Files are written to a temporary name and renamed, the metadata last, so a
reader never sees a half-written entry; an unreadable, vanished, truncated or
otherwise damaged entry (a digest or size that does not match) is a miss: the
object code is checked before LLVM's loader sees it. ``GLOW_CPU_CACHE=0`` disables the cache.

The program cache's entries (``programs.py``: ``p-KEY.json`` and
``p-KEY.bin``) share the folder, the bound and the eviction below.

Bound: the folder is kept under ``GLOW_CACHE_MAX_BYTES`` (default 1 GiB) by
evicting the least recently used entries (a hit touches ``KEY.json``, whose
modification time is the entry's last use). An entry larger than the limit is
not stored. A process scans the folder on its first store and then whenever
it has stored another sixteenth of the limit, so concurrent processes may
overshoot by that much each between scans. Eviction is safe against other
processes: it removes ``KEY.json`` first (the entry becomes a miss), tolerates
files that vanish, and leaves alone incomplete entries and temporary files
younger than :data:`GRACE_SECONDS` (a write in progress elsewhere).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glow_backend_cpu import regions
from glow_backend_cpu.codegen import RELEASE_EVERY, Layout
from glow_backend_cpu.spill import PackedSpill
from glow_core import budget, version
from glow_core.ir.graph import Function

from glow_sdk.backend import CACHE_DIR_ENV, CacheInfo, cache_max_bytes, cache_root

ENV_DIR = CACHE_DIR_ENV
ENV_ENABLE = "GLOW_CPU_CACHE"
#: 3: several objects per entry (the parts of a parallel compile) and digests of the object code and metadata
FORMAT = 3
#: the files of one entry; the metadata (written last, removed first) marks a complete entry
META, OBJECT, IMAGE = ".json", ".o", ".bin"
SUFFIXES = (META, OBJECT, IMAGE)
TEMP_SUFFIX = ".tmp"
#: incomplete entries and temporary files younger than this may be a write in progress elsewhere
GRACE_SECONDS = 600.0
#: a process scans the folder again after storing this fraction of the limit
SCAN_FRACTION = 16

_scan_lock = threading.Lock()
#: bytes this process stored since its last scan (-1: none yet, the first store scans)
_stored_since_scan = -1


def enabled() -> bool:
    return os.environ.get(ENV_ENABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    return cache_root() / "cpu"


def max_bytes() -> int:
    """The size limit of the folder (``GLOW_CACHE_MAX_BYTES``, default 1 GiB)."""
    return cache_max_bytes()


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """A digest of the backend's and the LIR's source files (the LIR data types and the core's LIR compiler)."""
    import glow_backend_cpu
    import glow_core.lir

    lir_root = Path(str(glow_core.lir.__file__)).resolve().parent
    # the LIR compiler (glow_core/lircompiler, beside glow_core/lir) is read as files: backends do not import it
    return version.sources_digest(Path(str(glow_backend_cpu.__file__)).resolve().parent, lir_root,
                                  lir_root.parent / "lircompiler")


def key(function: Function, options: Mapping[str, Any], identity: str) -> str:
    import glow_backend_cpu
    import glow_core.version

    h = hashlib.sha256()
    h.update(f"format {FORMAT}|glow {glow_core.version.__version__}|cpu {glow_backend_cpu.__version__}|".encode())
    h.update(sources_digest().encode())
    h.update(identity.encode())
    h.update(json.dumps({k: repr(v) for k, v in sorted(options.items())}).encode())
    h.update(function.dump().encode())
    hashed = 0
    for c in function.constants:
        h.update(f"|{c.name}:{c.type}|".encode())
        h.update(memoryview(np.ascontiguousarray(c.payload).reshape(-1).view(np.uint8)))  # no copy
        hashed += c.payload.nbytes
        if hashed >= RELEASE_EVERY:  # (weights of a mapped model file: their pages need not stay resident)
            budget.release_pages()
            hashed = 0
    return h.hexdigest()


def _layout_to_json(layout: Layout) -> dict[str, Any]:
    d = dict(layout.__dict__)
    d["packed_digest"] = regions.packed_digest(layout)  # (a hit shares the region by it: regions.py)
    d["packed"] = [[off, len(data)] for off, data in layout.packed]
    d["io"] = [list(x) for x in layout.io]
    return d


def _layout_from_json(d: dict[str, Any]) -> Layout:
    d["packed"] = []  # the packed constants come from the image file
    d["io"] = [(r, n, dt, tuple(s)) for r, n, dt, s in d["io"]]
    d["packed_chunks"] = [(int(o), int(n), str(h)) for o, n, h in d.get("packed_chunks", [])]
    digest = d.pop("packed_digest", None)
    layout = Layout(**d)
    regions.remember_digest(layout, digest)
    return layout


def meta_check(meta: Mapping[str, Any]) -> str:
    """The digest of the metadata (every field but ``check``), stored in it: a damaged file is a miss."""
    body = json.dumps({k: v for k, v in meta.items() if k != "check"}, sort_keys=True).encode()
    return hashlib.sha256(body).hexdigest()


def _split_objects(meta: Mapping[str, Any], code: bytes) -> list[bytes] | None:
    """The objects of an entry's object file, when its sizes and digest match the metadata; else None."""
    sizes = meta.get("objects")
    if not isinstance(sizes, list) or not sizes or not all(type(n) is int and n > 0 for n in sizes):
        return None
    if sum(sizes) != len(code) or hashlib.sha256(code).hexdigest() != meta.get("sha256"):
        return None
    out, off = [], 0
    for n in sizes:
        out.append(code[off:off + n])
        off += n
    return out


def load(k: str) -> tuple[list[bytes], Layout, Path] | None:
    """The objects and layout stored under ``k``, and the path of the packed-constant image; or None."""
    d = cache_dir()
    try:
        meta_path = d / f"{k}{META}"
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("check") != meta_check(meta):
            return None
        objects = _split_objects(meta, (d / f"{k}{OBJECT}").read_bytes())
        if objects is None:
            return None
        image = d / f"{k}{IMAGE}"
        layout = _layout_from_json(meta["layout"])
        if image.stat().st_size != layout.packed_bytes:
            return None
        os.utime(meta_path)  # the entry's last use, for LRU eviction
        return objects, layout, image
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # a vanished (evicted) or damaged entry
        return None


def write_atomic(path: Path, data: bytes | memoryview | Layout) -> None:
    """Write ``data`` (bytes, or a layout's packed-constant image) to a temporary name, then rename it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, Layout):  # each packed constant at its offset: no image assembled in memory
                f.truncate(data.packed_bytes)
                for off, chunk in data.packed:
                    f.seek(off)
                    f.write(chunk)
            else:
                f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def image_path(k: str) -> Path:
    """Where the entry ``k`` keeps its packed-constant image."""
    return cache_dir() / f"{k}{IMAGE}"


def store_image(k: str, layout: Layout, spill: PackedSpill | None = None) -> bool:
    """Write the packed-constant image of entry ``k`` ahead of the rest of it (a parallel compile does it while
    it waits for its workers); False when it is not written (:func:`store` then writes it). Until the metadata is
    written the entry is incomplete: a miss, and a leftover for eviction if the rest never comes. ``spill``: the
    file the constants were written to as they were packed, renamed to the image (``spill.py``)."""
    if not layout.packed_bytes or layout.packed_bytes > max_bytes():
        return False
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        _write_image(k, layout, spill)
    except OSError:
        return False
    return True


def _write_image(k: str, layout: Layout, spill: PackedSpill | None) -> None:
    """The packed-constant image of entry ``k``: the spill file renamed (``spill.py``), else written from the
    layout."""
    if spill is None or not spill.publish(image_path(k)):
        write_atomic(image_path(k), layout)


def store(k: str, objects: list[bytes], layout: Layout, *, image_written: bool = False,
          spill: PackedSpill | None = None) -> bool:
    """Store an entry (the metadata last, so a complete .json means a complete entry); False when it is not stored.

    An entry larger than the limit is not stored; storing may evict the least
    recently used entries of the folder. ``image_written``: :func:`store_image` wrote the image already;
    ``spill``: else the file the packed constants were written to, renamed to the image (``spill.py``).
    """
    d = cache_dir()
    code = b"".join(objects)
    meta_d: dict[str, Any] = {"format": FORMAT, "layout": _layout_to_json(layout),
                              "objects": [len(o) for o in objects], "sha256": hashlib.sha256(code).hexdigest()}
    meta_d["check"] = meta_check(meta_d)
    meta = json.dumps(meta_d).encode()
    size = len(code) + layout.packed_bytes + len(meta)
    limit = max_bytes()
    try:
        if size > limit:
            if image_written:
                image_path(k).unlink(missing_ok=True)
            return False
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / f"{k}{OBJECT}", code)
        if not image_written:
            _write_image(k, layout, spill)
        write_atomic(d / f"{k}{META}", meta)
    except OSError:
        return False
    after_store(size, limit)
    return True


def after_store(size: int, limit: int) -> None:
    """Evict on this process's first store, then after every ``limit / SCAN_FRACTION`` bytes it stored."""
    global _stored_since_scan
    with _scan_lock:
        first = _stored_since_scan < 0
        _stored_since_scan = max(_stored_since_scan, 0) + size
        if not first and _stored_since_scan < limit // SCAN_FRACTION:
            return
        _stored_since_scan = 0
    evict(limit)


@dataclass
class _Entry:
    key: str
    #: suffix -> (size, mtime) of the files present
    files: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return META in self.files

    @property
    def size(self) -> int:
        return sum(sz for sz, _ in self.files.values())

    @property
    def last_use(self) -> float:
        return self.files[META][1] if self.complete else max(t for _, t in self.files.values())


def _scan(d: Path) -> tuple[dict[str, _Entry], list[tuple[Path, int, float]]]:
    """The entries of the folder by key, and its temporary files (path, size, mtime); vanishing files skipped."""
    entries: dict[str, _Entry] = {}
    temps: list[tuple[Path, int, float]] = []
    try:
        listing = list(os.scandir(d))
    except OSError:
        return entries, temps
    for item in listing:
        try:
            st = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if item.name.endswith(TEMP_SUFFIX):
            temps.append((Path(item.path), st.st_size, st.st_mtime))
            continue
        stem, dot, suffix = item.name.rpartition(".")
        if dot and "." + suffix in SUFFIXES:
            entries.setdefault(stem, _Entry(stem)).files["." + suffix] = (st.st_size, st.st_mtime)
    return entries, temps


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:  # another process removed it first
        return False
    except OSError:
        return False


def _remove(d: Path, entry: _Entry) -> None:
    for suffix in SUFFIXES:  # META first: from then on the entry is a miss for every reader
        if suffix in entry.files:
            _unlink(d / f"{entry.key}{suffix}")


def evict(limit: int | None = None) -> tuple[int, int]:
    """Bring the folder under ``limit`` bytes (default :func:`max_bytes`); (entries, bytes) removed.

    Stale leftovers go first (incomplete entries and temporary files older
    than :data:`GRACE_SECONDS`), then complete entries, least recently used
    first, until the folder fits.
    """
    limit = max_bytes() if limit is None else limit
    d = cache_dir()
    entries, temps = _scan(d)
    total = sum(e.size for e in entries.values()) + sum(sz for _, sz, _ in temps)
    removed = freed = 0
    stale = time.time() - GRACE_SECONDS
    for path, sz, mtime in temps:
        if mtime < stale and _unlink(path):
            total -= sz
            freed += sz
    for e in [e for e in entries.values() if not e.complete and e.last_use < stale]:
        _remove(d, e)
        total -= e.size
        freed += e.size
    for e in sorted((e for e in entries.values() if e.complete), key=lambda e: e.last_use):
        if total <= limit:
            break
        _remove(d, e)
        total -= e.size
        freed += e.size
        removed += 1
    return removed, freed


def info() -> CacheInfo:
    """The folder, its complete entries, its bytes (everything in it) and the limit."""
    d = cache_dir()
    entries, temps = _scan(d)
    total = sum(e.size for e in entries.values()) + sum(sz for _, sz, _ in temps) + \
        sum(sz for _, sz in _support_files(d))
    return CacheInfo(d, sum(1 for e in entries.values() if e.complete), total, max_bytes())


def _support_files(d: Path) -> list[tuple[Path, int]]:
    """The run-time support's cached object code (``support.py``: no entry, a few KiB per host), with sizes."""
    out = []
    try:
        listing = list(os.scandir(d / "support"))
    except OSError:
        return out
    for item in listing:
        try:
            out.append((Path(item.path), item.stat(follow_symlinks=False).st_size))
        except OSError:
            continue
    return out


def clear() -> tuple[int, int]:
    """Remove every entry, temporary file and cached support object; (complete entries, bytes) removed."""
    d = cache_dir()
    entries, temps = _scan(d)
    removed = sum(1 for e in entries.values() if e.complete)
    freed = 0
    for e in entries.values():
        _remove(d, e)
        freed += e.size
    for path, sz, _ in temps:
        if _unlink(path):
            freed += sz
    for path, sz in _support_files(d):
        if _unlink(path):
            freed += sz
    try:
        os.rmdir(d / "support")
    except OSError:
        pass
    return removed, freed
