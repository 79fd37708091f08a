"""Imports every pass module so their ``graph_pass`` registrations run."""

from glow_core.passes import basic  # noqa: F401
from glow_core.lowering import table  # noqa: F401,E402  (the 'lower' pass)
from glow_core.passes import arith, batchnorm, concat, fusion, noop, reshape, transpose  # noqa: F401,E402  (optimizer)
