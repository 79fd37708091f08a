"""ONNX import: model file -> graph IR function. See onnx_importer.py."""

from glow_core.importer.onnx_importer import import_model, load_model, parse_shape_spec

__all__ = ["import_model", "load_model", "parse_shape_spec"]
