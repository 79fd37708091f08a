"""``glow_core.InferenceSession`` and its companions: onnxruntime's session interface over glow.

- :mod:`.session`: :class:`InferenceSession`, :class:`SessionOptions`, :class:`GraphOptimizationLevel`,
  :func:`get_available_providers`;
- :mod:`.binding`: :class:`OrtValue` and :class:`IOBinding` (caller-owned outputs reused across runs);
- :mod:`.model`: what a session reads of the model before compiling (:class:`NodeArg`), and pruning.

This layer sits beside the API (``glow_core.api``) above the driver: nothing in the core imports it.
"""

from glow_core.session.binding import IOBinding, OrtValue
from glow_core.session.model import NodeArg
from glow_core.session.session import GraphOptimizationLevel, InferenceSession, SessionOptions, get_available_providers

__all__ = ["GraphOptimizationLevel", "IOBinding", "InferenceSession", "NodeArg", "OrtValue", "SessionOptions",
           "get_available_providers"]
