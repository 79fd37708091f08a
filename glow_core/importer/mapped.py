"""A large model file read without copying its weights: the weights stay in the file's pages.

``onnx.load`` reads the whole file into a bytes object and parses it into a message holding a second
copy of every initializer; :func:`split_weights` then makes a third (arrays) before the first two are
freed. For a 440 MB transformer that is 1.3 GB of peak memory before compiling starts.

:func:`map_model` instead maps the file read-only and walks the protobuf wire format itself, only as
far as ``ModelProto.graph`` -> ``GraphProto.initializer`` -> ``TensorProto.raw_data``: every large
initializer whose raw bytes are the array's bytes becomes a read-only numpy view of the mapping, and
the rest of the file (nodes, small initializers, metadata) is re-encoded without those bytes and
parsed by protobuf as usual. The result is what :func:`split_weights` returns for the parsed model (a
stripped model and the weights by name), so every route that takes stripped weights takes it.

Pages of the mapping are the page cache's: they count as resident only while touched, and
:meth:`MappedWeights.release` drops them from this process (read again from the file when a later
compile needs them). The file must therefore not be rewritten while a network compiled from it may
still compile specializations (the usual rule for memory-mapped model files).

The walk is defensive (a model file is untrusted input): every length is checked against its
enclosing message, and anything unexpected (a group wire type, a truncated field, a tensor whose
bytes do not match its dims) makes :func:`map_model` return None, so the caller takes the ordinary
path, whose parser reports the fault.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from glow_core import budget
from glow_core.importer.subgraphs import has_control_flow
from glow_core.importer.weights import _RAW_DTYPES, LEAN_MIN_ELEMENTS, strippable

#: files smaller than this are parsed the ordinary way (the copies do not matter)
MIN_MAPPED_BYTES = 32 << 20

_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_T_DIMS, _T_DATA_TYPE, _T_RAW, _T_LOCATION, _T_EXTERNAL = 1, 2, 9, 14, 13
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5


class _Malformed(Exception):
    """The wire format is not what the walk expects (the ordinary parser then reports it)."""


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Each field of the message at ``buf[start:end]``: (number, wire type, field start, payload start, end);
    for a varint the payload start is its value."""
    pos = start
    while pos < end:
        tag, p = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, q = _varint(buf, p, end)
            yield number, wire, pos, value, q
        elif wire == _LEN:
            size, p = _varint(buf, p, end)
            if p + size > end:
                raise _Malformed
            yield number, wire, pos, p, p + size
        elif wire in (_I64, _I32):
            q = p + (8 if wire == _I64 else 4)
            if q > end:
                raise _Malformed
            yield number, wire, pos, p, q
        else:
            raise _Malformed  # groups (3, 4) and the reserved types
        pos = q if wire in (_VARINT, _I64, _I32) else p + size


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _dims(buf: memoryview, wire: int, a: int, b: int) -> list[int]:
    if wire == _VARINT:
        return [a]
    out, pos = [], a
    while pos < b:  # packed repeated int64
        value, pos = _varint(buf, pos, b)
        out.append(value)
    return out


def _tensor(buf: memoryview, start: int, end: int) -> tuple[bytes, tuple[np.dtype, tuple[int, ...], int]] | None:
    """(the initializer's bytes without raw_data, (dtype, shape, offset of the raw bytes)) when it is a large
    tensor kept in ``raw_data``; None to keep it as it is."""
    dims: list[int] = []
    dtype_code, raw, external = 0, None, False
    kept: list[tuple[int, int]] = []
    for number, wire, f0, a, b in _fields(buf, start, end):
        if number == _T_DIMS:
            dims.extend(_dims(buf, wire, a, b))
        elif number == _T_DATA_TYPE and wire == _VARINT:
            dtype_code = a
        elif number == _T_LOCATION and wire == _VARINT:
            external = a == onnx.TensorProto.EXTERNAL
        if number == _T_RAW and wire == _LEN:
            raw = (a, b)
        else:
            kept.append((f0, b))
    dtype = _RAW_DTYPES.get(dtype_code)
    if raw is None or dtype is None or external or not np.little_endian or any(d < 0 for d in dims):
        return None
    shape = tuple(dims)
    count = math.prod(shape)
    if count <= LEAN_MIN_ELEMENTS or raw[1] - raw[0] != count * dtype.itemsize:
        return None
    return b"".join(bytes(buf[f0:f1]) for f0, f1 in kept), (dtype, shape, raw[0])


class MappedWeights:
    """The mapping a model's weights are views of."""

    def __init__(self, path: Path, mm: mmap.mmap) -> None:
        self.path = path
        self._mm = mm
        budget.on_release_pages(self)

    def release(self) -> None:
        """Drop the file's pages from this process's resident memory (they are read again on the next touch)."""
        if hasattr(mmap, "MADV_DONTNEED"):
            try:
                self._mm.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass  # (an unusual file system: the pages stay, nothing is wrong)


def _graph(buf: memoryview, a: int, b: int, mm: mmap.mmap) -> tuple[bytes, dict[str, np.ndarray], list[str]]:
    """The graph's bytes without the large initializers' data, those initializers as views, their names."""
    parts: list[bytes] = []
    weights: dict[str, np.ndarray] = {}
    pending: list[tuple[bytes, np.dtype, tuple[int, ...], int]] = []
    cursor = a
    for number, wire, f0, c, d in _fields(buf, a, b):
        if number != _GRAPH_INITIALIZER or wire != _LEN:
            continue
        got = _tensor(buf, c, d)
        if got is None:
            continue
        parts.append(bytes(buf[cursor:f0]))
        stripped, (dtype, shape, offset) = got
        parts.append(_len_field(_GRAPH_INITIALIZER, stripped))
        pending.append((stripped, dtype, shape, offset))
        cursor = d
    parts.append(bytes(buf[cursor:b]))
    names: list[str] = []
    for stripped, dtype, shape, offset in pending:
        t = onnx.TensorProto()
        t.ParseFromString(stripped)
        view = np.frombuffer(mm, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape)
        weights[t.name] = view
        names.append(t.name)
    return b"".join(parts), weights, names


def map_model(path: str | os.PathLike[str], min_bytes: int = MIN_MAPPED_BYTES
              ) -> tuple[onnx.ModelProto, dict[str, np.ndarray], MappedWeights] | None:
    """(the model without its large initializers' bytes, those initializers as read-only views of the mapped
    file by name, the mapping) for a file of at least ``min_bytes``; None when the file is small,
    keeps its data elsewhere, has control flow, needs its initializers in the model (``weights.strippable``) or
    is not what the
    walk expects (the caller then loads it the ordinary way, which reports any fault)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < max(min_bytes, 1):
                return None
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    buf = memoryview(mm)
    try:
        model_parts: list[bytes] = []
        weights: dict[str, np.ndarray] = {}
        for number, wire, f0, a, b in _fields(buf, 0, len(buf)):
            if number == _MODEL_GRAPH and wire == _LEN:
                graph_bytes, weights, _ = _graph(buf, a, b, mm)
                model_parts.append(_len_field(_MODEL_GRAPH, graph_bytes))
            else:
                model_parts.append(bytes(buf[f0:b]))
        proto = onnx.ModelProto()
        proto.ParseFromString(b"".join(model_parts))
    except (_Malformed, DecodeError, ValueError, RecursionError):
        buf.release()
        return None
    buf.release()
    if not weights or not strippable(proto) or not proto.graph.node:
        return None
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        return None  # (external data is read by the ordinary path, with its checks)
    if has_control_flow(proto.graph):
        return None  # (control flow is split into stages from the whole model: glow_core/controlflow)
    return proto, weights, MappedWeights(p, mm)


def settle(mapping: MappedWeights | None) -> None:
    """After a compile: drop the mapped file's pages (a later compile reads them again) and return the heap
    memory the import and the compile freed to the system (glibc keeps freed blocks otherwise)."""
    if mapping is not None:
        mapping.release()
    budget.trim_heap()


__all__ = ["MIN_MAPPED_BYTES", "MappedWeights", "map_model", "settle"]
