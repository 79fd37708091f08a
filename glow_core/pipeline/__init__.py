"""The compile pipeline, written once: model -> imported function -> prepared function -> backend executable.

Every path that compiles (``glow_core.compile``, bundles, profiles, the int8 report, the runtime's
partitions, control-flow stages) goes through these functions; none of them repeats the sequence:

- :mod:`.args`: the public argument checks (model, input shapes, thread count);
- :mod:`.stages`: import -> prepare (optimize + lower for a backend) -> support check -> the guarded
  backend call (:func:`guard_backend`, the one place a backend's failure becomes a ``GlowError``);
- :mod:`.network`: :class:`CompiledNetwork` (feeds checked before the backend sees them) and
  :class:`CompileStats`.

In: a model argument and a ``glow_sdk.Backend``. Out: a :class:`CompiledNetwork`, or a prepared
``Function`` for callers that hand it to the backend themselves (bundles, partitions). This layer sits
above the importer, the passes, lowering and the plugin host, and below the runtime, control flow,
quantization, bundles and the API: it imports none of them (an optional ``transform`` step, such as
int8 conversion, is passed in by the caller).
"""

from glow_core.pipeline.args import check_input_shapes, check_model_arg, check_threads
from glow_core.pipeline.network import CompiledNetwork, CompileStats
from glow_core.pipeline.stages import (
    check_support,
    compile_function,
    compile_options,
    compile_prepared,
    guard_backend,
    import_function,
    pass_context,
    prepare_function,
    prepare_model,
)

__all__ = [
    "CompileStats",
    "CompiledNetwork",
    "check_input_shapes",
    "check_model_arg",
    "check_support",
    "check_threads",
    "compile_function",
    "compile_options",
    "compile_prepared",
    "guard_backend",
    "import_function",
    "pass_context",
    "prepare_function",
    "prepare_model",
]
