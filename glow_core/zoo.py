"""``zoo:NAME`` model references: a trained model shipped with glow, and the light models of onnx.

Two tables of models, both resolved from ``zoo:NAME`` to a file:

- :data:`TRAINED`: models trained by a script of this repository and shipped inside
  ``glow_core/zoo_data`` together with a labelled held-out set (an :class:`Evaluation`).
  ``zoo:digits`` is a small CNN trained by ``scripts/train_digits.py`` on scikit-learn's
  8x8 handwritten digits; ``glow run`` prints its accuracy on the held-out digits::

      glow run zoo:digits --backend cpu

- :data:`MODELS`: the nine small ("light") versions of classic image classifiers
  the onnx package carries under ``onnx/backend/test/data/light/light_<file>.onnx``.
  They keep the real topology (and the real input and output shapes) with
  placeholder weights (every weight 0.02), so they exercise a backend without
  downloading anything but classify nothing. They use IR version 3, which lists
  every initializer as a graph input too; the importer treats initializers as
  constants, so the only real input is the image (``data_0`` / ``data``).

In: a reference such as ``"zoo:digits"``. Out: the path of the model file.

Also here: seeded random weights for these models (:func:`with_random_weights`)
and seeded random inputs for any model (:func:`random_feeds`,
:func:`model_feeds`), the ones ``glow run``, ``glow bench``, ``glow compare``,
the conformance suite and the tests use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

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

#: the folder of the trained models shipped inside glow_core (package data)
DATA_DIR = Path(__file__).resolve().parent / "zoo_data"


class Runnable(Protocol):
    """What an evaluation needs of a compiled network (``glow_core.pipeline.CompiledNetwork`` is one)."""

    @property
    def input_types(self) -> Mapping[str, TensorType]: ...

    @property
    def output_names(self) -> list[str]: ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    """Share of samples whose highest score (first one on ties) is at the label's index; scores [N, ...]."""
    predicted = np.argmax(scores.reshape(len(scores), -1), axis=1)
    return float(np.mean(predicted == labels))


@dataclass(frozen=True)
class Metric:
    """A score of a model's stacked outputs against the labels, and how to print it."""

    score: Callable[[np.ndarray, np.ndarray], float]
    fmt: str


#: metric name -> how it is computed and printed
METRICS: dict[str, Metric] = {
    "accuracy": Metric(accuracy, "{:.1%}"),
}


@dataclass(frozen=True)
class Evaluation:
    """A labelled held-out set shipped with a zoo model, and the metric ``glow run`` reports on it.

    ``file`` is an ``.npz`` in :data:`DATA_DIR` with ``x`` (the samples, stacked on a first axis,
    each one the model's input once given a leading batch axis of 1) and ``y`` (the labels).
    """

    file: str
    metric: str
    samples: str  # what a sample is, for the report: "held-out digits"

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` of the held-out set."""
        path = DATA_DIR / self.file
        try:
            with np.load(path, allow_pickle=False) as data:
                x, y = data["x"], data["y"]
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"cannot read the held-out set '{path}': {e}",
                             hint="reinstall glow, or rerun the zoo model's training script under scripts/") from None
        if len(x) != len(y) or len(y) == 0:
            raise ModelError(f"held-out set '{path}' holds {len(x)} samples and {len(y)} labels")
        return x, y

    def outputs(self, net: Runnable, x: np.ndarray) -> np.ndarray:
        """The network's first output for every sample of ``x``, one run per sample, stacked on axis 0."""
        if len(net.input_types) != 1:
            raise ModelError(f"an evaluation feeds one input; this network has {len(net.input_types)}")
        (name,) = net.input_types
        first = net.output_names[0]
        return np.stack([net.run({name: x[i:i + 1]})[first] for i in range(len(x))])

    def report(self, net: Runnable) -> str:
        """``"accuracy on the 360 held-out digits: 97.5%"``."""
        x, y = self.load()
        metric = METRICS[self.metric]
        value = metric.score(self.outputs(net, x), y)
        return f"{self.metric} on the {len(y)} {self.samples}: {metric.fmt.format(value)}"


@dataclass(frozen=True)
class TrainedModel:
    """A model trained by a script of this repository, shipped in :data:`DATA_DIR` with its held-out set."""

    file: str
    evaluation: Evaluation
    script: str


#: zoo name -> trained model shipped with glow
TRAINED: dict[str, TrainedModel] = {
    "digits": TrainedModel("digits.onnx", Evaluation("digits_test.npz", "accuracy", "held-out digits"),
                           "scripts/train_digits.py"),
}

M = TypeVar("M")


def zoo_dir() -> Path:
    """The folder of the light models inside the installed onnx package (:data:`DATA_DIR` has the trained ones)."""
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def names() -> list[str]:
    """The model names accepted after ``zoo:``: the trained models and the light ones."""
    return sorted([*TRAINED, *MODELS])


def is_zoo_ref(model: object) -> bool:
    """Is ``model`` a string of the form ``zoo:NAME``?"""
    return isinstance(model, str) and model.startswith(PREFIX)


def canonical_name(name: str) -> str:
    """``"ResNet50"`` -> ``"resnet50"``; also accepts the file stems (``bvlc_alexnet``)."""
    key = name.strip().lower().replace("-", "_")
    if key in MODELS or key in TRAINED:
        return key
    key = key.removeprefix("light_")
    if key in _ALIASES:
        return _ALIASES[key]
    raise ModelError(
        f"unknown zoo model '{name}'; choose one of: {', '.join(names())}",
        hint="digits is trained and shipped with glow; the others are the light models shipped inside onnx",
    )


def model_path(name: str) -> Path:
    """The file of zoo model ``name`` (without the ``zoo:`` prefix)."""
    canon = canonical_name(name)
    trained = TRAINED.get(canon)
    if trained is not None:
        path = DATA_DIR / trained.file
        if not path.is_file():
            raise ModelError(f"zoo model '{canon}' is missing from this glow installation (looked for {path})",
                             hint=f"reinstall glow, or rerun {trained.script} in a checkout")
        return path
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


def evaluation(model: object) -> Evaluation | None:
    """The held-out set and metric of a ``zoo:NAME`` reference to a trained model; None for anything else."""
    if not is_zoo_ref(model):
        return None
    assert isinstance(model, str)
    trained = TRAINED.get(canonical_name(model.removeprefix(PREFIX)))
    return trained.evaluation if trained is not None else None


def has_placeholder_weights(model: object) -> bool:
    """Is ``model`` a ``zoo:NAME`` reference to a light model (constant 0.02 weights, uninformative outputs)?"""
    if not is_zoo_ref(model):
        return False
    assert isinstance(model, str)
    return canonical_name(model.removeprefix(PREFIX)) in MODELS


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
    if canon not in MODELS:
        raise ModelError(f"zoo:{canon} carries trained weights; random weights replace the placeholder weights "
                         f"of the light models only ({', '.join(sorted(MODELS))})")
    model = onnx.load(str(model_path(canon)))
    return with_random_weights(model, RANDOM_WEIGHT_GAINS.get(canon, 2.0), seed, expose_logits)


# -- random inputs ----------------------------------------------------------------------

#: a range of random values: integers ``lo .. hi - 1``, floats uniform in ``[lo, hi)``
Range = tuple[float, float]


def random_array(t: TensorType, rng: np.random.Generator, value_range: Range | None = None) -> np.ndarray:
    """Uniform [0, 1) floats, small non-negative integers (0..9), fair booleans, of type ``t``; with
    ``value_range`` (lo, hi): integers lo..hi-1 or floats in [lo, hi)."""
    if t.elem == ElemKind.BOOL:
        return rng.random(t.shape) < 0.5
    if t.elem.is_float:
        lo, hi = value_range or (0.0, 1.0)
        return (lo + (hi - lo) * rng.random(t.shape, dtype=np.float64)).astype(t.dtype)
    lo, hi = value_range or (0, 10)
    return rng.integers(int(np.ceil(lo)), max(int(np.ceil(hi)), int(np.ceil(lo)) + 1), size=t.shape).astype(t.dtype)


def random_feeds(types: Mapping[str, TensorType], seed: int = 0,
                 ranges: Mapping[str, Range] | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs (:func:`random_array`) for inputs of the given types, in their order; ``ranges``
    gives some inputs their range (:func:`index_ranges` finds those of index inputs)."""
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    return {name: random_array(t, rng, ranges.get(name)) for name, t in types.items()}


#: ops that keep the values of their first input (indices pass through them unchanged)
_VALUE_KEEPING = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose"})


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Shapes of the model's constants (initializers, Constant nodes) and of values declared with static shapes."""
    from onnx import numpy_helper

    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value" and a.HasField("t"):
                    shapes[node.output[0]] = tuple(numpy_helper.to_array(a.t).shape)
    for vi in [*model.graph.value_info, *model.graph.input]:
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in shapes and dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    return shapes


def index_ranges(model: onnx.ModelProto) -> dict[str, Range]:
    """Model inputs that index a Gather's table (directly or through Cast, Reshape, Unsqueeze, ...), each with
    the range that stays inside every table it indexes: ``{"token_type_ids": (0, 2)}``.

    Random inputs in these ranges (``glow run`` without ``--input``) run models with embedding tables, whose
    indices 0..9 would overflow a table of 2 rows.
    """
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name for vi in model.graph.input if vi.name not in inits}
    producer = {o: n for n in model.graph.node for o in n.output}
    shapes = _static_shapes(model)
    ranges: dict[str, Range] = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        table = shapes.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if not table or not -len(table) <= axis < len(table):
            continue
        src = node.input[1]
        while src not in inputs and src in producer and producer[src].op_type in _VALUE_KEEPING:
            src = producer[src].input[0]
        if src in inputs:
            rows = table[axis]
            ranges[src] = (0, min(rows, int(ranges.get(src, (0, rows))[1])))
    return ranges


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
    """Seeded random inputs for every real input of ``model`` (static shapes only; index inputs in their
    tables' ranges, :func:`index_ranges`)."""
    return random_feeds(model_input_types(model), seed, index_ranges(model))


__all__ = ["DATA_DIR", "METRICS", "MODELS", "PREFIX", "RANDOM_WEIGHT_GAINS", "TRAINED", "Evaluation", "Metric",
           "TrainedModel", "accuracy", "canonical_name", "describe", "evaluation", "has_placeholder_weights",
           "index_ranges", "is_zoo_ref", "load_with_random_weights", "model_feeds", "model_input_types",
           "model_path", "names", "random_array", "random_feeds", "resolve", "resolve_model",
           "with_random_weights", "zoo_dir"]
