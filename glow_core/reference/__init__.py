"""Reference semantics: the numpy kernel of every node kind, on host arrays.

``run_kernel(kind, attrs, inputs, out_types, where)`` evaluates one node with
the table :data:`KERNELS` (``glow_core/reference/kernels/``) and checks that the
results have exactly the declared element kinds and shapes. Constant folding
(the importer and the ``fold-constants`` pass) calls it directly, so folding
needs no backend installed; the interpreter backend is a thin backend over it.

This package imports only ``glow_core.errors``, ``glow_core.budget`` (kernels check their large
temporaries against the memory budget before making them) and ``glow_core.ir``; its public
surface is part of the SDK contract (see ``glow_sdk.version``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.errors import BudgetError, ExecutionError, IndexRangeError, UnsupportedError
from glow_core.ir.types import TensorType
from glow_core.reference.kernels import KERNELS


def run_kernel(kind: str, attrs: Mapping[str, Any], args: Sequence[np.ndarray | None],
               out_types: Sequence[TensorType], where: str) -> list[np.ndarray]:
    """Evaluate one node of ``kind`` on host arrays; ``where`` names it in errors."""
    fn = KERNELS.get(kind)
    if fn is None:
        raise UnsupportedError(f"{where}: the reference has no kernel for {kind}")
    try:
        with np.errstate(all="ignore"):
            res = fn(attrs, out_types, *args)
    except IndexRangeError as e:
        e.add_context(where)
        raise
    except (UnsupportedError, ExecutionError):
        raise
    except BudgetError as e:  # a kernel's temporaries over the budget (checked before they are made)
        e.add_context(where)
        raise
    except MemoryError:
        raise BudgetError(f"{where}: out of memory computing it",
                          hint="lower GLOW_MAX_TOTAL_BYTES below the memory this machine has") from None
    except Exception as e:  # noqa: BLE001
        raise ExecutionError(f"{where}: kernel failed: {type(e).__name__}: {e}") from e
    results = list(res) if isinstance(res, (tuple, list)) else [res]
    if len(results) != len(out_types):
        raise ExecutionError(f"{where}: kernel returned {len(results)} results, expected {len(out_types)}")
    out: list[np.ndarray] = []
    for r, t in zip(results, out_types):
        a = np.asarray(r)
        if a.dtype != t.dtype or tuple(a.shape) != t.shape:
            raise ExecutionError(f"{where}: kernel returned {a.dtype}{list(a.shape)}, declared {t}")
        out.append(a)
    return out


__all__ = ["KERNELS", "run_kernel"]
