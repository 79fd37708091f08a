"""The seed models the fuzzer mutates: every ONNX node-test case and the light zoo models.

A seed is a model and one set of inputs (tensors only): a node test's first
data set, or seeded random inputs for a zoo model. Node tests whose inputs are
sequences, optionals or strings are not seeds (glow feeds tensors only).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from glow_core import zoo
from glow_tools.nodetests import default_root, list_cases

ZOO_PREFIX = "zoo:"
#: ops whose outputs are random: glow and the reference cannot be compared on them
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                        "Bernoulli", "Multinomial"})


@dataclass(frozen=True)
class Seed:
    """A model (serialized) and its inputs, in the order of the model's non-initializer inputs."""

    name: str
    model_bytes: bytes
    inputs: tuple[np.ndarray, ...]

    def model(self) -> onnx.ModelProto:
        m = onnx.ModelProto()
        m.ParseFromString(self.model_bytes)
        return m


def seed_names(root: Path | None = None, with_zoo: bool = True) -> list[str]:
    """Node-test case names under ``root`` (default: ``$GLOW_ONNX_NODE_TESTS``), then ``zoo:NAME`` of each light model."""
    root = root or default_root()
    names = [c.name for c in list_cases(root)] if root is not None and root.is_dir() else []
    if with_zoo:
        names += [ZOO_PREFIX + n for n in sorted(zoo.MODELS)]
    return names


def _tensor_input(path: Path) -> np.ndarray | None:
    t = onnx.TensorProto()
    try:
        t.ParseFromString(path.read_bytes())
        if t.data_type in (0, onnx.TensorProto.STRING):
            return None
        return numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001  (a sequence or optional value: not a seed)
        return None


def _node_test_seed(case: Path) -> Seed | None:
    model = onnx.load(str(case / "model.onnx"))
    if any(n.op_type in RANDOM_OPS for n in model.graph.node):
        return None
    inits = {t.name for t in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in inits]
    if any(i.type.WhichOneof("value") != "tensor_type" for i in real):
        return None
    ds = case / "test_data_set_0"
    inputs = []
    for k in range(len(real)):
        a = _tensor_input(ds / f"input_{k}.pb")
        if a is None:
            return None
        inputs.append(a)
    return Seed(case.name, model.SerializeToString(), tuple(inputs))


def _zoo_seed(name: str) -> Seed:
    model = onnx.load(str(zoo.model_path(name)))
    feeds = zoo.model_feeds(model, seed=0)
    return Seed(ZOO_PREFIX + name, model.SerializeToString(), tuple(feeds.values()))


@functools.lru_cache(maxsize=64)
def load_seed(name: str, root: Path | None = None) -> Seed | None:
    """The seed called ``name`` (a node-test case or ``zoo:NAME``), or None if it cannot be one."""
    if name.startswith(ZOO_PREFIX):
        return _zoo_seed(name[len(ZOO_PREFIX):])
    root = root or default_root()
    if root is None:
        return None
    try:
        return _node_test_seed(root / name)
    except Exception:  # noqa: BLE001  (an unreadable case is no seed)
        return None
