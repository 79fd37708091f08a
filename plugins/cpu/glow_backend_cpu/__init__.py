"""The LLVM CPU backend: low-level IR -> LLVM IR (llvmlite) -> native code, multi-threaded."""

__version__ = "0.1.0"
