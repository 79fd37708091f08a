"""ONNX import: model file -> graph IR function. See onnx_importer.py."""

from glow_core.importer.onnx_importer import Split, import_model, import_split, load_model, parse_shape_spec

__all__ = ["Split", "import_model", "import_split", "load_model", "parse_shape_spec"]
