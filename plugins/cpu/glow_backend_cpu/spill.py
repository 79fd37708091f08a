"""Packed constants written to the cache's image file as they are packed, not held in memory.

A compile packs its weights (GEMM panels, large graph constants: ``LIRCodegen.add_constant``) into the
packed-constant region. Held as bytes until the end of the compile, they made a transformer's compile
peak: BERT-base's 414 MB of panels sat beside the LLVM module and the model file's pages. With the object
cache on, the region is mapped from the entry's image file anyway (``regions.packed_region``), so each
packed constant is written to a temporary file in the cache folder at once (``os.pwrite``: the bytes go to
the page cache, not the process's memory) and its place in ``Layout.packed`` is held by a :class:`Pending`.
:meth:`PackedSpill.finish` maps the finished file read-only and replaces each :class:`Pending` with a view
of it; :meth:`PackedSpill.publish` renames the file to the entry's image (``cache.store_image``), which
nothing then writes again. If the entry is not stored (over the cache's bound, a failed write), the region
is filled from the views as before and :meth:`PackedSpill.close` removes the file.

A write that fails (a full disk) stops the spilling: that constant and the later ones stay in memory.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glow_backend_cpu.codegen import Layout


class Pending:
    """The place of a packed constant written to the spill file (its bytes are read back by ``finish``)."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __len__(self) -> int:
        return self.nbytes


class PackedSpill:
    """A temporary file in ``folder`` holding packed constants at their region offsets."""

    def __init__(self, folder: Path, prefix: str = "packed") -> None:
        self.folder = folder
        self.prefix = prefix
        self.path: Path | None = None
        self._fd = -1
        self._failed = False
        self.published = False

    def _open(self) -> bool:
        if self._fd < 0 and not self._failed:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd, name = tempfile.mkstemp(dir=self.folder, prefix=self.prefix, suffix=".tmp")
            except OSError:
                self._failed = True
                return False
            self._fd, self.path = fd, Path(name)
        return self._fd >= 0

    def put(self, offset: int, data: bytes | memoryview) -> Pending | None:
        """Write ``data`` at ``offset``; the placeholder to keep in ``Layout.packed``, or None when spilling has
        stopped (the caller keeps the bytes)."""
        if not self._open():
            return None
        view = memoryview(data).cast("B")
        try:
            done = 0
            while done < len(view):
                done += os.pwrite(self._fd, view[done:], offset + done)
        except OSError:
            self._failed = True
            return None
        return Pending(len(view))

    def finish(self, layout: Layout) -> None:
        """Size the file to the region and replace every :class:`Pending` of ``layout`` by a read-only view of it."""
        if self._fd < 0:
            return
        pending = [k for k, (_, data) in enumerate(layout.packed) if isinstance(data, Pending)]
        os.ftruncate(self._fd, layout.packed_bytes)
        if not pending:
            return
        try:
            view: memoryview | None = memoryview(mmap.mmap(self._fd, layout.packed_bytes, access=mmap.ACCESS_READ))
        except OSError:  # (no mapping: the bytes are read back instead)
            view = None
        for k in pending:
            off, data = layout.packed[k]
            layout.packed[k] = (off, view[off:off + len(data)] if view is not None else
                                os.pread(self._fd, len(data), off))

    def publish(self, dest: Path) -> bool:
        """Rename the file to ``dest`` (the entry's image); False when there is no complete file to rename."""
        if self._fd < 0 or self._failed or self.path is None:
            return False
        try:
            os.replace(self.path, dest)
        except OSError:
            return False
        self.published = True
        return True

    def close(self) -> None:
        """Close the file, and remove it unless it was published (the views of ``finish`` stay readable)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.path is not None and not self.published:
            try:
                os.unlink(self.path)
            except OSError:
                pass


__all__ = ["PackedSpill", "Pending"]
