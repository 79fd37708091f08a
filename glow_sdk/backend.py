"""The base classes a backend implements.

``Backend`` is the compiler side (capabilities, lowering decisions, compile);
``CompiledFunction`` is the executable it returns. The core validates feeds
(names, shapes, dtypes) before it ever calls ``CompiledFunction.execute``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function, Node
from glow_core.ir.kinds import all_kinds
from glow_core.ir.types import ElemKind, TensorType


@dataclass(frozen=True)
class BackendSpec:
    """A plugin's registration record for one backend."""

    name: str
    factory: Callable[[], "Backend"]
    sdk_api_version: int
    version: str = "0"
    description: str = ""


@dataclass(frozen=True)
class DeviceInfo:
    """What the runtime needs to know of a device."""

    name: str
    memory_bytes: int
    count: int = 1


@dataclass(frozen=True)
class CompileOptions:
    """Options passed from ``glow_core.compile`` to ``Backend.compile``."""

    threads: int | None = None
    debug: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


class CompiledFunction(abc.ABC):
    """An executable produced by ``Backend.compile`` for one function."""

    def __init__(self, function: Function) -> None:
        self.input_types: dict[str, TensorType] = {p.name: p.type for p in function.inputs}
        self.output_types: dict[str, TensorType] = {n: v.type for n, v in function.outputs}

    @abc.abstractmethod
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once. ``feeds`` were already checked against ``input_types``."""


class Backend(abc.ABC):
    """A code generator / executor for one kind of device.

    Subclasses set ``name`` and implement :meth:`supported_kinds` and
    :meth:`compile`. Everything else has a sensible default.
    """

    name: str = "unnamed"
    version: str = "0"

    @abc.abstractmethod
    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        """Node kinds this backend executes, each with the element kinds it accepts."""

    @abc.abstractmethod
    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        """Compile a lowered, optimized function into an executable."""

    def supports(self, node: Node) -> bool:
        """Can this node run here? Checks the kind and its operands' element kinds."""
        elems = self.supported_kinds().get(node.kind.name)
        if elems is None:
            return False
        types = [v.type for v in node.inputs if v is not None] + [o.type for o in node.outputs]
        return all(t.elem in elems for t in types) and self.supports_node(node)

    def supports_node(self, node: Node) -> bool:
        """Optional predicate on attributes and shapes (default: accept)."""
        return True

    def should_lower(self, node: Node) -> bool:
        """Lower this node to primitives? Default: when it is not supported natively."""
        return not self.supports(node)

    def transform_post_lowering(self, function: Function) -> bool:
        """Backend-specific graph rewrites (fusion) after lowering; return whether anything changed."""
        return False

    def create_device(self) -> DeviceInfo:
        return DeviceInfo(name=self.name, memory_bytes=8 << 30)

    def evaluate(
        self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None], out_types: Sequence[TensorType]
    ) -> list[np.ndarray]:
        """Evaluate one node on host arrays (reference backends; used for constant folding)."""
        raise UnsupportedError(f"backend {self.name} cannot evaluate single nodes")

    def capability_report(self) -> dict[str, list[str]]:
        """Kind -> supported element kinds, for every kind in the table (empty list: unsupported)."""
        sup = self.supported_kinds()
        return {k: sorted(e.value for e in sup.get(k, ())) for k in sorted(all_kinds())}
