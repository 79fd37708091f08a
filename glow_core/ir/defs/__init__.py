"""Declarations of every graph node kind, one module per family.

Importing this package fills the node-kind table in ``glow_core.ir.kinds``.
"""

from glow_core.ir.defs import elementwise, movement, nn, reduce  # noqa: F401
