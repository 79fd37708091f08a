"""The Backend contract: capabilities (kinds x element kinds, predicates), identity and SDK API versions,
devices, and the capability report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from glow_core.errors import PluginError
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import Registry
from glow_sdk import (
    SDK_API_VERSION,
    Backend,
    BackendSpec,
    Capability,
    CompiledFunction,
    CompileOptions,
    DeviceInfo,
    hookimpl,
)
from glow_sdk.primitives import (
    MANDATORY_ELEMS,
    mandatory_elems,
    mandatory_primitives,
    optional_primitives,
    primitive_kinds,
)
from glow_sdk.version import incompatibility_message, is_compatible, supported_text
from glow_tools.capabilities import capability_report
from glow_tools.scaffold.backend import ELEMS, TemplateBackend
from glow_tools.testing import check_node, one_node_function, prepare_for

E = ElemKind
F32 = frozenset({E.FLOAT32})


class _Exe(CompiledFunction):
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}


class MappingBackend(Backend):
    name = "mapping"

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return {"Add": F32, "Relu": F32}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return _Exe(function)


class RecordBackend(TemplateBackend):
    """The template backend plus a native Relu for float32 operands of rank <= 2 only."""

    name = "records"

    def capabilities(self) -> Sequence[Capability]:
        return [*super().capabilities(),
                Capability("Relu", F32, when=lambda n: n.inputs[0] is not None and n.inputs[0].type.rank <= 2, why="rank <= 2")]

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        from glow_tools.scaffold.backend import Executable
        from glow_tools.scaffold.kernels import KERNELS

        relu = lambda attrs, out, x: np.maximum(x, np.zeros((), x.dtype))
        return Executable(function, {**KERNELS, "Relu": relu})


def _relu(shape: tuple[int, ...]) -> Function:
    return one_node_function("Relu", [np.zeros(shape, np.float32)])


def test_the_two_ways_of_declaring_capabilities_agree() -> None:
    m = MappingBackend()
    caps = m.capabilities()
    assert {(c.kind, c.elems) for c in caps} == {("Add", F32), ("Relu", F32)}
    r = RecordBackend()
    assert r.supported_kinds()["Relu"] == F32 and r.supported_kinds()["Add"] == ELEMS - {E.BOOL}

    class Neither(Backend):
        def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
            return _Exe(function)

    with pytest.raises(NotImplementedError, match="override supported_kinds"):
        Neither().supported_kinds()


def test_a_capability_predicate_decides_what_is_lowered() -> None:
    be = RecordBackend()
    small, big = _relu((2, 3)), _relu((2, 3, 4))
    assert be.supports(small.nodes[0]) and not be.supports(big.nodes[0])
    prepare_for(small, be)
    prepare_for(big, be)
    assert small.count_by_kind() == {"Relu": 1}
    assert "Relu" not in big.count_by_kind()  # the predicate rejected it: lowered onto the primitives
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert check_node(be, "Relu", [x]).ok and check_node(be, "Relu", [x[0]]).ok


def test_element_kinds_of_operands_and_results_must_all_be_declared() -> None:
    m = MappingBackend()
    fn = one_node_function("Add", [np.zeros(3, np.int32), np.zeros(3, np.int32)])
    assert not m.supports(fn.nodes[0])


def test_device_info() -> None:
    assert TemplateBackend().create_device() == DeviceInfo("template0", 4 << 30)
    with pytest.raises(ValueError, match="memory_bytes must be a positive integer"):
        DeviceInfo("d", 0)
    with pytest.raises(ValueError, match="count must be >= 1"):
        DeviceInfo("d", 1, 0)


@pytest.mark.parametrize("api, text", [
    (SDK_API_VERSION + 1, f"upgrade glow-compiler to a release that supports SDK API {SDK_API_VERSION + 1}"),
    (0, f"upgrade glow-backend-x to a release built for SDK API {SDK_API_VERSION}"),
    ("1", "which is not an integer"),
])
def test_incompatibility_message_says_which_versions_work_and_what_to_upgrade(api: object, text: str) -> None:
    msg = incompatibility_message(api, "glow-backend-x")
    assert text in msg and f"this glow supports {supported_text()}" in msg and str(SDK_API_VERSION) in supported_text()
    assert not is_compatible(api) and is_compatible(SDK_API_VERSION) and not is_compatible(True)


def test_a_backend_object_built_for_another_api_is_refused() -> None:
    class Future(MappingBackend):
        sdk_api_version = 99

    class P:
        @hookimpl
        def glow_backends(self) -> list[BackendSpec]:
            return [BackendSpec("future", Future, SDK_API_VERSION)]  # the spec claims the current version

    reg = Registry()
    reg.register_plugin(P(), "future", "glow-backend-future", "9")
    with pytest.raises(PluginError, match="incompatible.*SDK API version 99.*upgrade glow"):
        reg.get("future")
    rec = reg.record("future")
    assert rec is not None and rec.status == "incompatible"


def test_mandatory_primitive_set() -> None:
    prims = mandatory_primitives()
    assert set(prims) == primitive_kinds() - optional_primitives() and "Add" in prims and "Softmax" not in prims
    assert {"IntConv", "IntMatMul", "Requantize"} == optional_primitives()  # int8: optional
    assert prims["Add"] == frozenset({E.FLOAT32, E.INT32, E.INT64})
    assert prims["Conv"] == F32 and prims["MatMul"] == F32  # compute-heavy kinds: float32 only
    assert all(elems <= MANDATORY_ELEMS and elems for elems in prims.values())
    assert mandatory_elems("Softmax") == frozenset()


def test_capability_report() -> None:
    full = capability_report(TemplateBackend())
    assert full.count("complete") == len(primitive_kinds()) and not full.missing_mandatory
    assert full.count("native") == 0 and full.count("lowered") + full.count("unsupported") > 50
    part = capability_report(MappingBackend())
    assert part.missing_mandatory["Add"] == ("int32", "int64")
    assert part.count("native") == 1  # Relu
    rec = capability_report(RecordBackend())
    relu = next(k for k in rec.kinds if k.kind == "Relu")
    assert relu.status == "native" and relu.predicate == "rank <= 2"
    text = "\n".join(rec.lines())
    assert "[only: rank <= 2]" in text and "device records0, 4 GiB x 1" in text
    d = rec.as_dict()
    assert d["backend"] == "records" and d["sdk_api_version"] == SDK_API_VERSION and d["device"]["memory_bytes"] == 4 << 30


def test_the_capability_report_shows_int8_coverage() -> None:
    """A backend with the int8 primitives runs quantized models natively; one without them is told which
    products an int8 model needs from another device."""
    full = capability_report(TemplateBackend()).int8_line()
    assert full.startswith("int8: ") and full.endswith("quantized models run natively")
    eight = [k for k in capability_report(TemplateBackend()).kinds if k.eight_bit is not None]
    assert {"IntConv", "IntMatMul", "Requantize", "Reshape"} <= {k.kind for k in eight}
    assert all(k.kind != "Sqrt" for k in eight)  # (a float-only primitive has no 8-bit form)
    part = capability_report(MappingBackend()).int8_line()
    assert part.endswith("int8 models need IntConv, IntMatMul, Requantize from another device"), part
    assert part.startswith("int8: 0 of ")

