"""glow on OpenVINO: partitions as ONNX, compiled and run asynchronously by OpenVINO's CPU device."""

__version__ = "0.1.0"
