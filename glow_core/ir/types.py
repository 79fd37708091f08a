"""Element kinds and tensor types of the graph IR.

Every value in the IR has a :class:`TensorType`: an element kind and a static
shape (and, for quantized kinds, a scale and an offset). Types are frozen and
hashable so they can key caches and take part in CSE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

import ml_dtypes
import numpy as np

from glow_core.errors import GlowTypeError


class ElemKind(enum.Enum):
    """The element kinds a tensor may hold."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    UINT16 = "uint16"
    INT32 = "int32"
    UINT32 = "uint32"
    INT64 = "int64"
    UINT64 = "uint64"
    BOOL = "bool"
    #: int8 with a per-tensor scale and offset: real = scale * (q - offset)
    INT8Q = "int8q"
    #: uint8 with a per-tensor scale and offset
    UINT8Q = "uint8q"
    #: 8-bit floats (ONNX FLOAT8E4M3FN, ...): 1 sign bit, E exponent bits, M mantissa bits;
    #: FN: finite only (NaN, no inf); FNUZ: no negative zero, NaN is 0x80 (no inf)
    FLOAT8E4M3FN = "float8e4m3fn"
    FLOAT8E4M3FNUZ = "float8e4m3fnuz"
    FLOAT8E5M2 = "float8e5m2"
    FLOAT8E5M2FNUZ = "float8e5m2fnuz"
    #: 4-bit float (ONNX FLOAT4E2M1): no inf, no NaN; one element per byte in memory
    FLOAT4E2M1 = "float4e2m1"
    #: 8-bit power of two (ONNX FLOAT8E8M0, a block scale): 2^(code - 127), 0xFF is NaN
    FLOAT8E8M0 = "float8e8m0"
    #: 4- and 2-bit integers: one element per byte in memory (the low bits), packed two / four
    #: per byte only in ONNX files
    INT4 = "int4"
    UINT4 = "uint4"
    INT2 = "int2"
    UINT2 = "uint2"

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self]

    @property
    def is_float(self) -> bool:
        return self in FLOAT_KINDS

    @property
    def is_int(self) -> bool:
        return self in INT_KINDS

    @property
    def is_low_precision(self) -> bool:
        """float8 / float4 / int4 / int2: kinds only casts, quantization and data movement take."""
        return self in LOW_PRECISION_KINDS

    @property
    def is_quantized(self) -> bool:
        return self in (ElemKind.INT8Q, ElemKind.UINT8Q)

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    @staticmethod
    def from_dtype(dtype: np.dtype | type) -> "ElemKind":
        dt = np.dtype(dtype)
        try:
            return _FROM_DTYPE[dt]
        except KeyError:
            raise GlowTypeError(
                f"numpy dtype {dt} has no Glow element kind",
                hint="use one of: " + ", ".join(k.value for k in _FROM_DTYPE.values()),
            ) from None

    def __repr__(self) -> str:
        return self.value


_DTYPES: dict[ElemKind, np.dtype] = {
    ElemKind.FLOAT32: np.dtype(np.float32),
    ElemKind.FLOAT16: np.dtype(np.float16),
    ElemKind.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    ElemKind.FLOAT64: np.dtype(np.float64),
    ElemKind.INT8: np.dtype(np.int8),
    ElemKind.UINT8: np.dtype(np.uint8),
    ElemKind.INT16: np.dtype(np.int16),
    ElemKind.UINT16: np.dtype(np.uint16),
    ElemKind.INT32: np.dtype(np.int32),
    ElemKind.UINT32: np.dtype(np.uint32),
    ElemKind.INT64: np.dtype(np.int64),
    ElemKind.UINT64: np.dtype(np.uint64),
    ElemKind.BOOL: np.dtype(np.bool_),
    ElemKind.INT8Q: np.dtype(np.int8),
    ElemKind.UINT8Q: np.dtype(np.uint8),
    ElemKind.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    ElemKind.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    ElemKind.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    ElemKind.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    ElemKind.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
    ElemKind.FLOAT8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
    ElemKind.INT4: np.dtype(ml_dtypes.int4),
    ElemKind.UINT4: np.dtype(ml_dtypes.uint4),
    ElemKind.INT2: np.dtype(ml_dtypes.int2),
    ElemKind.UINT2: np.dtype(ml_dtypes.uint2),
}
_FROM_DTYPE: dict[np.dtype, ElemKind] = {
    dt: k for k, dt in _DTYPES.items() if not k.is_quantized
}

FLOAT_KINDS = frozenset({ElemKind.FLOAT32, ElemKind.FLOAT16, ElemKind.BFLOAT16, ElemKind.FLOAT64})
SIGNED_INT_KINDS = frozenset({ElemKind.INT8, ElemKind.INT16, ElemKind.INT32, ElemKind.INT64})
UNSIGNED_INT_KINDS = frozenset({ElemKind.UINT8, ElemKind.UINT16, ElemKind.UINT32, ElemKind.UINT64})
INT_KINDS = SIGNED_INT_KINDS | UNSIGNED_INT_KINDS
QUANTIZED_KINDS = frozenset({ElemKind.INT8Q, ElemKind.UINT8Q})
NUMERIC_KINDS = FLOAT_KINDS | INT_KINDS
ALL_KINDS = frozenset(ElemKind)
INDEX_KINDS = frozenset({ElemKind.INT32, ElemKind.INT64})
#: the 8-bit float kinds with a sign and a mantissa, whose Cast takes ``saturate``
FLOAT8_KINDS = frozenset({ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT8E4M3FNUZ, ElemKind.FLOAT8E5M2,
                          ElemKind.FLOAT8E5M2FNUZ})
#: the float8 kinds, float4e2m1 and float8e8m0 (a power of two; its Cast takes ``round_mode``)
SMALL_FLOAT_KINDS = FLOAT8_KINDS | {ElemKind.FLOAT4E2M1, ElemKind.FLOAT8E8M0}
SMALL_INT_KINDS = frozenset({ElemKind.INT4, ElemKind.UINT4, ElemKind.INT2, ElemKind.UINT2})
#: kinds only Cast, quantization and data movement take (never arithmetic)
LOW_PRECISION_KINDS = SMALL_FLOAT_KINDS | SMALL_INT_KINDS


@dataclass(frozen=True)
class TensorType:
    """A static tensor type: element kind, shape, and quantization parameters."""

    elem: ElemKind
    shape: tuple[int, ...]
    scale: float | None = None
    offset: int | None = None
    #: in a network compiled for symbolic dims (``glow_core/ir/symbolic.py``): per axis, None for a fixed
    #: size, else the ``SymExpr`` of the size a run has (``shape`` is then the bound the layout plans for)
    sym: tuple[Any, ...] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        if any(d < 0 for d in shape):
            raise GlowTypeError(f"negative dimension in shape {list(shape)}")
        if self.elem.is_quantized and (self.scale is None or self.offset is None):
            raise GlowTypeError(f"quantized element kind {self.elem.value} needs a scale and an offset")
        if not self.elem.is_quantized and (self.scale is not None or self.offset is not None):
            raise GlowTypeError(f"element kind {self.elem.value} takes no scale or offset")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.elem.itemsize

    @property
    def dtype(self) -> np.dtype:
        return self.elem.dtype

    def with_shape(self, shape: Iterable[int]) -> "TensorType":
        return TensorType(self.elem, tuple(shape), self.scale, self.offset)

    def with_elem(self, elem: ElemKind) -> "TensorType":
        return TensorType(elem, self.shape, sym=self.sym)

    def with_sym(self, sym: tuple[Any, ...] | None) -> "TensorType":
        """The same type with per-axis symbolic sizes (None: every axis fixed)."""
        return TensorType(self.elem, self.shape, self.scale, self.offset, sym)

    @property
    def symbolic(self) -> bool:
        return self.sym is not None and any(d is not None for d in self.sym)

    @staticmethod
    def of(array: np.ndarray) -> "TensorType":
        return TensorType(ElemKind.from_dtype(array.dtype), tuple(array.shape))

    def matches(self, array: np.ndarray) -> bool:
        return array.dtype == self.dtype and tuple(array.shape) == self.shape

    def __str__(self) -> str:
        dims = ",".join(str(d) if self.sym is None or self.sym[k] is None else f"{self.sym[k]}<={d}"
                        for k, d in enumerate(self.shape))
        q = f"<s={self.scale:g},o={self.offset}>" if self.elem.is_quantized else ""
        return f"{self.elem.value}{q}[{dims}]"


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Multidirectional (numpy-style) broadcasting of shapes, or a GlowTypeError."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise GlowTypeError(
                "shapes " + " and ".join(str(list(s)) for s in shapes) + " cannot be broadcast together"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Map a possibly negative axis into [0, rank), or raise a GlowTypeError."""
    if not -rank <= axis < max(rank, 1):
        raise GlowTypeError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis
