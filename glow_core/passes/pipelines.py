"""The pipelines the compiler runs, as explicit, readable lists of pass names.

``default_pipeline()`` is what ``glow_core.compile`` runs for a backend::

    optimize_pipeline()        graph optimizer on the imported (high-level) kinds
    lowering_pipeline()        lower what the backend does not run natively, simplify again
    post_lowering_pipeline()   fusion the backend declares support for, the backend's own rewrites

A ``FixedPoint`` group repeats its passes until none changes anything (at most
8 rounds). Every pass is described in docs/passes.md.
"""

from __future__ import annotations

from glow_core.passinfra import FixedPoint, Step

#: cleanups run to a fixed point between the larger steps
CLEANUP = FixedPoint("fold-constants", "cse", "dce")


def optimize_pipeline() -> list[Step]:
    """Before lowering: domain optimizations on high-level kinds."""
    return [
        "dce",
        "keep-compressed-weights",
        FixedPoint(
            "eliminate-noops",
            "fold-batchnorm",
            "fold-conv-arith",
            "sink-transposes",
            "merge-reshapes",
            "simplify-arith",
            "eliminate-concat-slice",
            "fold-constants",
            "cse",
            "dce",
        ),
    ]


def lowering_pipeline() -> list[Step]:
    """Lower what the backend does not run natively, then the same cheap simplifications again."""
    return [
        "lower",
        FixedPoint(
            "eliminate-noops",
            "sink-transposes",
            "merge-reshapes",
            "simplify-arith",
            "eliminate-concat-slice",
            "fold-constants",
            "cse",
            "dce",
        ),
    ]


def post_lowering_pipeline() -> list[Step]:
    """After lowering: fuse activations (where the backend supports the fused kinds), batch the products
    that share a large weight, the backend's rewrites."""
    return ["fuse-activations", "batch-shared-matmuls", "backend-transforms", "dce"]


def default_pipeline() -> list[Step]:
    return optimize_pipeline() + lowering_pipeline() + post_lowering_pipeline()
