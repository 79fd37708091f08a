"""Tests of profiling and calibration (glow_core.quantization)."""
