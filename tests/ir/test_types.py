"""Element kinds, tensor types, broadcasting and axis normalization."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from glow_core.errors import GlowTypeError
from glow_core.ir import ElemKind, TensorType
from glow_core.ir.types import ALL_KINDS, FLOAT_KINDS, INT_KINDS, QUANTIZED_KINDS, broadcast_shapes, normalize_axis


@pytest.mark.parametrize("kind", list(ElemKind), ids=lambda k: k.value)
def test_every_elem_kind_has_a_dtype(kind: ElemKind) -> None:
    assert kind.itemsize == kind.dtype.itemsize
    if not kind.is_quantized:
        assert ElemKind.from_dtype(kind.dtype) is kind


def test_required_elem_kinds_and_families() -> None:
    for k in (ElemKind.FLOAT32, ElemKind.FLOAT16, ElemKind.INT8Q, ElemKind.UINT8Q, ElemKind.INT32,
              ElemKind.INT64, ElemKind.BOOL):
        assert k in ALL_KINDS
    assert ElemKind.BFLOAT16.dtype == np.dtype(ml_dtypes.bfloat16)
    assert ElemKind.INT8Q.dtype == np.int8 and ElemKind.UINT8Q.dtype == np.uint8
    assert FLOAT_KINDS.isdisjoint(INT_KINDS) and QUANTIZED_KINDS.isdisjoint(INT_KINDS)
    assert ElemKind.FLOAT16.is_float and ElemKind.UINT16.is_int and ElemKind.INT8Q.is_quantized
    assert not ElemKind.BOOL.is_float and not ElemKind.BOOL.is_int
    assert repr(ElemKind.INT64) == "int64"


def test_from_dtype_refuses_unknown_dtypes() -> None:
    with pytest.raises(GlowTypeError, match="complex64 has no Glow element kind"):
        ElemKind.from_dtype(np.complex64)
    assert ElemKind.from_dtype(np.float32) is ElemKind.FLOAT32
    assert ElemKind.from_dtype(bool) is ElemKind.BOOL


def test_tensor_type_basics() -> None:
    t = TensorType(ElemKind.FLOAT32, (2, np.int64(3), 4))
    assert t.shape == (2, 3, 4) and all(type(d) is int for d in t.shape)
    assert (t.rank, t.size, t.nbytes) == (3, 24, 96)
    assert str(t) == "float32[2,3,4]"
    assert str(TensorType(ElemKind.BOOL, ())) == "bool[]"
    assert TensorType(ElemKind.INT64, ()).size == 1
    assert TensorType(ElemKind.FLOAT32, (0, 5)).size == 0
    assert t == TensorType(ElemKind.FLOAT32, (2, 3, 4)) and hash(t) == hash(TensorType(ElemKind.FLOAT32, (2, 3, 4)))
    assert t != TensorType(ElemKind.FLOAT16, (2, 3, 4))
    assert t.with_shape([6, 4]) == TensorType(ElemKind.FLOAT32, (6, 4))
    assert t.with_elem(ElemKind.INT32) == TensorType(ElemKind.INT32, (2, 3, 4))
    assert t.dtype == np.float32
    with pytest.raises(AttributeError):
        t.shape = (1,)  # type: ignore[misc]


def test_tensor_type_of_and_matches() -> None:
    a = np.zeros((3, 1), np.int32)
    t = TensorType.of(a)
    assert t == TensorType(ElemKind.INT32, (3, 1)) and t.matches(a)
    assert not t.matches(a.astype(np.int64)) and not t.matches(a.reshape(1, 3))


def test_tensor_type_refusals() -> None:
    with pytest.raises(GlowTypeError, match="negative dimension"):
        TensorType(ElemKind.FLOAT32, (2, -1))
    with pytest.raises(GlowTypeError, match="needs a scale and an offset"):
        TensorType(ElemKind.INT8Q, (2,))
    with pytest.raises(GlowTypeError, match="takes no scale or offset"):
        TensorType(ElemKind.FLOAT32, (2,), scale=1.0, offset=0)


def test_quantized_tensor_type() -> None:
    q = TensorType(ElemKind.UINT8Q, (4,), scale=0.25, offset=128)
    assert q.with_shape((2, 2)) == TensorType(ElemKind.UINT8Q, (2, 2), 0.25, 128)  # keeps scale and offset
    assert q != TensorType(ElemKind.UINT8Q, (4,), scale=0.5, offset=128)
    assert q.with_elem(ElemKind.FLOAT32) == TensorType(ElemKind.FLOAT32, (4,))
    assert q.nbytes == 4


@pytest.mark.parametrize("shapes", [
    [(2, 3), (2, 3)], [(2, 3), (3,)], [(2, 1), (1, 3)], [(), (4,)], [(5, 1, 4), (3, 1)], [(1,), ()],
    [(0, 3), (1, 3)], [(0,), (1,)], [(2, 1, 3), (4, 1), (1, 1, 1, 1)], [(7,)], [],
])
def test_broadcast_shapes_agrees_with_numpy(shapes: list[tuple[int, ...]]) -> None:
    assert broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)


@pytest.mark.parametrize("shapes", [[(2, 3), (3, 2)], [(0,), (3,)], [(2, 1), (3,), (4, 1)]])
def test_broadcast_shapes_refuses_mismatches(shapes: list[tuple[int, ...]]) -> None:
    with pytest.raises(GlowTypeError, match="cannot be broadcast together"):
        broadcast_shapes(*shapes)


def test_normalize_axis() -> None:
    assert normalize_axis(-1, 3) == 2 and normalize_axis(0, 3) == 0 and normalize_axis(2, 3) == 2
    assert normalize_axis(0, 0) == 0  # a scalar's only "axis"
    for bad in (3, -4):
        with pytest.raises(GlowTypeError, match=f"axis {bad} is out of range for rank 3"):
            normalize_axis(bad, 3)
