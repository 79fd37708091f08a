"""Fixtures of the graph IR tests."""

from tests.ir.irutil import scratch_kinds  # noqa: F401  (a fixture)
