"""``zoo:NAME`` model references: the light model zoo shipped inside the onnx package.

The onnx package carries nine small ("light") versions of classic image
classifiers under ``onnx/backend/test/data/light/light_<file>.onnx``. They
keep the real topology (and the real input and output shapes) with tiny
weights, so they are ideal for trying a backend without downloading anything::

    glow run zoo:resnet50 --backend interpreter

In: a reference such as ``"zoo:resnet50"``. Out: the path of the model file.
These models use IR version 3, which lists every initializer as a graph input
too; the importer treats initializers as constants, so the only real input is
the image (``data_0`` / ``data``).

Also here: seeded random weights for these models (:func:`with_random_weights`)
and seeded random inputs for any model (:func:`random_feeds`,
:func:`model_feeds`), the ones ``glow run``, ``glow bench``, ``glow compare``,
the conformance suite and the tests use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    import onnx

from glow_core.errors import ModelError
from glow_core.ir.types import ElemKind, TensorType

#: ``zoo:`` prefix of a model reference.
PREFIX = "zoo:"

#: zoo name -> file stem inside onnx/backend/test/data/light (``light_<stem>.onnx``).
MODELS: dict[str, str] = {
    "alexnet": "bvlc_alexnet",
    "densenet121": "densenet121",
    "inception_v1": "inception_v1",
    "inception_v2": "inception_v2",
    "resnet50": "resnet50",
    "shufflenet": "shufflenet",
    "squeezenet": "squeezenet",
    "vgg19": "vgg19",
    "zfnet512": "zfnet512",
}

_ALIASES: dict[str, str] = {stem: name for name, stem in MODELS.items()}

M = TypeVar("M")


def zoo_dir() -> Path:
    """The folder of the light models inside the installed onnx package."""
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def names() -> list[str]:
    """The model names accepted after ``zoo:``."""
    return sorted(MODELS)


def is_zoo_ref(model: object) -> bool:
    """Is ``model`` a string of the form ``zoo:NAME``?"""
    return isinstance(model, str) and model.startswith(PREFIX)


def canonical_name(name: str) -> str:
    """``"ResNet50"`` -> ``"resnet50"``; also accepts the file stems (``bvlc_alexnet``)."""
    key = name.strip().lower().replace("-", "_")
    if key in MODELS:
        return key
    key = key.removeprefix("light_")
    if key in _ALIASES:
        return _ALIASES[key]
    raise ModelError(
        f"unknown zoo model '{name}'; choose one of: {', '.join(names())}",
        hint="these are the light models shipped inside the onnx package",
    )


def model_path(name: str) -> Path:
    """The file of zoo model ``name`` (without the ``zoo:`` prefix)."""
    canon = canonical_name(name)
    path = zoo_dir() / f"light_{MODELS[canon]}.onnx"
    if not path.is_file():
        import onnx

        raise ModelError(
            f"zoo model '{canon}' is not shipped by the installed onnx package {onnx.__version__} "
            f"(looked for {path})",
            hint="install an onnx release that ships onnx/backend/test/data/light (pip install -U onnx)",
        )
    return path


def resolve(ref: str) -> Path:
    """``"zoo:resnet50"`` -> the model's path; a ref without the prefix is taken as a zoo name."""
    name = ref.removeprefix(PREFIX)
    if not name:
        raise ModelError(f"'{ref}' names no zoo model; choose one of: {', '.join(names())}")
    return model_path(name)


def resolve_model(model: M) -> M | Path:
    """Resolve ``zoo:NAME`` strings to paths; anything else is returned unchanged."""
    if is_zoo_ref(model):
        assert isinstance(model, str)
        return resolve(model)
    return model


def describe(model: str | os.PathLike[str]) -> str:
    """A short label for messages: ``zoo:resnet50 (/.../light_resnet50.onnx)`` or the path."""
    if is_zoo_ref(model):
        assert isinstance(model, str)
        return f"{model} ({resolve(model)})"
    return os.fspath(model)


#: variance gain of the random conv / gemm weights per model (2: He, for ReLU nets without batch norm;
#: smaller where residual sums or fixed batch norms let activations grow)
RANDOM_WEIGHT_GAINS: dict[str, float] = {"densenet121": 1.0, "inception_v2": 1.0, "resnet50": 0.8, "shufflenet": 0.5}


def with_random_weights(model: onnx.ModelProto, gain: float = 2.0, seed: int = 0,
                        expose_logits: bool = False) -> onnx.ModelProto:
    """A copy of a light model with seeded random weights.

    The light models build every weight with ``ConstantOfShape`` (all 0.02), so every
    class gets the same score whatever the input. This replaces each
    ``ConstantOfShape`` of an initializer shape by a random initializer: filters with
    fan-in scaled normal values, biases and means small, scales and variances in
    [0.5, 1.5]. With ``expose_logits``, the operand of a final Softmax becomes a second
    output.
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    first_user: dict[str, tuple[onnx.NodeProto, int]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            first_user.setdefault(name, (node, i))
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            nodes.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        user, idx = first_user.get(node.output[0], (None, -1))
        op = user.op_type if user is not None else ""
        if (op == "BatchNormalization" and idx in (2, 3)) or (op in ("Conv", "Gemm") and idx == 2):
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)  # biases and means
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            if op == "Gemm" and user is not None and not any(a.name == "transB" and a.i for a in user.attribute):
                fan_in = shape[0]
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(gain / max(fan_in, 1)))
        else:
            w = rng.uniform(0.5, 1.5, shape).astype(np.float32)  # scales and variances
        weights.append(numpy_helper.from_array(w, node.output[0]))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(weights)
    out.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in weights)
    if expose_logits:
        producer = {o: n for n in out.graph.node for o in n.output}
        last = producer.get(out.graph.output[0].name)
        if last is not None and last.op_type == "Softmax":
            logits = out.graph.output.add()
            logits.CopyFrom(out.graph.output[0])  # Softmax keeps the type of its operand
            logits.name = last.input[0]
    return out


def load_with_random_weights(name: str, seed: int = 0, expose_logits: bool = False) -> onnx.ModelProto:
    """Zoo model ``name`` with seeded random weights (gain chosen per model)."""
    import onnx

    canon = canonical_name(name.removeprefix(PREFIX))
    model = onnx.load(str(model_path(canon)))
    return with_random_weights(model, RANDOM_WEIGHT_GAINS.get(canon, 2.0), seed, expose_logits)


# -- random inputs ----------------------------------------------------------------------

def random_array(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Uniform [0, 1) floats, small non-negative integers (0..9), fair booleans, of type ``t``."""
    if t.elem.is_float:
        return rng.random(t.shape, dtype=np.float64).astype(t.dtype)
    if t.elem == ElemKind.BOOL:
        return rng.random(t.shape) < 0.5
    return rng.integers(0, 10, size=t.shape).astype(t.dtype)


def random_feeds(types: Mapping[str, TensorType], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs (:func:`random_array`) for inputs of the given types, in their order."""
    rng = np.random.default_rng(seed)
    return {name: random_array(t, rng) for name, t in types.items()}


def model_input_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    """The static types of a model's real inputs (graph inputs that are not initializers)."""
    from glow_core.importer.context import onnx_elem

    inits = {t.name for t in model.graph.initializer}
    types: dict[str, TensorType] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
            raise ModelError(f"input '{vi.name}' has a symbolic dimension: random inputs need static shapes",
                             hint="give the input's shape (glow run --input-shape)")
        types[vi.name] = TensorType(onnx_elem(tt.elem_type, f"input '{vi.name}'"),
                                    tuple(d.dim_value for d in tt.shape.dim))
    return types


def model_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for every real input of ``model`` (static shapes only)."""
    return random_feeds(model_input_types(model), seed)


__all__ = ["MODELS", "PREFIX", "RANDOM_WEIGHT_GAINS", "canonical_name", "describe", "is_zoo_ref",
           "load_with_random_weights", "model_feeds", "model_input_types", "model_path", "names", "random_array",
           "random_feeds", "resolve", "resolve_model", "with_random_weights", "zoo_dir"]
