"""``glow compare MODEL --backend A --precision bf16``: how close is the bf16 network to the float32 one?

Both networks are compiled for the same backend, run on the same inputs (``--input`` files or seeded
random ones), and each output is compared: the largest absolute difference, that difference relative to
the float32 output's largest magnitude, the cosine similarity, and for outputs with a class axis (the
last, of at least 2 entries) the top-1 agreement over the other axes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx


@dataclass(frozen=True)
class OutputAgreement:
    """One output of the bf16 network against the float32 one."""

    name: str
    max_abs: float
    max_rel: float
    cosine: float
    #: (rows whose arg-max agrees, rows) over the last axis; None for outputs without a class axis
    top1: tuple[int, int] | None

    def line(self) -> str:
        top = f", top-1 {self.top1[0]}/{self.top1[1]}" if self.top1 is not None else ""
        return (f"output {self.name}: max |diff| {self.max_abs:.3g} ({self.max_rel:.3g} of max |fp32|), "
                f"cosine {self.cosine:.6f}{top}")


def agreement(name: str, ref: np.ndarray, got: np.ndarray) -> OutputAgreement:
    """Compare ``got`` (bf16) with ``ref`` (float32)."""
    r = np.asarray(ref, dtype=np.float64).ravel()
    g = np.asarray(got, dtype=np.float64).ravel()
    diff = float(np.max(np.abs(r - g))) if r.size else 0.0
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    norm = float(np.linalg.norm(r) * np.linalg.norm(g))
    cosine = float(np.dot(r, g) / norm) if norm > 0 else float(np.array_equal(r, g))
    top1 = None
    if np.ndim(ref) >= 1 and np.shape(ref)[-1] >= 2 and np.issubdtype(np.asarray(ref).dtype, np.floating):
        a = np.argmax(np.asarray(ref).reshape(-1, np.shape(ref)[-1]), axis=-1)
        b = np.argmax(np.asarray(got).reshape(-1, np.shape(got)[-1]), axis=-1)
        top1 = (int(np.sum(a == b)), int(a.size))
    return OutputAgreement(name, diff, diff / scale if scale > 0 else 0.0, cosine, top1)


def compare_precision(model: Any, backend: str, precision: str, shapes: Any, feeds: Mapping[str, np.ndarray] | None,
                      seed: int) -> tuple[dict[str, str], list[OutputAgreement]]:
    """Compile ``model`` for ``backend`` in float32 and in ``precision``, run both on the same inputs;
    returns where each input came from and the agreement of each output."""
    import glow_core
    from glow_core import zoo

    ref_net = glow_core.compile(model, backend, shapes)
    net = glow_core.compile(model, backend, shapes, precision=precision)
    if feeds is None:
        ranges = zoo.index_ranges(model) if isinstance(model, onnx.ModelProto) else None
        feeds = zoo.random_feeds(ref_net.input_types, seed, ranges)  # type: ignore[union-attr]
        origin = {n: f"random (seed {seed})" for n in feeds}
    else:
        origin = {n: "file" for n in feeds}
    ref = ref_net.run(dict(feeds))
    got = net.run(dict(feeds))
    return origin, [agreement(n, ref[n], got[n]) for n in ref]
