"""External tensor data, read only from inside the model's folder, whatever changes in it meanwhile.

A location is opened component by component relative to a directory handle
(``os.open`` with ``dir_fd``, i.e. ``openat``): the model's folder is opened
once; every folder on the way with ``O_DIRECTORY | O_NOFOLLOW``, the file with
``O_NOFOLLOW | O_NONBLOCK``, each relative to the handle of the folder before.
No component is looked up by a path string after it was checked, so a folder
swapped for a symbolic link to an outside folder between two loads (or during
one) is refused (``ELOOP`` / ``ENOTDIR``), never followed. The location is
normalized as text first (``a/../b`` is ``b``); one that leaves the folder
(``..``, an absolute path) is refused before anything is opened, and so is a
symbolic link anywhere in it, even one that stays inside. What was opened is
then checked by ``fstat``: a regular file with one link (a FIFO is opened
without blocking and refused; a hard link may be a file outside).
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from pathlib import Path

import onnx

from glow_core import budget
from glow_core.errors import ModelError, UnsupportedError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
KEEP_NEXT_TO_MODEL = "keep external data files next to the model"


def _components(t: onnx.TensorProto, loc: str) -> list[str]:
    """The location's components below the model's folder, or ModelError when it names no file inside."""
    if not loc or "\0" in loc:
        raise ModelError(f"tensor '{t.name}': external data location {loc!r} is not a relative file name; refused",
                         hint=KEEP_NEXT_TO_MODEL)
    norm = posixpath.normpath(loc.replace("\\", "/"))
    if os.path.isabs(loc) or posixpath.isabs(norm) or norm == ".." or norm.startswith("../") or norm == ".":
        raise ModelError(f"tensor '{t.name}' points at external data '{loc}' outside the model's directory; refused",
                         hint=KEEP_NEXT_TO_MODEL)
    return norm.split("/")


def _refusal(t: onnx.TensorProto, loc: str, err: OSError, last: bool) -> ModelError:
    """A clean error for an ``openat`` that failed on a component (never a bare OSError)."""
    code = err.errno
    if code == errno.ENOENT:
        return ModelError(f"tensor '{t.name}': external data file '{loc}' is missing")
    if code == errno.ELOOP or (code == errno.ENOTDIR and not last):
        return ModelError(f"tensor '{t.name}': external data '{loc}' passes through a symbolic link or a file where "
                          "a folder should be; refused, since it may lead outside the model's directory",
                          hint=KEEP_NEXT_TO_MODEL + ", in plain folders")
    if code == errno.EISDIR:
        return ModelError(f"tensor '{t.name}': external data '{loc}' is not a regular file (a folder); refused")
    return ModelError(f"tensor '{t.name}': cannot open external data file '{loc}': {err.strerror}")


def open_component(name: str, flags: int, dir_fd: int) -> int:
    """``openat(dir_fd, name, flags)``: one component (a seam for the tests)."""
    return os.open(name, flags | _CLOEXEC, dir_fd=dir_fd)


@contextlib.contextmanager
def open_beneath(t: onnx.TensorProto, loc: str, base: Path) -> Iterator[int]:
    """A read-only descriptor of ``loc`` opened beneath the folder ``base`` (see the module doc)."""
    if os.open not in os.supports_dir_fd:  # pragma: no cover  (every POSIX system has openat)
        raise UnsupportedError("external tensor data needs openat (os.open with dir_fd), which this platform lacks")
    parts = _components(t, loc)
    try:
        fd = os.open(str(base), os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError as e:
        raise ModelError(f"tensor '{t.name}': cannot open the model's directory '{base}': {e.strerror}") from None
    try:
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            flags = os.O_RDONLY | _NOFOLLOW | (_NONBLOCK if last else _DIRECTORY)
            try:
                child = open_component(part, flags, fd)
            except OSError as e:
                raise _refusal(t, loc, e, last) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _read_at(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes from ``offset`` (fewer at the end of the file), in reads of at most 1 GiB."""
    chunks: list[bytes] = []
    done = 0
    while done < length:
        chunk = os.pread(fd, min(length - done, 1 << 30), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def read_external(t: onnx.TensorProto, base: Path) -> bytes:
    """The bytes of an external tensor, after checking the location, the file, the offset and the length."""
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise ModelError(f"tensor '{t.name}': external data offset/length are not integers") from None
    with open_beneath(t, loc, base) as fd:
        st = os.fstat(fd)  # what was opened, not what a name pointed at before
        if not stat.S_ISREG(st.st_mode):
            raise ModelError(f"tensor '{t.name}': external data '{loc}' is not a regular file (a FIFO, a device or "
                             "a folder); refused", hint="keep external data in regular files next to the model")
        if st.st_nlink > 1:  # a hard link may reach a file outside the directory: no way to tell
            raise ModelError(f"tensor '{t.name}': external data file '{loc}' has {st.st_nlink} hard links; refused, "
                             "since one may be a file outside the model's directory",
                             hint="copy the data file instead of hard-linking it")
        size = st.st_size
        if length is None:
            length = size - offset
        if not (0 <= offset <= size and 0 <= length <= size - offset):
            raise ModelError(f"tensor '{t.name}': external data offset {offset} and length {length} fall outside "
                             f"'{loc}' ({size} bytes)", hint="the model or its data file is corrupt")
        budget.current().check_tensor((length,), 1, f"tensor '{t.name}'", "external data")
        raw = _read_at(fd, length, offset)
    if len(raw) != length:
        raise ModelError(f"tensor '{t.name}': external data file '{loc}' ended early")
    return raw


def load_external_data(tensors: list[onnx.TensorProto], base: Path) -> None:
    """Read every external tensor of ``tensors`` (the model's, subgraphs' included) into the model."""
    for t in tensors:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        t.raw_data = read_external(t, base)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
