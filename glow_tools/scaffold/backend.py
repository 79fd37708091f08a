"""The backend: what it runs (capabilities), how it compiles, the device it drives.

This backend runs the mandatory primitive set with the numpy kernels of
``kernels.py``; glow lowers every other node kind onto those primitives
before ``compile`` sees the graph. To bring up real hardware:

1. replace the kernels (or generate code for the whole function in
   ``compile``) and narrow :data:`ELEMS` / ``capabilities()`` to what the
   device really runs; glow lowers or refuses the rest, listing every node;
2. report the device's memory in ``create_device``;
3. run ``glow conformance --backend NAME`` until it passes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from glow_core.errors import ExecutionError, UnsupportedError
from glow_core.ir.graph import Function, Value
from glow_core.ir.kinds import Category, get_kind
from glow_core.ir.types import ElemKind, TensorType
from glow_sdk import Backend, Capability, CompiledFunction, CompileOptions, DeviceInfo
from glow_sdk.primitives import optional_primitives, primitive_kinds

from .kernels import KERNELS, Kernel

#: the name users pass as --backend
BACKEND_NAME = "template"
#: this backend's own version
VERSION = "0.1.0"
#: the SDK API version this backend was written against (see glow_sdk.version)
SDK_API = 2
#: element kinds the kernels handle (narrowed per kind to what the kind is defined for)
ELEMS = frozenset({ElemKind.FLOAT32, ElemKind.INT32, ElemKind.INT64, ElemKind.BOOL})
#: the 8-bit integers :data:`QUANTIZED_KINDS` take besides ELEMS (int8 models)
QUANTIZED_ELEMS = frozenset({ElemKind.INT8, ElemKind.UINT8})
#: device memory reported to the runtime (bytes)
DEVICE_MEMORY = 4 << 30


class Executable(CompiledFunction):
    """Runs the nodes of a function in order with the kernels, freeing each value after its last use."""

    def __init__(self, function: Function, kernels: Mapping[str, Kernel] = KERNELS) -> None:
        super().__init__(function)
        self.function = function
        self.steps = [(node, kernels[node.kind.name]) for node in function.nodes]
        last: dict[int, int] = {}
        for i, node in enumerate(function.nodes):
            for v in node.inputs:
                if v is not None:
                    last[id(v)] = i
        keep = {id(v) for v in function.output_values()}
        self.free_after: list[list[int]] = [[] for _ in self.steps]
        for vid, i in last.items():
            if vid not in keep:
                self.free_after[i].append(vid)
        self.runs = 0
        self._lock = threading.Lock()

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[int, np.ndarray] = {id(p): feeds[p.name] for p in self.function.inputs}
        env.update((id(c), c.payload) for c in self.function.constants)

        def get(v: Value | None) -> np.ndarray | None:
            return None if v is None else env[id(v)]

        for i, (node, fn) in enumerate(self.steps):
            out_types = [o.type for o in node.outputs]
            try:
                with np.errstate(all="ignore"):
                    res = fn(node.attrs, out_types, *[get(v) for v in node.inputs])
            except Exception as e:
                raise ExecutionError(f"{node.where()}: kernel failed: {type(e).__name__}: {e}") from e
            results = list(res) if isinstance(res, tuple) else [res]
            for o, r, t in zip(node.outputs, results, out_types):
                env[id(o)] = _checked(np.asarray(r), t, node.where())
            for vid in self.free_after[i]:
                env.pop(vid, None)
        with self._lock:  # execute may run in several threads at once: keep shared state behind a lock
            self.runs += 1
        return {name: np.array(env[id(v)], copy=True) for name, v in self.function.outputs}


def _checked(a: np.ndarray, t: TensorType, where: str) -> np.ndarray:
    if a.dtype != t.dtype or tuple(a.shape) != t.shape:
        raise ExecutionError(f"{where}: kernel returned {a.dtype}{list(a.shape)}, declared {t}")
    return a


#: the primitives that also take 8-bit integers: the quantized ones, Cast into and out of int8 islands, and
#: the data movement a quantized model does on int8 tensors (Reshape, Transpose, Concat, ...)
QUANTIZED_KINDS = optional_primitives() | {"Cast"} | {
    k for k in primitive_kinds() if get_kind(k).is_(Category.DATA_MOVEMENT)}


def declared_elems(kind: str) -> frozenset[ElemKind]:
    """The element kinds declared for ``kind``: those of :data:`ELEMS` it is defined for, and 8-bit integers
    for :data:`QUANTIZED_KINDS` (keep them when you narrow the declarations: int8 models need them)."""
    extra = QUANTIZED_ELEMS if kind in QUANTIZED_KINDS else frozenset()
    return (ELEMS | extra) & get_kind(kind).elems


class TemplateBackend(Backend):
    name = BACKEND_NAME
    version = VERSION
    sdk_api_version = SDK_API
    #: kind name -> kernel: what this backend runs
    kernels: Mapping[str, Kernel] = KERNELS

    def capabilities(self) -> Sequence[Capability]:
        """Every kind with a kernel, for the element kinds of :data:`ELEMS` it is defined for.

        A capability may carry a predicate on attributes and shapes, e.g.
        ``Capability("Conv", f32, when=lambda n: n.attrs["group"] == 1, why="group 1 only")``:
        a node it rejects is lowered (or reported unsupported).
        """
        return [Capability(kind, declared_elems(kind)) for kind in sorted(self.kernels)]

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        missing = sorted({n.kind.name for n in function.nodes if n.kind.name not in self.kernels})
        if missing:
            raise UnsupportedError(f"backend {self.name} has no kernel for: {', '.join(missing)}")
        return Executable(function, self.kernels)

    def create_device(self) -> DeviceInfo:
        return DeviceInfo(name=f"{self.name}0", memory_bytes=DEVICE_MEMORY)

    def conformance_waivers(self) -> str | None:
        """The waiver file shipped beside this module (``conformance_waivers.txt``), if any."""
        from pathlib import Path

        path = Path(__file__).with_name("conformance_waivers.txt")
        return path.read_text() if path.is_file() else None

    def evaluate(self, kind: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray | None],
                 out_types: Sequence[TensorType]) -> list[np.ndarray]:
        fn = self.kernels.get(kind)
        if fn is None:
            raise UnsupportedError(f"backend {self.name} has no kernel for {kind}")
        with np.errstate(all="ignore"):
            res = fn(attrs, list(out_types), *inputs)
        return list(res) if isinstance(res, tuple) else [res]

