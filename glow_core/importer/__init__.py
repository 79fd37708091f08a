"""ONNX import: model file -> graph IR function. See onnx_importer.py."""

from glow_core.importer.onnx_importer import import_model, load_model, parse_shape_spec
from glow_core.importer.structured import OptShape, SeqShape

__all__ = ["OptShape", "SeqShape", "import_model", "load_model", "parse_shape_spec"]
