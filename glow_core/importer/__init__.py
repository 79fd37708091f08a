"""ONNX import: model file -> graph IR function. See onnx_importer.py."""

from glow_core.importer.onnx_importer import Split, import_model, import_split, load_model, parse_shape_spec
from glow_core.importer.structured import OptShape, SeqShape

__all__ = ["OptShape", "SeqShape", "Split", "import_model", "import_split", "load_model", "parse_shape_spec"]
