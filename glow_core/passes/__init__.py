"""Graph optimizer: named passes, explicit pipelines, a pass manager.

In: a verified graph function. Out: the same function, optimized in place
(still verified). See glow_core/passinfra.py (shared with lowering and the LIR
optimizer) for the pass contract and the pass manager, and pipelines.py for
the pipelines the compiler runs.
"""

from glow_core.passinfra import FixedPoint, Pass, PassContext, PassManager, all_passes, get_pass, graph_pass

__all__ = ["FixedPoint", "Pass", "PassContext", "PassManager", "all_passes", "get_pass", "graph_pass"]
