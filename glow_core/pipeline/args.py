"""The public argument checks every entry point applies before the pipeline runs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from glow_core import zoo
from glow_core.errors import ImportShapeError, InputError, ModelError
from glow_core.importer.structured import OptShape, SeqShape
from glow_core.importer.symbols import InputShapes, check_dims, dims_of


def check_model_arg(model: Any) -> str | os.PathLike[str] | onnx.ModelProto:
    """A path, ``zoo:NAME`` (resolved), an ``onnx.ModelProto`` or its serialized bytes (parsed); else ModelError."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except Exception as e:  # noqa: BLE001  (protobuf raises assorted errors on garbage)
            raise ModelError(f"the bytes given are not a serialized ONNX model ({type(e).__name__}: {e})") from None
        return proto
    if isinstance(model, str):
        return zoo.resolve_model(model)
    if isinstance(model, os.PathLike):
        return model
    raise ModelError(
        f"model must be a path, 'zoo:NAME', an onnx.ModelProto or bytes, got {type(model).__name__}"
    )


def check_input_shapes(input_shapes: Any, dims: Any = None) -> InputShapes | None:
    """``{name: shape}`` with every shape a tuple of non-negative ints (or a sequence / optional shape), carrying
    the checked ``dims`` (symbol -> size or bound; those ``input_shapes`` already carries, then ``dims``):
    :class:`~glow_core.importer.symbols.InputShapes`. None when neither gives anything."""
    merged = {**dims_of(input_shapes), **check_dims(dims)}
    if input_shapes is None:
        return InputShapes({}, merged) if merged else None
    if not isinstance(input_shapes, Mapping):
        raise ImportShapeError(
            f"input_shapes must be a dict of input name -> shape, got {type(input_shapes).__name__}"
        )
    out: dict[str, Any] = {}
    for name, shape in input_shapes.items():
        if isinstance(shape, (SeqShape, OptShape)):  # a sequence / optional input (glow_core/importer/structured.py)
            out[str(name)] = shape
            continue
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        try:
            sizes = tuple(int(d) for d in shape)
            if any(isinstance(d, float) and not float(d).is_integer() for d in shape):
                raise ValueError
        except (TypeError, ValueError):
            raise ImportShapeError(f"input_shapes['{name}'] = {shape!r} is not a sequence of integers") from None
        if any(d < 0 for d in sizes):
            raise ImportShapeError(f"input_shapes['{name}'] = {list(sizes)} has a negative dimension")
        out[str(name)] = sizes
    return InputShapes(out, merged)


def check_threads(threads: Any, *, optional: bool = True) -> None:
    """An InputError unless ``threads`` is a positive integer (or None when ``optional``)."""
    if threads is None and optional:
        return
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InputError(f"threads must be a positive integer, got {threads!r}")
