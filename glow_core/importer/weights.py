"""One copy of each weight in the process.

A weight read from a model is a read-only array kept in a process-wide table keyed by its content (element
type, shape and a digest of its bytes) and held weakly: every import of the same model (each shape a
model with symbolic dims is specialized for, each compile of the same file) gets the same array, and the
array is freed when the last graph, network or cache that reads it is. Constants that passes compute
(a transposed or folded weight) are interned the same way (:func:`intern`) so that specializations whose
constants agree share them.

:func:`split_weights` reads a model's large initializers once and returns a copy of the model that no
longer carries their bytes (only name, type and dims): what a network compiled per shape keeps, so the
model's own copy of the weights is dropped after the first import. The importer reads a stripped
initializer from the ``weights`` it is given.

In: ``onnx.TensorProto`` initializers, or arrays. Out: shared read-only arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from glow_core import budget
from glow_core.importer.context import onnx_elem
from glow_core.ir.interning import MIN_SHARED_BYTES, _key, _share, intern

#: initializers with more elements than this are read into the shared table and stripped from the model a
#: dynamic network keeps (the size the importer's lean copy leaves out of the checker's model too)
LEAN_MIN_ELEMENTS = 4096

#: ONNX element types whose raw data is the numpy array's bytes (little-endian machines)
_RAW_DTYPES: Mapping[int, np.dtype] = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32), onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16), onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.UINT8: np.dtype(np.uint8), onnx.TensorProto.INT16: np.dtype(np.int16),
    onnx.TensorProto.UINT16: np.dtype(np.uint16), onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.UINT32: np.dtype(np.uint32), onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.UINT64: np.dtype(np.uint64),
}
#: ops whose folding at import reads initializers from the model itself (importer/qdq.py): models with them
#: keep their initializers' bytes
_READS_INITIALIZERS = frozenset({"QuantizeLinear", "DequantizeLinear"})

def read_initializer(t: onnx.TensorProto) -> np.ndarray:
    """An initializer as a shared read-only array (read from its raw bytes where they are the array's bytes,
    else through ``numpy_helper``); the model's bytes are only hashed when the table has the array already."""
    dtype = _RAW_DTYPES.get(t.data_type)
    if dtype is not None and t.HasField("raw_data") and t.data_location != onnx.TensorProto.EXTERNAL \
            and np.little_endian:
        raw = t.raw_data
        shape = tuple(int(d) for d in t.dims)
        if len(raw) == math.prod(shape) * dtype.itemsize:
            return _share(_key(dtype, shape, raw), lambda: np.frombuffer(raw, dtype).reshape(shape).copy())
    return intern(numpy_helper.to_array(t))


def strippable(proto: onnx.ModelProto) -> bool:
    """Whether the import of ``proto`` reads every initializer through the importer (none directly)."""
    return not any(n.op_type in _READS_INITIALIZERS for n in proto.graph.node)


def split_weights(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """(a copy of ``proto`` whose large initializers carry no bytes, those initializers as shared arrays).

    The copy shares nothing with ``proto``: dropping ``proto`` frees the model's copy of the weights. A model
    whose import reads initializers directly (:func:`strippable`) is returned as it is, with no arrays.
    """
    if not strippable(proto):
        return proto, {}
    weights: dict[str, np.ndarray] = {}
    out = onnx.ModelProto()
    graph = proto.graph
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(out, field, getattr(proto, field))
    out.opset_import.extend(proto.opset_import)
    out.metadata_props.extend(proto.metadata_props)
    out.functions.extend(proto.functions)
    g = out.graph
    g.name, g.doc_string = graph.name, graph.doc_string
    for part in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(g, part).extend(getattr(graph, part))
    for t in graph.initializer:
        array = _lean_array(t) if math.prod(t.dims) > LEAN_MIN_ELEMENTS else None
        if array is not None:
            weights[t.name] = array
            g.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
        else:
            g.initializer.append(t)
    return out, weights


def _lean_array(t: onnx.TensorProto) -> np.ndarray | None:
    """The initializer as a shared array, or None when it cannot be read as its dims and type say (dims past
    the memory budget, data of another size, an unknown type): it then stays in the model, and the importer,
    which checks every initializer before numpy reads it, refuses it with an error naming it."""
    try:
        elem = onnx_elem(t.data_type, "initializer")
        budget.current().check_tensor(tuple(int(d) for d in t.dims), elem.itemsize, "initializer", f"'{t.name}'")
        return read_initializer(t)
    except Exception:  # noqa: BLE001  (numpy and onnx raise assorted errors on corrupt data: the importer names it)
        return None


__all__ = ["LEAN_MIN_ELEMENTS", "intern", "read_initializer", "split_weights", "strippable"]
