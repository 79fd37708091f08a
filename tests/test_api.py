"""The Python API: ``glow_core.compile`` and ``CompiledNetwork.run`` feed checking."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import glow_core
from glow_core import zoo
from glow_core.pipeline import CompiledNetwork
from glow_core.errors import (
    BackendError,
    ExecutionError,
    GlowError,
    ImportShapeError,
    InputError,
    ModelError,
    UnknownBackendError,
    UnsupportedOpsError,
)
from glow_core.ir.graph import Function
from glow_core.ir.types import ElemKind, TensorType
from glow_sdk import Backend, CompiledFunction, CompileOptions
from tests.cliutil import add_relu_model, int_add_model, save, unsupported_op_model

X = (np.arange(10, dtype=np.float32) - 5).reshape(1, 10)
Y = np.full((1, 10), 0.5, np.float32)
EXPECTED = np.maximum(X + Y, 0)


@pytest.fixture(scope="module")
def net() -> CompiledNetwork:
    return glow_core.compile(add_relu_model(), backend="interpreter")


def test_compile_a_model_proto_and_run(net: CompiledNetwork) -> None:
    out = net.run({"x": X, "y": Y})
    assert list(out) == ["out"]
    np.testing.assert_array_equal(out["out"], EXPECTED)
    assert out["out"].dtype == np.float32
    assert set(net.input_types) == {"x", "y"} and net.output_names == ["out"]
    assert net.stats.nodes_by_kind == {"Add": 1, "Relu": 1}


def test_compile_a_path_str_pathlike_and_bytes(tmp_path: Path) -> None:
    path = save(add_relu_model(), tmp_path / "m.onnx")
    for model in (path, str(path), path.read_bytes()):
        out = glow_core.compile(model, "interpreter").run({"x": X, "y": Y})
        np.testing.assert_array_equal(out["out"], EXPECTED)


def test_compile_with_input_shapes_for_symbolic_dims() -> None:
    net = glow_core.compile(add_relu_model(batch="N"), "interpreter", input_shapes={"y": [3, 10]}, threads=2)
    y = np.ones((3, 10), np.float32)
    np.testing.assert_array_equal(net.run({"x": X, "y": y})["out"], np.maximum(X + y, 0))
    dynamic = glow_core.compile(add_relu_model(batch="N"), "interpreter")  # compiles per shape fed (dynamic-shapes.md)
    np.testing.assert_array_equal(dynamic.run({"x": X, "y": y})["out"], np.maximum(X + y, 0))
    # int8 of open symbols compiles per shape too (dynamic-shapes.md, "The rest of the stack"): the profile is read now
    with pytest.raises(glow_core.errors.InputError, match="cannot read profile no-such-profile.json"):
        glow_core.compile(add_relu_model(batch="N"), "interpreter", quantize="no-such-profile.json")


def test_run_repeatedly_gives_the_same_answer(net: CompiledNetwork) -> None:
    a = net.run({"x": X, "y": Y})["out"]
    a[...] = 42  # outputs are the caller's: mutating them must not affect later runs
    np.testing.assert_array_equal(net.run({"x": X, "y": Y})["out"], EXPECTED)


@pytest.mark.parametrize("feeds, pattern", [
    ({"x": X}, r"missing input\(s\) 'y'; the network takes x: float32\[1,10\], y: float32\[1,10\]"),
    ({}, r"missing input\(s\) 'x', 'y'"),
    ({"x": X, "y": Y, "z": Y}, r"unknown input\(s\) 'z'"),
    ({"x": X, "z": Y}, r"missing input\(s\) 'y'; unknown input\(s\) 'z'"),
    ({"x": X, "y": Y.astype(np.float64)}, r"input 'y' has dtype float64, expected float32"),
    ({"x": X, "y": Y.astype(np.int32)}, r"input 'y' has dtype int32, expected float32"),
    ({"x": X, "y": np.ones((2, 10), np.float32)}, r"input 'y' has shape \[2, 10\], expected \[1, 10\]"),
    ({"x": X, "y": np.ones(10, np.float32)}, r"input 'y' has shape \[10\], expected \[1, 10\]"),
    ({"x": X, "y": np.float32(1.0)}, r"input 'y' has shape \[\], expected \[1, 10\]"),
    ({"x": X, "y": "hello"}, r"input 'y' must be a numpy array, got str"),
    ({"x": X, "y": None}, r"input 'y' must be a numpy array, got NoneType"),
    ({"x": X, "y": {"a": 1}}, r"input 'y' must be a numpy array, got dict"),
    ({"x": X, "y": [[1.0, 2.0], [3.0]]}, r"input 'y' cannot be converted to an array"),
    ({"x": X, "y": np.array([object()] * 10).reshape(1, 10)}, r"input 'y' has dtype object"),
    ({"x": X, 3: Y}, r"input names must be strings"),
])
def test_run_rejects_bad_feeds_with_clear_input_errors(net: CompiledNetwork, feeds: dict[Any, Any],
                                                       pattern: str) -> None:
    with pytest.raises(InputError, match=pattern) as info:
        net.run(feeds)
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize("feeds", [[X, Y], (X, Y), X, None, "x"])
def test_run_rejects_non_mappings(net: CompiledNetwork, feeds: Any) -> None:
    with pytest.raises(InputError, match="run\\(\\) takes a dict of input name -> numpy array"):
        net.run(feeds)


def test_wrong_dtype_error_says_how_to_convert(net: CompiledNetwork) -> None:
    with pytest.raises(InputError) as info:
        net.run({"x": X, "y": Y.astype(np.float64)})
    assert "astype(numpy.float32)" in info.value.one_line()


def test_lists_and_scalars_convert_when_exact(net: CompiledNetwork) -> None:
    out = net.run({"x": X.tolist(), "y": Y.tolist()})
    np.testing.assert_array_equal(out["out"], EXPECTED)
    inet = glow_core.compile(int_add_model(), "interpreter")
    np.testing.assert_array_equal(inet.run({"a": [1, 2, 3], "b": [4, 5, 6]})["out"], [5, 7, 9])
    with pytest.raises(InputError, match="dtype float64, expected int64"):
        inet.run({"a": [1.5, 2, 3], "b": [4, 5, 6]})


def test_non_contiguous_inputs_are_accepted(net: CompiledNetwork) -> None:
    big = np.zeros((2, 20), np.float32)
    big[0, ::2] = X[0]
    view = big[:1, ::2]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(net.run({"x": view, "y": Y})["out"], EXPECTED)


@pytest.mark.parametrize("model, error, pattern", [
    (12, ModelError, "model must be a path, 'zoo:NAME', an onnx.ModelProto or bytes, got int"),
    (b"\x00\x01garbage", ModelError, "not a serialized ONNX model|holds no graph|checker"),
    ("no/such/model.onnx", ModelError, "does not exist"),
    ("zoo:nosuch", ModelError, "unknown zoo model 'nosuch'; choose one of: alexnet"),
])
def test_compile_rejects_bad_models(model: Any, error: type[GlowError], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        glow_core.compile(model, "interpreter")


def test_compile_rejects_bad_arguments() -> None:
    with pytest.raises(UnknownBackendError, match="choose one of: .*interpreter"):
        glow_core.compile(add_relu_model(), "nosuch")
    with pytest.raises(ImportShapeError, match="not a sequence of integers"):
        glow_core.compile(add_relu_model(batch="N"), "interpreter", input_shapes={"y": "abc"})
    with pytest.raises(ImportShapeError, match="dict of input name"):
        glow_core.compile(add_relu_model(), "interpreter", input_shapes=[(1, 10)])
    with pytest.raises(ImportShapeError, match="negative"):
        glow_core.compile(add_relu_model(batch="N"), "interpreter", input_shapes={"y": (-1, 10)})
    with pytest.raises(ImportShapeError, match="'q'"):
        glow_core.compile(add_relu_model(), "interpreter", input_shapes={"q": (1,)})
    with pytest.raises(InputError, match="threads"):
        glow_core.compile(add_relu_model(), "interpreter", threads=0)


def test_truncated_model_file(tmp_path: Path) -> None:
    data = onnx.load_from_string(add_relu_model().SerializeToString()).SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="t.onnx"):
        glow_core.compile(path, "interpreter")


def test_unsupported_ops_are_reported_all_at_once() -> None:
    with pytest.raises(UnsupportedOpsError) as info:
        glow_core.compile(unsupported_op_model(), "interpreter")
    msg = info.value.one_line()
    assert "Frobnicate" in msg and "frob1" in msg and "frob2" in msg and "2 nodes" in msg


def test_zoo_references() -> None:
    assert zoo.names() == sorted([*zoo.TRAINED, *zoo.MODELS]) and len(zoo.MODELS) == 9  # tests/test_zoo_digits.py
    for name in zoo.MODELS:
        path = zoo.resolve(f"zoo:{name}")
        assert path.is_file() and path.name == f"light_{zoo.MODELS[name]}.onnx"
    assert zoo.resolve("zoo:bvlc_alexnet") == zoo.resolve("zoo:alexnet")
    assert zoo.resolve("zoo:ResNet50") == zoo.resolve("zoo:resnet50")
    assert zoo.resolve_model("m.onnx") == "m.onnx"
    with pytest.raises(ModelError, match="choose one of: alexnet, densenet121, digits, inception_v1"):
        zoo.resolve("zoo:resnet")
    with pytest.raises(ModelError, match="names no zoo model"):
        zoo.resolve("zoo:")


def test_zoo_random_inputs() -> None:
    proto = onnx.load(str(zoo.model_path("resnet50")))
    types = zoo.model_input_types(proto)
    assert list(types) == ["gpu_0/data_0"] and types["gpu_0/data_0"].shape == (1, 3, 224, 224)  # initializers left out
    a, b = zoo.model_feeds(proto, seed=3), zoo.model_feeds(proto, seed=3)
    x = a["gpu_0/data_0"]
    assert x.dtype == np.float32 and 0.0 <= x.min() and x.max() < 1.0
    np.testing.assert_array_equal(x, b["gpu_0/data_0"])
    assert not np.array_equal(x, zoo.model_feeds(proto, seed=4)["gpu_0/data_0"])
    mixed = zoo.random_feeds({"i": TensorType(ElemKind.INT64, (50,)),
                              "b": TensorType(ElemKind.BOOL, (50,))}, seed=0)
    assert mixed["i"].dtype == np.int64 and 0 <= mixed["i"].min() and mixed["i"].max() <= 9
    assert mixed["b"].dtype == np.bool_ and 0 < mixed["b"].sum() < 50
    symbolic = onnx.load(str(zoo.model_path("resnet50")))
    symbolic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(ModelError, match="input 'gpu_0/data_0' has a symbolic dimension"):
        zoo.model_feeds(symbolic)


class _BuggyExe(CompiledFunction):
    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise ZeroDivisionError("oops")


class _BuggyBackend(Backend):
    """A third-party backend with bugs: compile or execute raise plain exceptions."""

    name = "buggy"

    def __init__(self, fail_compile: bool) -> None:
        self.fail_compile = fail_compile

    def supported_kinds(self) -> Mapping[str, frozenset[ElemKind]]:
        return {"Add": frozenset({ElemKind.FLOAT32}), "Relu": frozenset({ElemKind.FLOAT32})}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        if self.fail_compile:
            raise IndexError("list index out of range")
        return _BuggyExe(function)


def test_backend_bugs_surface_as_glow_errors_naming_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from glow_core import driver

    monkeypatch.setattr(driver, "get_backend", lambda name: _BuggyBackend(fail_compile=True))
    with pytest.raises(BackendError, match="backend 'buggy' failed to compile the model: IndexError"):
        glow_core.compile(add_relu_model(), "buggy")
    monkeypatch.setattr(driver, "get_backend", lambda name: _BuggyBackend(fail_compile=False))
    net = glow_core.compile(add_relu_model(), "buggy")
    with pytest.raises(ExecutionError, match="backend 'buggy' failed while running: ZeroDivisionError: oops"):
        net.run({"x": X, "y": Y})


def test_feed_check_follows_a_replaced_input_types() -> None:
    """The checks of a repeated run (made once from input_types) are remade when input_types is replaced."""
    n2 = glow_core.compile(add_relu_model(), "interpreter")
    np.testing.assert_array_equal(n2.run({"x": X, "y": Y})["out"], EXPECTED)
    n2.input_types = {k: t.with_shape((2, 10)) for k, t in n2.input_types.items()}
    with pytest.raises(InputError, match=r"input 'x' has shape \[1, 10\], expected \[2, 10\]"):
        n2.run({"x": X, "y": Y})
