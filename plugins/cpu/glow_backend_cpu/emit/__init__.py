"""The kernel emitters of the cpu backend, one module per family, all filling ``context.EMITTERS``.

:func:`load_all` imports them once, in this order:

1. the performance kernels (:data:`FAST_MODULES`: convolution, matrix products,
   pooling with packing and register-blocked micro-kernels), when present;
2. this backend's other families (:data:`MODULES`);
3. the simple, correct fallbacks (:data:`FALLBACK_MODULES`): their ``register_fallbacks()`` registers
   only the kinds nobody registered before (importing such a module registers nothing, so no import
   order lets a fallback take a kind before its fast emitter).
"""

from __future__ import annotations

import importlib
import logging
import threading

log = logging.getLogger("glow.cpu")

FAST_MODULES = ("gemm", "matmul", "dequant", "conv", "pool", "recurrent", "qconv")
MODULES = ("elementwise", "reduce", "movement", "indexing", "softmax", "lrn", "transformer", "detection", "qgeneric",
           "symvalue", "symconv")
FALLBACK_MODULES = ("naive_linalg",)

_lock = threading.Lock()
_loaded = False


def load_all() -> None:
    """Import every emitter module once (a missing performance module is skipped)."""
    global _loaded
    with _lock:
        if _loaded:
            return
        for name in FAST_MODULES:
            try:
                importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{__name__}.{name}":
                    log.warning("cpu emitter module %s failed to import (%s); its kinds use the fallbacks", name, e)
            except Exception as e:  # noqa: BLE001  (a broken fast module must not take the backend down)
                log.warning("cpu emitter module %s failed to import (%s: %s); its kinds use the fallbacks",
                            name, type(e).__name__, e)
        for name in MODULES:
            importlib.import_module(f"{__name__}.{name}")
        for name in FALLBACK_MODULES:
            importlib.import_module(f"{__name__}.{name}").register_fallbacks()
        importlib.import_module(f"{__name__}.symconv").install()  # (again, if it was imported before the kinds)
        _loaded = True
