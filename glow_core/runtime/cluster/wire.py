"""A partition on the wire: its graph as a small flat description, its weights apart.

A prepared sub-function cannot go through pickle as is (its nodes form a deep linked graph and
their kinds hold closures), and its weights should not travel with every copy of it. So
:func:`encode_function` writes the graph as plain tuples -- inputs, constant *names and types*,
nodes (kind name, operand references, attributes), outputs -- and returns the constants' payloads
separately, as a dict name -> array that the caller puts in Ray's object store once.
:func:`decode_function` rebuilds the same function (same names, same order, the kinds looked up in
the kind table, so every type is inferred and checked again) from the description and the weights.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_core.errors import GraphError
from glow_core.ir.graph import Constant, Function, Placeholder, Value
from glow_core.ir.types import TensorType

#: operand reference: ("i", input index) | ("c", constant index) | ("n", node index, output index) | None
Ref = tuple[Any, ...] | None


def _refs(function: Function) -> dict[int, Ref]:
    refs: dict[int, Ref] = {}
    for i, p in enumerate(function.inputs):
        refs[id(p)] = ("i", i)
    for i, c in enumerate(function.constants):
        refs[id(c)] = ("c", i)
    for i, n in enumerate(function.nodes):
        for j, o in enumerate(n.outputs):
            refs[id(o)] = ("n", i, j)
    return refs


def encode_function(function: Function) -> tuple[bytes, dict[str, np.ndarray]]:
    """(description, weights by constant name) of ``function``; see the module docstring."""
    refs = _refs(function)

    def ref(v: Value | None) -> Ref:
        if v is None:
            return None
        if id(v) not in refs:
            raise GraphError(f"encode_function: {v.name} is not a value of function {function.name}")
        return refs[id(v)]

    spec = {
        "name": function.name,
        "inputs": [(p.name, p.type) for p in function.inputs],
        "constants": [(c.name, c.type) for c in function.constants],
        "nodes": [(n.kind.name, [ref(v) for v in n.inputs], dict(n.attrs), n.name, n.origin) for n in function.nodes],
        "outputs": [(name, ref(v)) for name, v in function.outputs],
    }
    weights = {c.name: c.payload for c in function.constants}
    return pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL), weights


def decode_function(description: bytes, weights: Mapping[str, np.ndarray]) -> Function:
    """The function :func:`encode_function` described (its kinds and types checked again)."""
    spec = pickle.loads(description)  # noqa: S301  (written by encode_function of the same program)
    fn = Function(spec["name"])
    inputs: list[Placeholder] = [fn.add_input(name, ty) for name, ty in spec["inputs"]]
    consts: list[Constant] = []
    for name, ty in spec["constants"]:
        if name not in weights:
            raise GraphError(f"decode_function: the weights of constant {name} are missing")
        payload = weights[name]
        consts.append(fn.add_constant(payload, name, TensorType(ty.elem, ty.shape, ty.scale, ty.offset)))
    outs: list[list[Value]] = []

    def value(r: Ref) -> Value | None:
        if r is None:
            return None
        if r[0] == "i":
            return inputs[r[1]]
        if r[0] == "c":
            return consts[r[1]]
        return outs[r[1]][r[2]]

    for kind, operands, attrs, name, origin in spec["nodes"]:
        node = fn.create(kind, [value(r) for r in operands], attrs, name=name, origin=origin)
        outs.append(list(node.outputs))
    for name, r in spec["outputs"]:
        v = value(r)
        assert v is not None
        fn.set_output(name, v)
    return fn
