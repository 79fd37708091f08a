"""(family module; kernels registered in KERNELS)."""

from glow_backend_interpreter.kernels import KERNELS  # noqa: F401
