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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from glow_core.errors import ModelError

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


__all__ = ["MODELS", "PREFIX", "canonical_name", "describe", "is_zoo_ref", "model_path", "names", "resolve",
           "resolve_model", "zoo_dir"]
