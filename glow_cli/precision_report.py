"""``glow compare MODEL --backend A --precision bf16``: how close is the bf16 network to the float32 one?

Both networks are compiled for the same backend, run on the same inputs (``--input`` files or seeded
random ones), and each output is compared: the largest absolute difference, that difference relative to
the float32 output's largest magnitude, the cosine similarity, and for outputs with a class axis (the
last, of at least 2 entries) the top-1 agreement over the other axes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from glow_core.quantization.report import OutputAgreement


def agreement_line(a: OutputAgreement) -> str:
    """One output's agreement as ``glow compare --precision`` prints it."""
    top = f", top-1 {a.top1_agree}/{a.rows}" if a.top1_agree is not None else ""
    return f"output {a.name}: max |diff| {a.max_abs:.3g} ({a.max_rel:.3g} of max |fp32|), cosine {a.cosine:.6f}{top}"


def agreement(name: str, ref: np.ndarray, got: np.ndarray) -> OutputAgreement:
    """Compare ``got`` (the lower precision) with ``ref`` (float32)."""
    out = OutputAgreement(name)
    out.add(np.asarray(ref), np.asarray(got))
    return out


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
