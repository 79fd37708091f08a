"""Helpers for graph IR tests: small functions and scratch node kinds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from glow_core.ir import kinds
from glow_core.ir.graph import Function, Node
from glow_core.ir.kinds import NodeKind, define_kind
from glow_core.ir.types import ElemKind, TensorType

F32 = ElemKind.FLOAT32


def f32(*shape: int) -> TensorType:
    return TensorType(F32, shape)


def small_function(name: str = "main") -> tuple[Function, dict[str, Any]]:
    """``y = Relu(Add(x, c))`` with x: float32[2,3] and a constant c."""
    fn = Function(name)
    x = fn.add_input("x", f32(2, 3))
    c = fn.add_constant(np.ones((2, 3), np.float32), "c")
    add = fn.create("Add", [x, c], name="add", origin="onnx_add")
    relu = fn.create("Relu", [add.result], name="relu")
    fn.set_output("y", relu.result)
    return fn, {"x": x, "c": c, "add": add, "relu": relu}


@pytest.fixture
def scratch_kinds() -> Iterator[Callable[..., NodeKind]]:
    """``make(name, **define_kind_args)``: a kind that exists only for this test."""
    kinds.all_kinds()  # the real table first, so a clash with a real name is reported
    made: list[str] = []

    def make(name: str, **kw: Any) -> NodeKind:
        spec = define_kind(name, **kw)
        made.append(name)
        return spec

    yield make
    for name in made:
        kinds._KINDS.pop(name, None)


def names(nodes: list[Node]) -> list[str]:
    return [n.name for n in nodes]
