"""The reference interpreter backend: numpy kernels, the executable specification."""

__version__ = "0.1.0"
