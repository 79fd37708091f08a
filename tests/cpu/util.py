"""Helpers of the cpu backend tests: run a node on cpu and on the interpreter, compare with the cpu table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from glow_backend_cpu.tolerances import tolerance

from glow_tools.testing import (
    compare_arrays,
    evaluate_reference,
    feeds_of,
    one_node_function,
    pad_operands,
    prepare_for,
)


def run_cpu(fn: Any, feeds: Mapping[str, np.ndarray], **options: Any) -> dict[str, np.ndarray]:
    from glow_core.pipeline import check_support, compile_options
    from glow_core.plugin_host import get_backend

    be = get_backend("cpu")
    prepare_for(fn, be)
    check_support(fn, be)
    threads = options.pop("threads", None)
    return be.compile(fn, compile_options(threads=threads, extra=options)).execute(dict(feeds))


def check(kind: str, operands: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
          *, consts: Sequence[int] = (), threads: int | None = None, **options: Any) -> None:
    """Run one ``kind`` node on cpu and on the interpreter and assert the results match (cpu tolerances)."""
    operands = pad_operands(kind, operands)
    fn = one_node_function(kind, operands, attrs, consts=consts)
    node = fn.nodes[0]
    out_types = [o.type for o in node.outputs]
    want = evaluate_reference(kind, operands, node.attrs, out_types)
    got = run_cpu(fn, feeds_of(fn, operands), threads=threads, **options)
    for j, (w, t) in enumerate(zip(want, out_types)):
        c = compare_arrays(got[f"out{j}"], w, tolerance(kind, t.elem))
        assert c.ok, f"{kind} {attrs or ''} result {j}: {c.message}"


def rand(shape: Sequence[int], dtype: Any, rng: np.random.Generator, *, low: float = -3, high: float = 3) -> np.ndarray:
    """Random values of ``dtype``: normal floats scaled into [low, high], integers in [low, high], bools."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        lo = max(int(low), int(np.iinfo(dt).min))
        return np.asarray(rng.integers(lo, int(high) + 1, size=shape)).astype(dt)
    return np.asarray(rng.random(shape) * (high - low) + low).astype(dt)


def run_at_feature_level(code: str, level: str, cache: Any) -> None:
    """Run ``code`` (Python that prints ``ok`` when its checks pass) in a fresh interpreter whose cpu backend
    sees only the CPU features of ``level`` (``GLOW_CPU_FEATURES``), with its own compile cache folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "GLOW_CPU_FEATURES": level, "GLOW_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
