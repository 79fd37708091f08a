"""Run-time control flow: a model split at If/Loop/Scan nodes into compiled segments (docs/control-flow.md).

The importer folds every If whose condition is a compile-time constant. At the first control-flow
node it cannot fold it stops (:func:`glow_core.importer.import_split`): the nodes before it form one
function, compiled by the backend as usual. The node itself runs on the host (:mod:`.hostops`): it
reads its condition or trip count, and runs the chosen branch or the loop body as a
:class:`~.program.Program` (compiled once per input signature, cached). The nodes after it form
another program, compiled when its input shapes are known. Backends see only straight-line
functions: they need no change to run models with control flow.
"""

from glow_core.controlflow.hostops import HOST_OPS, MAX_ITERATIONS_ENV
from glow_core.controlflow.program import CompileTarget, Program, Stage, StagedExecutable, compile_staged

__all__ = ["HOST_OPS", "MAX_ITERATIONS_ENV", "CompileTarget", "Program", "Stage", "StagedExecutable", "compile_staged"]
