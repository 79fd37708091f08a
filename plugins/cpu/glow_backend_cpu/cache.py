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

An entry is three files named by the key in ``$GLOW_CACHE_DIR`` (default
``~/.cache/glow/cpu``): ``KEY.o`` (object code), ``KEY.json`` (the region
layout) and ``KEY.bin`` (the constants emitters packed at compile time, an
image of the packed-constant region, mapped read-only into memory on a hit).
Files are written to a temporary name and renamed, so a reader never sees a
half-written entry; an unreadable entry is a miss. ``GLOW_CPU_CACHE=0``
disables the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from glow_backend_cpu.codegen import Layout
from glow_core.ir.graph import Function

ENV_DIR = "GLOW_CACHE_DIR"
ENV_ENABLE = "GLOW_CPU_CACHE"
FORMAT = 2


def enabled() -> bool:
    return os.environ.get(ENV_ENABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    base = os.environ.get(ENV_DIR, "")
    root = Path(base) if base else Path.home() / ".cache" / "glow"
    return root / "cpu"


@functools.lru_cache(maxsize=1)
def sources_digest() -> str:
    """A digest of the backend's and the LIR's source files (the LIR data types and the core's LIR compiler)."""
    import glow_backend_cpu
    import glow_core.lir

    h = hashlib.sha256()
    lir_root = Path(str(glow_core.lir.__file__)).resolve().parent
    # the LIR compiler (glow_core/lircompiler, beside glow_core/lir) is read as files: backends do not import it
    for root in (Path(str(glow_backend_cpu.__file__)).resolve().parent, lir_root, lir_root.parent / "lircompiler"):
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def key(function: Function, options: Mapping[str, Any], identity: str) -> str:
    import glow_backend_cpu
    import glow_core

    h = hashlib.sha256()
    h.update(f"format {FORMAT}|glow {glow_core.__version__}|cpu {glow_backend_cpu.__version__}|".encode())
    h.update(sources_digest().encode())
    h.update(identity.encode())
    h.update(json.dumps({k: repr(v) for k, v in sorted(options.items())}).encode())
    h.update(function.dump().encode())
    for c in function.constants:
        h.update(f"|{c.name}:{c.type}|".encode())
        h.update(np.ascontiguousarray(c.payload).reshape(-1).view(np.uint8).tobytes())
    return h.hexdigest()


def _layout_to_json(layout: Layout) -> dict[str, Any]:
    d = dict(layout.__dict__)
    d["packed"] = [[off, len(data)] for off, data in layout.packed]
    d["io"] = [list(x) for x in layout.io]
    return d


def _layout_from_json(d: dict[str, Any]) -> Layout:
    d["packed"] = []  # the packed constants come from the image file
    d["io"] = [(r, n, dt, tuple(s)) for r, n, dt, s in d["io"]]
    return Layout(**d)


def packed_image(layout: Layout) -> bytes:
    """The packed-constant region as the runtime lays it out (the emitters' constants at their offsets)."""
    buf = bytearray(layout.packed_bytes)
    for off, data in layout.packed:
        buf[off:off + len(data)] = data
    return bytes(buf)


def load(k: str) -> tuple[bytes, Layout, Path] | None:
    """The object code and layout stored under ``k``, and the path of the packed-constant image; or None."""
    d = cache_dir()
    try:
        meta = json.loads((d / f"{k}.json").read_text())
        obj = (d / f"{k}.o").read_bytes()
        image = d / f"{k}.bin"
        layout = _layout_from_json(meta)
        if image.stat().st_size != layout.packed_bytes:
            return None
        return obj, layout, image
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store(k: str, object_code: bytes, layout: Layout) -> bool:
    """Store an entry (the metadata last, so a complete .json means a complete entry); False on failure."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        _write(d / f"{k}.o", object_code)
        _write(d / f"{k}.bin", packed_image(layout))
        meta = _layout_to_json(layout)
        _write(d / f"{k}.json", json.dumps(meta).encode())
        return True
    except OSError:
        return False
