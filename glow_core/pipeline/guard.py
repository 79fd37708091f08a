"""The one place a backend's failure becomes a ``GlowError`` (compile, bundle, run, partitions).

A backend is third-party code: whatever it raises must reach the user as one line that names the
backend and what it was doing, never as a raw traceback. ``GlowError`` passes through unchanged (the
backend already said what is wrong); ``MemoryError`` becomes a :class:`~glow_core.errors.BudgetError`;
anything else becomes the error class the caller names (``BackendError`` while compiling or writing,
``ExecutionError`` while running), chained to the original for ``--traceback``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from glow_core.errors import BackendError, BudgetError, GlowError

#: the hint of a backend bug
BUG_HINT = "this is a bug in the backend; rerun with --traceback for details"
#: what to do when a backend runs out of memory, by what it was doing
_MEMORY_HINT = "free memory, or lower GLOW_MAX_TOTAL_BYTES"


@contextmanager
def guard_backend(backend: str, doing: str, error: type[GlowError] = BackendError, *,
                  activity: str = "compiling the model", memory_hint: str = _MEMORY_HINT) -> Iterator[None]:
    """Run the block; a non-glow exception from it becomes ``error("backend 'NAME' failed DOING: ...")``.

    ``doing`` completes "failed ...": ``"to compile the model"``, ``"while running"``,
    ``"to compile partition p2 of net"``; ``activity`` completes "ran out of memory ..."
    (``"compiling the model"``, ``"running the network"``).
    """
    try:
        yield
    except GlowError:
        raise
    except MemoryError:
        raise BudgetError(f"backend '{backend}' ran out of memory {activity}", hint=memory_hint) from None
    except Exception as e:  # noqa: BLE001  (a backend bug must surface as a clear error)
        raise error(f"backend '{backend}' failed {doing}: {type(e).__name__}: {e}", hint=BUG_HINT) from e
