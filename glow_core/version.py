"""The version of the ``glow-compiler`` distribution: ``0.<SDK API version>.<patch>`` (glow_sdk.version), and
:func:`sources_digest`, the identity of the source files a cache key depends on.

A module of its own, at the bottom of the layers, so that anything (the program cache, a backend's
cache key) can read the version without importing the package root and the API behind it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__version__ = "0.2.0"


def sources_digest(*roots: Path) -> str:
    """A digest of the ``*.py`` files under ``roots``: each file's path, size, modification and change times
    and inode.

    One ``stat`` per file and no read (a fresh process computes it before a cache hit: reading and hashing
    the sources took longer than loading the cached program). Writing a file sets its change time, which no
    program can set back, and replacing it (an editor's save, a checkout) gives it a new inode, so an edited
    source never matches a digest taken before the edit.
    """
    h = hashlib.sha256()
    for i, root in enumerate(roots):
        h.update(f"|root {i}|".encode())
        base = len(str(root)) + 1
        for d, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(d, name)
                    st = os.stat(path)
                    h.update(f"{path[base:]}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}\n".encode())
    return h.hexdigest()
