"""The program cache: a compile served before the model is even imported.

The backend's object cache (``glow_backend_cpu/cache.py``) is keyed by the
*prepared* function, so a hit there still pays for the ONNX import, the graph
passes and lowering. This level sits in front of all of that: its key is a
SHA-256 over

- the bytes of the model file (their SHA-256, which is remembered by the file's stat signature: see
  :func:`file_digest`);
- the compile options (``input_shapes``, ``debug``, the backend ``options``);
- the core: glow's version, onnx's and numpy's versions, and a digest of the
  sources of ``glow_core`` and ``glow_sdk`` (an edited pass never serves a stale
  program);
- the backend's :meth:`~glow_sdk.backend.Backend.program_identity`: its name,
  version and sources, the host's CPU and features, settings read from the
  environment. A backend that returns None keeps no program cache.

On a hit the backend rebuilds the executable from what it stored (the cpu
backend: the object entry, the constant region, the flags) and the core rebuilds
the function's interface (inputs, outputs, their types) from the ``info`` it
stored with it; the network's ``function`` then has inputs and outputs but no
nodes or constants (``stats.nodes_by_kind`` is the stored count). A miss is
never an error: the compile runs as usual and stores the program afterwards.

Only plain compiles are served: a model given by path (or ``zoo:NAME``) that
keeps no tensor data in external files, without ``bind``, ``quantize`` or
``devices``, and without run-time control flow or sequence/optional outputs.
``GLOW_PROGRAM_CACHE=0`` turns this level off (the backend's own switches, such
as ``options={"cache": False}``, turn off both).
"""

from __future__ import annotations

import functools
import hashlib
import json
import mmap
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from glow_core.ir.graph import Function, Value
from glow_core.ir.types import ElemKind, TensorType
from glow_sdk.backend import Backend, CompiledFunction, CompileOptions, cache_root

ENV = "GLOW_PROGRAM_CACHE"
#: the layout of ``info``; part of the key
INFO_FORMAT = 1


#: model files at least this large are hashed through a mapping, not read into memory
MAPPED_HASH_BYTES = 32 << 20
HASH_CHUNK = 32 << 20


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=1)
def core_digest() -> str:
    """glow's, onnx's and numpy's versions and a digest of the sources of ``glow_core`` and ``glow_sdk``."""
    import glow_core.version
    import glow_sdk

    h = hashlib.sha256(f"glow {glow_core.version.__version__}|onnx {onnx.__version__}|numpy {np.__version__}|"
                       f"info {INFO_FORMAT}|".encode())
    # the package folders (found from modules that import nothing above this layer)
    h.update(glow_core.version.sources_digest(*(Path(str(m.__file__)).resolve().parent
                                                for m in (glow_core.version, glow_sdk))).encode())
    return h.hexdigest()


def program_key(model: Any, be: Backend, options: CompileOptions,
                shapes: Mapping[str, Any] | None) -> tuple[str | None, bytes | None]:
    """The key of this compile (None when it is not one this level serves, or the backend keeps none) and
    the model file's bytes when they were read for it (the import parses them instead of the file)."""
    if not enabled() or not isinstance(model, (str, os.PathLike)):
        return None, None
    if shapes and not all(isinstance(s, tuple) for s in shapes.values()):
        return None, None  # sequence / optional input shapes
    try:
        identity = be.program_identity(options)
        if identity is None:
            return None, None
        h = hashlib.sha256(core_digest().encode())
        h.update(f"|{be.name}|{identity}|".encode())
        h.update(json.dumps({"shapes": {k: list(v) for k, v in sorted((shapes or {}).items())},
                             "debug": options.debug,
                             "options": {k: repr(v) for k, v in sorted(options.extra.items())}}).encode())
        digest, data = file_digest(Path(model))
        h.update(f"|model {digest}".encode())
    except (OSError, ValueError):
        return None, None
    return h.hexdigest(), data


#: the cache root's folder of model-file digests, one file per stat signature (a leading dot: no backend's
#: folder, whose names never start with one, can be it)
DIGESTS_DIR = ".model-digests"
#: digests kept; past this the older half goes
MAX_DIGESTS = 4096
#: a file whose status changed less than this long ago is hashed every time and not remembered: a write in the
#: same tick of the file system's clock would leave its change time as it was
SETTLE_NS = 2_000_000_000


def file_digest(path: Path) -> tuple[str, bytes | None]:
    """The SHA-256 of the file's bytes, and the bytes when they were read for it (small files; see
    :func:`_hash_file`).

    Hashing a large model took most of a fresh process's cache hit, so the digest is remembered under the
    file's stat signature: its path, device, inode, size, modification and change times. Writing the file
    (in place or by replacing it) changes its change time, which no program can set back, so an edited model
    never matches a digest taken before the edit; a file changed in the last :data:`SETTLE_NS` is hashed
    every time.
    """
    st = path.stat()
    sig = f"{path.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"
    memo = digests_dir() / hashlib.sha256(sig.encode()).hexdigest()
    settled = time.time_ns() - st.st_ctime_ns > SETTLE_NS
    if settled:
        try:
            text = memo.read_text("ascii")
            if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
                return text, None
        except (OSError, ValueError):
            pass
    h = hashlib.sha256()
    data = _hash_file(path, h)
    digest = h.hexdigest()
    if settled:
        _remember(memo, digest)
    return digest, data


def digests_dir() -> Path:
    return cache_root() / DIGESTS_DIR


def clear_digests() -> tuple[int, int]:
    """Remove every remembered model digest (``glow cache clear``); (files, bytes) removed."""
    files = freed = 0
    try:
        listing = list(os.scandir(digests_dir()))
    except OSError:
        return 0, 0
    for item in listing:
        try:
            size = item.stat(follow_symlinks=False).st_size
            os.unlink(item.path)
        except OSError:
            continue
        files += 1
        freed += size
    try:
        os.rmdir(digests_dir())
    except OSError:
        pass
    return files, freed


def _remember(memo: Path, digest: str) -> None:
    """Write ``digest`` to ``memo`` (a temporary name, then renamed); past :data:`MAX_DIGESTS` files the
    older half goes. A folder that cannot be written is no error: the next compile hashes again."""
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(digest)
        os.replace(tmp, memo)
        names = os.listdir(memo.parent)
        if len(names) > MAX_DIGESTS:
            def age(name: str) -> float:
                try:
                    return os.stat(memo.parent / name).st_mtime
                except OSError:
                    return 0.0
            for name in sorted(names, key=age)[:len(names) // 2]:
                os.unlink(memo.parent / name)
    except OSError:
        pass


def _hash_file(path: Path, h: Any) -> bytes | None:
    """Feed the file's bytes to ``h``; return them when the file is small (the import parses them instead of
    reading the file again). A large file is hashed through a read-only mapping whose pages are dropped
    afterwards, so the key costs no copy of the model (importer/mapped.py reads its weights the same way)."""
    if path.stat().st_size < MAPPED_HASH_BYTES:
        data = path.read_bytes()
        h.update(data)
        return data
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            for start in range(0, size, HASH_CHUNK):  # (each chunk's pages dropped once hashed)
                h.update(view[start:start + HASH_CHUNK])
                if hasattr(mmap, "MADV_DONTNEED"):
                    mm.madvise(mmap.MADV_DONTNEED, start, min(HASH_CHUNK, size - start))
            view.release()
    return None


def _type_info(t: TensorType) -> list[Any]:
    return [t.elem.value, list(t.shape), t.scale, t.offset]


def interface_info(fn: Function, nodes_by_kind: Mapping[str, int], proto: onnx.ModelProto) -> dict[str, Any] | None:
    """What the core stores with a program: the function's name, inputs, outputs and node counts; None when
    the function is not one this level serves (structured outputs, tensor data in external files)."""
    if fn.structure or any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        return None
    return {"name": fn.name, "inputs": [[p.name, _type_info(p.type)] for p in fn.inputs],
            "outputs": [[n, _type_info(v.type)] for n, v in fn.outputs],
            "nodes_by_kind": dict(nodes_by_kind)}


def _type_from(info: Any) -> TensorType:
    elem, shape, scale, offset = info
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError("bad shape")
    return TensorType(ElemKind(elem), tuple(shape), scale, offset)


def function_from_info(info: Mapping[str, Any]) -> Function | None:
    """The function interface stored by :func:`interface_info` (inputs and outputs, no nodes); None if malformed."""
    try:
        fn = Function(str(info["name"]))
        for name, t in info["inputs"]:
            fn.add_input(str(name), _type_from(t))
        for name, t in info["outputs"]:
            fn.outputs.append((str(name), Value(str(name), _type_from(t))))
        counts = info["nodes_by_kind"]
        if not isinstance(counts, dict) or not all(type(v) is int for v in counts.values()):
            return None
    except Exception:  # noqa: BLE001  (untrusted input: anything malformed is a miss)
        return None
    return fn


def load(key: str, be: Backend, options: CompileOptions) -> tuple[Function, CompiledFunction, dict[str, int]] | None:
    """The stored program of ``key``: the function interface, the executable and the node counts; or None."""
    infos: list[Mapping[str, Any]] = []

    def interface(info: Mapping[str, Any]) -> Function | None:
        infos.append(info)
        return function_from_info(info)

    try:
        got = be.load_program(key, options, interface)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if got is None or not infos:
        return None
    fn, exe = got
    return fn, exe, dict(infos[-1]["nodes_by_kind"])


def store(key: str, be: Backend, fn: Function, exe: CompiledFunction, nodes_by_kind: Mapping[str, int],
          proto: onnx.ModelProto) -> bool:
    """Store the compiled program under ``key`` (a failure to store is not an error)."""
    info = interface_info(fn, nodes_by_kind, proto)
    if info is None:
        return False
    try:
        return bool(be.store_program(key, info, fn, exe))
    except OSError:
        return False


__all__ = ["ENV", "clear_digests", "core_digest", "digests_dir", "enabled", "file_digest", "function_from_info", "interface_info", "load", "program_key", "store"]
