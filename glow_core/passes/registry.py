"""Imports every pass module so their ``graph_pass`` registrations run."""

from glow_core.passes import basic  # noqa: F401
