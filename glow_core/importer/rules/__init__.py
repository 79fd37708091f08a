"""Import rules, one module per family, registered with ``import_rule``."""

from glow_core.importer.rules import elementwise, movement, nn, reduce  # noqa: F401
