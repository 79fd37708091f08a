"""The glow backend 'example' (distribution glow-backend-example).

Scaffolded by glow 0.2.0 (`glow sdk new-backend example`), for glow SDK API version 2.
"""

__version__ = "0.1.0"
