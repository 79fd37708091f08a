"""The version of the ``glow-compiler`` distribution: ``0.<SDK API version>.<patch>`` (glow_sdk.version).

A module of its own, at the bottom of the layers, so that anything (the program cache, a backend's
cache key) can read the version without importing the package root and the API behind it.
"""

__version__ = "0.2.0"
