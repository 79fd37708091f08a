"""The ``BackendTest`` example of docs/python-api.md, run as written: ONNX node tests on glow's cpu backend.

The example's code block is taken from the page, executed, and the unittest
suite it builds is run: exactly the selected node tests must run (BackendTest
skips the others) and pass, and every compilation must have been for the ``cpu`` backend.
"""

from __future__ import annotations

import io
import unittest
from typing import Any

import pytest

import glow_core.onnx_backend
from tests.docs.mdblocks import DOCS

PAGE = DOCS / "python-api.md"
EXPECTED = {"test_abs_cpu", "test_add_cpu", "test_relu_cpu", "test_matmul_2d_cpu", "test_softmax_axis_1_cpu",
            "test_conv_with_strides_padding_cpu"}


def _example() -> str:
    text = PAGE.read_text(encoding="utf-8")
    blocks = [b.split("\n", 1)[1] for b in text.split("```python")[1:]]
    code = [b.split("```", 1)[0] for b in blocks if "BackendTest(" in b]
    assert len(code) == 1, "docs/python-api.md should have exactly one BackendTest example"
    return code[0]


def test_backend_test_example_runs_node_tests_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("glow_backend_cpu")
    compiled_for: list[str] = []
    real_compile = glow_core.onnx_backend.compile_model

    def spy(model: Any, backend: str, *args: Any, **kwargs: Any) -> Any:
        compiled_for.append(backend)
        return real_compile(model, backend, *args, **kwargs)

    monkeypatch.setattr(glow_core.onnx_backend, "compile_model", spy)
    namespace: dict[str, Any] = {"__name__": "test_onnx_glow_cpu"}
    exec(compile(_example(), str(PAGE), "exec"), namespace)  # noqa: S102  (our own doc's example)

    cases = {name: case for name, case in namespace.items()
             if isinstance(case, type) and issubclass(case, unittest.TestCase)}
    assert cases, "the example puts no test cases in its module"
    tests = [t for c in cases.values() for t in unittest.defaultTestLoader.loadTestsFromTestCase(c)
             if isinstance(t, unittest.TestCase)]
    names = {t.id().rsplit(".", 1)[1] for t in tests}
    suite = unittest.TestSuite(tests)
    out = io.StringIO()
    result = unittest.TextTestRunner(stream=out).run(suite)
    # BackendTest reports every test its include pattern does not select as skipped
    skipped = {t.id().rsplit(".", 1)[1] for t, _ in result.skipped}
    ran = names - skipped
    assert ran == EXPECTED
    assert result.wasSuccessful(), out.getvalue()
    assert result.testsRun - len(result.skipped) == len(EXPECTED)
    assert compiled_for and set(compiled_for) == {"cpu"}
