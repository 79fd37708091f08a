"""The one exception hierarchy of Glow.

Every error the product raises on purpose is a :class:`GlowError`. Messages name
the node (and its ONNX origin), the op, the shapes involved and what to do.
This module imports nothing else of ours: every layer may use it.
"""

from __future__ import annotations


class GlowError(Exception):
    """Base class of every deliberate Glow error."""

    #: A short hint on what the user can do about it (printed by the CLI).
    hint: str = ""
    #: The pass that raised it, when a pass manager ran that pass (see :meth:`add_context`).
    pass_name: str | None = None

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        if hint:
            self.hint = hint
        self.context: list[str] = []

    def add_context(self, where: str) -> None:
        """Prefix the message with where the error happened ("in pass 'cse'"), keeping type and fields.

        Callers that add context re-raise the same object (``raise``), so every
        field a subclass carries (``DynamicValueError.placeholders``, ...) survives.
        """
        self.context = [where, *getattr(self, "context", [])]

    def __str__(self) -> str:
        message = super().__str__()
        context = getattr(self, "context", None)
        return f"{': '.join(context)}: {message}" if context else message

    def one_line(self) -> str:
        text = str(self).strip().replace("\n", " ")
        return f"{text} ({self.hint})" if self.hint else text


class GlowTypeError(GlowError):
    """A node's operand types or attributes do not satisfy its kind's type rule."""


class GlowVerifyError(GlowError):
    """A graph (or low-level IR) broke an invariant checked by ``verify()``."""


class GraphError(GlowError):
    """Misuse of the graph API (erasing a live node, foreign values, ...)."""


class ModelError(GlowError):
    """The model file itself is unreadable or invalid."""


class ImportShapeError(ModelError):
    """An input has symbolic or unknown dimensions the user must fix."""


class UnsupportedError(GlowError):
    """Something valid that this build or backend does not support.

    A case that ends in this error is *unsupported*, never a wrong answer.
    """


class UnsupportedOpsError(UnsupportedError):
    """One or more ONNX operators (listed all at once) cannot be imported."""


class DynamicValueError(UnsupportedError):
    """An operand that decides shapes is only known at run time.

    ``placeholders`` names the model inputs the value depends on, so a caller
    that knows their values (``glow_core.onnx_backend``) can bind them as
    compile-time constants and retry.
    """

    def __init__(self, message: str, placeholders: tuple[str, ...] = (), *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.placeholders = placeholders


class RuntimeControlFlowError(UnsupportedError):
    """A control-flow node (If, Loop, Scan) that must run at run time.

    The importer raises it for an If whose condition is not a compile-time
    constant and for every Loop and Scan; ``node_name`` is the ONNX node. The
    core's control-flow executor (``glow_core.controlflow``) catches it and
    splits the model there; a caller that only imports (``glow dump``) reports it.
    """

    def __init__(self, message: str, node_name: str = "", *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.node_name = node_name


class BackendError(GlowError):
    """Backend lookup, loading or compilation failed."""


class UnknownBackendError(BackendError):
    """A backend name that no installed plugin provides."""


class PluginError(BackendError):
    """A plugin failed to load or targets an incompatible SDK API version."""


class InputError(GlowError):
    """The feeds given to ``run`` do not match the network's inputs."""


class ExecutionError(GlowError):
    """A kernel failed or produced a result of the wrong type at run time."""


class IndexRangeError(ExecutionError):
    """An index (of a Gather, Scatter, ...) was out of range for its axis at run time.

    ``node`` is the graph node whose indices were out of range when the backend knows it ("" when not);
    ``CompiledNetwork.run`` rewrites the message to name the ONNX node, its op and the model input the
    indices come from (``glow_sdk.diagnostics``).
    """

    def __init__(self, message: str, node: str = "", *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.node = node


class PassError(GlowError):
    """An optimization pass failed; the message names the pass."""


class BudgetError(ModelError):
    """A tensor (or all the constants, or a backend's arena) would exceed the memory budget
    (see ``glow_core.budget``), or memory ran out while allocating one."""


class GlowWarning(UserWarning):
    """Something glow accepted but the user should know (e.g. a model's declared output shape is wrong)."""
