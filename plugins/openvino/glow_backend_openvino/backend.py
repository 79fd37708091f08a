"""The OpenVINO backend: what it claims, how it compiles.

Built only on glow's public SDK (``glow_sdk``), as an outside vendor builds a backend for a toolchain
that consumes ONNX:

- **capabilities**: every node kind glow can export as ONNX (``glow_sdk.export.exportable_kinds``) at
  the element kinds of :data:`ELEMS`, except the kinds of :data:`NOT_DECLARED`;
- **claim**: the nodes OpenVINO's own supported-operation query (``ov.Core().query_model``) accepts on
  the exported ONNX model, and that OpenVINO computes as glow does (:func:`exact`);
- **compile**: the function is split into runs (``glow_sdk.export.split``); each run OpenVINO takes is
  exported as ONNX, compiled by OpenVINO for its CPU device and run with asynchronous infer requests
  (:mod:`glow_backend_openvino.runner`); the other runs (nodes OpenVINO rejects or computes otherwise)
  run on the host with glow's reference kernels (``glow_sdk.export.HostPart``), so that the backend
  alone runs any function it declares (``glow conformance``). On a device list, the partitions it
  receives hold only the nodes it claimed.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from glow_backend_openvino import __version__
from glow_backend_openvino.runner import OpenVinoExecutable, OvPart, compile_part, ov_core
from glow_sdk.backend import Backend, Capability, CompiledFunction, CompileOptions, DeviceInfo, connected_groups
from glow_sdk.export import (
    HostPart,
    OnnxPart,
    exportable,
    exportable_kinds,
    glow_node_of,
    partition_to_onnx,
    split,
    value_names,
)
from glow_sdk.options import BackendOption, BackendOptionError
from glow_sdk.primitives import mandatory_primitives

LOG = logging.getLogger("glow.openvino")

#: the element kinds the backend declares (the mandatory ones; glow lowers or refuses the others)
ELEMS = frozenset().union(*mandatory_primitives().values())
#: kinds glow exports that the backend does not declare: glow's fused kinds (OpenVINO fuses by itself),
#: LayerNormalization (its statistics results), Dropout and Identity (glow removes them)
NOT_DECLARED = frozenset({"FusedConv", "FusedMatMul", "FusedLayerNorm", "FusedAttention", "DequantMatMul",
                          "LayerNormalization", "Dropout", "Identity"})
#: constants of more elements than this are graph inputs in the model the supported-operation query reads
QUERY_WEIGHTS = 4096


#: kind -> (operand positions, result positions) that hold indices: int64 there is exact on OpenVINO
#: (indices are within a tensor's size), int64 data is not (OpenVINO's CPU device computes it in int32)
INDEX_OPERANDS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "Gather": ((1,), ()), "GatherElements": ((1,), ()), "GatherND": ((1,), ()), "ScatterND": ((1,), ()),
    "ScatterElements": ((1,), ()), "ArgMax": ((), (0,)), "ArgMin": ((), (0,)), "TopK": ((), (1,)),
}


def _int64_is_index(node: Any) -> bool:
    """Whether every int64 value of ``node`` is an index (indices operands, index results)."""
    kind = node.kind.name
    in_idx, out_idx = INDEX_OPERANDS.get(kind, ((), ()))
    ins = [v for i, v in enumerate(node.inputs) if v is not None and i not in in_idx]
    outs = [o for i, o in enumerate(node.outputs) if i not in out_idx]
    return all(v.type.elem.value != "int64" for v in [*ins, *outs])


def _never(node: Any) -> bool:
    """OpenVINO's result differs from glow's for some operands (signed BitShift; Mod; Div and Exp off by
    an ulp or on NaN; ReduceMax / ReduceMin drop NaN and give the largest finite value over an empty
    axis): the host runs it."""
    return False


def _floats_only(node: Any) -> bool:
    """On int32 operands OpenVINO's CPU device goes through float32 (exact only below 2**24 in magnitude)."""
    return all(v.type.elem.value != "int32" for v in node.inputs if v is not None)


def _not_to_bool(node: Any) -> bool:
    """A Cast to bool: OpenVINO gives false for NaN (glow: x != 0, so true)."""
    return node.attrs["to"].value != "bool" and _floats_only(node)


def _no_padding_counted(node: Any) -> bool:
    """AvgPool with count_include_pad: OpenVINO's divisor differs at the borders."""
    return not node.attrs["count_include_pad"]


#: node kind -> a rule saying when OpenVINO's CPU device computes the node as glow does (kinds absent:
#: always, given :func:`_int64_is_index`); each rule's docstring says what differs. Found by running
#: ``glow conformance --backend openvino`` with every node on OpenVINO.
EXACT_RULES: dict[str, Callable[[Any], bool]] = {
    "BitShift": _never, "Mod": _never, "Div": _never, "Exp": _never,
    "Cast": _not_to_bool, "AvgPool": _no_padding_counted,
    "Equal": _floats_only, "Less": _floats_only, "LessOrEqual": _floats_only, "Pow": _floats_only,
    "TopK": _floats_only, "ReduceSum": _floats_only, "ReduceProd": _floats_only, "Shrink": _floats_only,
    "ReduceMax": _never, "ReduceMin": _never,
}


def exact(node: Any) -> bool:
    """Whether OpenVINO computes ``node`` exactly as glow does (within glow's tolerances)."""
    rule = EXACT_RULES.get(node.kind.name)
    return _int64_is_index(node) and (rule is None or rule(node))


class OpenVinoBackend(Backend):
    """glow on OpenVINO's CPU device (module docstring)."""

    name = "openvino"
    version = __version__
    sdk_api_version = "2.1"  # type: ignore[assignment]
    claim_level = "lowered"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: node names, kinds and result types of a function -> the names of its nodes OpenVINO's query accepts
        self._queries: OrderedDict[tuple[Any, ...], frozenset[str]] = OrderedDict()

    def capabilities(self) -> Sequence[Capability]:
        """Every kind glow exports as ONNX, and every mandatory primitive (those without an ONNX form, such
        as BitCast, run on the host), at the element kinds of :data:`ELEMS`."""
        kinds = {k: e & ELEMS for k, e in exportable_kinds().items() if k not in NOT_DECLARED}
        for k, e in mandatory_primitives().items():
            kinds[k] = kinds.get(k, frozenset()) | e
        return [Capability(k, e) for k, e in sorted(kinds.items()) if e]

    def options(self) -> Sequence[BackendOption]:
        return (BackendOption("requests", int, 2, "OpenVINO infer requests per compiled part (runs in flight)"),
                BackendOption("device", str, "CPU", "the OpenVINO device compiled for"))

    def create_device(self) -> DeviceInfo:
        return DeviceInfo(name="openvino-cpu", memory_bytes=8 << 30, count=1)

    def claim(self, function: Any) -> Sequence[Sequence[Any]]:
        """The connected groups of the nodes OpenVINO's ``query_model`` accepts and computes exactly."""
        accepted = self.query(function)
        return connected_groups(function, [n for n in function.nodes
                                           if n.name in accepted and self.supports(n) and exact(n)])

    def query(self, function: Any) -> frozenset[str]:
        """The names of the nodes of ``function`` OpenVINO's supported-operation query accepts (cached)."""
        key = tuple((n.name, n.kind.name, tuple(o.type for o in n.outputs)) for n in function.nodes)
        with self._lock:
            if key in self._queries:
                self._queries.move_to_end(key)
                return self._queries[key]
        nodes = [n for n in function.nodes if exportable(n)]
        try:
            accepted = _query(function, nodes, "CPU")
        except Exception as e:  # noqa: BLE001 -- the frontend rejects a node of the whole: ask node by node
            LOG.debug("query_model on the whole function failed (%s); asking node by node", e)
            accepted = frozenset().union(*(_query_one(function, n) for n in nodes)) if nodes else frozenset()
        with self._lock:
            self._queries[key] = accepted
            while len(self._queries) > 8:
                self._queries.popitem(last=False)
        return accepted

    def compile(self, function: Any, options: CompileOptions) -> CompiledFunction:
        device, requests = _checked_options(options)
        accepted = self.query(function)
        names = value_names(function)
        parts: list[OvPart | HostPart] = []
        for part in split(function, lambda n: n.name in accepted and exact(n)):
            if isinstance(part, OnnxPart):
                parts.append(_compile_or_host(part, device, requests, options.threads, names))
            else:
                parts.append(part)
        return OpenVinoExecutable(function, parts)

    def conformance_waivers(self) -> str | None:
        return None


def _checked_options(options: CompileOptions) -> tuple[str, int]:
    """The ``device`` and ``requests`` options, refused with a clear message when OpenVINO cannot use them."""
    device = str(options.extra.get("device", "CPU"))
    requests = int(options.extra.get("requests", 2))
    devices = list(ov_core().available_devices)
    if device not in devices:
        raise BackendOptionError(f"backend 'openvino': option 'device' is {device!r}, which OpenVINO does not "
                                 f"have here; choose one of: {', '.join(devices)}")
    if requests < 1:
        raise BackendOptionError(f"backend 'openvino': option 'requests' must be at least 1, got {requests}")
    return device, requests


def _compile_or_host(part: OnnxPart, device: str, requests: int, threads: int | None,
                     names: dict[int, str]) -> OvPart | HostPart:
    """The part compiled by OpenVINO; on the host when OpenVINO's compiler rejects it (a shape it cannot
    take, an empty tensor)."""
    try:
        return compile_part(part, device, requests, threads)
    except Exception as e:  # noqa: BLE001 -- OpenVINO raises RuntimeError subclasses of its own
        LOG.debug("OpenVINO cannot compile a part of %d node(s) (%s); it runs on the host", len(part.nodes), e)
        return HostPart(part.nodes, part.input_names, part.output_names, names)


def _owners(model: Any) -> dict[str, str]:
    """ONNX node names and output names -> the glow node they come from: OpenVINO names an operation after
    its ONNX node, or after its output when that is a graph output."""
    out: dict[str, str] = {}
    for node in model.graph.node:
        owner = glow_node_of(node.name)
        out[node.name] = owner
        for o in node.output:
            out.setdefault(o, owner)
    return out


def _query(function: Any, nodes: Sequence[Any], device: str) -> frozenset[str]:
    """The glow nodes among ``nodes`` all of whose OpenVINO operations ``query_model`` accepts (a node
    none of whose operations is named after it, folded away by the frontend, counts as accepted)."""
    if not nodes:
        return frozenset()
    model = partition_to_onnx(function, nodes, check=False, weights_as_inputs=QUERY_WEIGHTS)
    owners = _owners(model)
    core = ov_core()
    ov_model = core.read_model(model.SerializeToString(), b"")
    answer = core.query_model(ov_model, device)
    ok: dict[str, bool] = {}
    for op in ov_model.get_ordered_ops():
        friendly = op.get_friendly_name()
        owner = owners.get(friendly.split("/", 1)[0])
        if owner is not None:
            ok[owner] = ok.get(owner, True) and friendly in answer
    names = {n.name for n in nodes}
    return frozenset(k for k, v in ok.items() if v) | frozenset(names - set(ok))


def _query_one(function: Any, node: Any) -> frozenset[str]:
    try:
        return _query(function, [node], "CPU")
    except Exception:  # noqa: BLE001 -- OpenVINO's frontend has no conversion for this ONNX operator
        return frozenset()
