"""A scaffolded backend runs quantized models out of the box, and still does after the vendor guide's step 4
(which narrows the declarations: its snippet keeps the quantized element kinds)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

import glow_core
from glow_core import zoo
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import ElemKind
from glow_core.plugin_host import registry
from glow_core.quantization import QuantizationConfig
from glow_sdk import BackendSpec, Capability, hookimpl
from glow_tools.scaffold.backend import ELEMS, TemplateBackend, declared_elems

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "vendor-guide.md"


class GuideStep4Backend(TemplateBackend):
    """The template with the capabilities() of the vendor guide's step 4 (the Gelu line left out)."""

    name = "guide-step4"

    def capabilities(self) -> Sequence[Capability]:
        return [Capability(k, declared_elems(k)) for k in sorted(self.kernels) if k != "Gelu"]


class Plugin:
    @hookimpl
    def glow_backends(self) -> list[BackendSpec]:
        return [BackendSpec(b.name, b, sdk_api_version=2) for b in (TemplateBackend, GuideStep4Backend)]


@pytest.fixture(scope="module", autouse=True)
def scaffolds() -> None:
    if registry().record(TemplateBackend.name) is None:
        registry().register_plugin(Plugin(), "scaffold-int8")


def test_the_guide_snippet_keeps_the_quantized_element_kinds() -> None:
    assert "*(Capability(k, declared_elems(k)) for k in sorted(self.kernels) if k != \"Gelu\")" in GUIDE.read_text()
    for kind in ("IntConv", "IntMatMul", "Requantize"):
        assert {ElemKind.INT8, ElemKind.UINT8} & declared_elems(kind) and ELEMS & get_kind(kind).elems <= \
            declared_elems(kind)
    assert not re.search(r"Capability\(k, ELEMS & get_kind\(k\)\.elems\)", GUIDE.read_text())


@pytest.mark.parametrize("backend", [TemplateBackend.name, GuideStep4Backend.name])
def test_a_scaffolded_backend_runs_digits_quantized_with_the_interpreters_accuracy(backend: str,
                                                                                   tmp_path: Path) -> None:
    evaluation = zoo.evaluation("zoo:digits")
    assert evaluation is not None
    x, y = evaluation.load()
    accuracy = {}
    for name in (backend, "interpreter"):  # each profiled on itself: they lower the model differently
        path = tmp_path / f"{name}.json"
        glow_core.profile("zoo:digits", {"image": x[:100]}, backend=name).save(path)
        net = glow_core.compile("zoo:digits", name, quantize=QuantizationConfig(profile=path))
        assert net.stats.quantized.count >= 3  # the convolution, the pooling and the classifier run in int8
        accuracy[name] = zoo.accuracy(evaluation.outputs(net, x), y)
    assert accuracy[backend] == accuracy["interpreter"] >= 0.95, accuracy
