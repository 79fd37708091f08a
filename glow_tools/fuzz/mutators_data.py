"""Mutators of a model's data: tensor bytes and dims, external data, the file's bytes, the inputs.

Same contract as :mod:`glow_tools.fuzz.mutators`: ``(mutant, rng) -> description | None``.
A model with no initializer gets one first (one of its inputs, with the input's
data, becomes an initializer), so the tensor mutators apply to nearly every seed.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from glow_tools.fuzz.cases import MODEL_DIR, Mutant, Mutator
from glow_tools.fuzz.mutators import EXTREME_DIMS, pick

#: a larger input than this (elements) is not made by the shape mutator
MAX_NEW_ELEMENTS = 1 << 20
EXTREME_OFFSETS = (-1, -(2**63), 2**31, 2**62, 2**63, 2**64, 10**30, "abc", "", " 12", "0x10", "1e3", "1.5")
HOSTILE_LOCATIONS = ("../outside/secret.bin", "/etc/passwd", "/dev/zero", "/proc/self/mem", "~/secret.bin",
                     "outside/../../outside/secret.bin", "weights.bin\x00.txt", "a\x00b", ".", "", "model.onnx",
                     "//weights.bin", "C:\\weights.bin", "weights.bin/", "no_such_file.bin")
SECRET = b"SECRET-OUTSIDE-THE-MODEL-FOLDER" * 64


def tensors(m: Mutant) -> list[TensorProto]:
    """The model's initializers and the tensors of its Constant nodes (and other tensor attributes)."""
    g = m.model.graph
    out = list(g.initializer)
    out += [a.t for n in g.node for a in n.attribute if a.type == AttributeProto.TENSOR]
    return out


def promote_input(m: Mutant, rng: np.random.Generator) -> TensorProto | None:
    """Make one real input an initializer holding the input's data (dropping it from the feeds)."""
    real = m.real_inputs()
    cands = [k for k in range(min(len(real), len(m.inputs))) if m.inputs[k].dtype.kind != "O"]
    if not cands:
        return None
    k = pick(rng, cands)
    vi = real[k]
    try:
        t = numpy_helper.from_array(m.inputs[k], vi.name)
    except Exception:  # noqa: BLE001  (a dtype onnx cannot write)
        return None
    m.model.graph.initializer.append(t)
    if m.model.ir_version >= 4:
        m.model.graph.input.remove(vi)
    del m.inputs[k]
    return m.model.graph.initializer[-1]


def _target(m: Mutant, rng: np.random.Generator, initializers_only: bool = False) -> TensorProto | None:
    ts = list(m.model.graph.initializer) if initializers_only else tensors(m)
    ts = [t for t in ts if t.data_type != TensorProto.STRING and t.data_location != TensorProto.EXTERNAL]
    if ts and rng.random() < 0.7:
        return pick(rng, ts)
    return promote_input(m, rng) or (pick(rng, ts) if ts else None)


def _ensure_raw(t: TensorProto) -> bool:
    if t.HasField("raw_data"):
        return True
    try:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
    except Exception:  # noqa: BLE001
        return False
    return t.HasField("raw_data")


def tensor_raw(m: Mutant, rng: np.random.Generator) -> str | None:
    """A tensor's raw bytes truncated, extended, flipped, emptied, or doubled by a typed field."""
    t = _target(m, rng)
    if t is None or not _ensure_raw(t):
        return None
    raw = bytearray(t.raw_data)
    what = int(rng.integers(5))
    if what == 0 and raw:
        n = int(rng.integers(len(raw)))
        t.raw_data = bytes(raw[:n])
        return f"tensor {t.name!r}: raw_data truncated {len(raw)} -> {n} bytes"
    if what == 1:
        extra = int(rng.integers(1, 17))
        t.raw_data = bytes(raw) + bytes(rng.integers(0, 256, extra, dtype=np.uint8))
        return f"tensor {t.name!r}: raw_data {extra} bytes too long"
    if what == 2 and raw:
        for _ in range(int(rng.integers(1, 9))):
            raw[int(rng.integers(len(raw)))] ^= int(rng.integers(1, 256))
        t.raw_data = bytes(raw)
        return f"tensor {t.name!r}: raw_data bytes flipped"
    if what == 3:
        t.raw_data = b""
        return f"tensor {t.name!r}: raw_data empty"
    t.float_data.extend([1.0, 2.0])
    t.int64_data.extend([7])
    return f"tensor {t.name!r}: raw_data and typed data fields both set"


def tensor_dims(m: Mutant, rng: np.random.Generator) -> str | None:
    t = _target(m, rng)
    if t is None:
        return None
    what = int(rng.integers(4))
    if what == 0 and len(t.dims):
        k = int(rng.integers(len(t.dims)))
        t.dims[k] = pick(rng, EXTREME_DIMS)
        return f"tensor {t.name!r}: dims[{k}] = {t.dims[k]}"
    if what == 1:
        t.dims.append(int(pick(rng, (1, 2, 0))))
        return f"tensor {t.name!r}: one more dim ({list(t.dims)})"
    if what == 2 and len(t.dims):
        del t.dims[-1]
        return f"tensor {t.name!r}: one fewer dim ({list(t.dims)})"
    del t.dims[:]
    t.dims.extend(pick(rng, ([3, -(2**62)], [2**32, 2**32], [2**62, 4], [-1, -1], [0, 2**63 - 1])))
    return f"tensor {t.name!r}: dims {list(t.dims)} (the product wraps or is negative)"


def _external_place(m: Mutant, rng: np.random.Generator) -> tuple[TensorProto, dict[str, str], int] | None:
    t = _target(m, rng, initializers_only=True)
    if t is None or not _ensure_raw(t):
        return None
    raw = t.raw_data
    pad = int(rng.integers(0, 64))
    m.files[f"{MODEL_DIR}/weights.bin"] = bytes(pad) + raw
    m.files["outside/secret.bin"] = SECRET + raw
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    return t, {"location": "weights.bin", "offset": str(pad), "length": str(len(raw))}, len(raw)


def external_data(m: Mutant, rng: np.random.Generator) -> str | None:
    """An initializer moved to an external file, then its reference made hostile (or kept valid)."""
    placed = _external_place(m, rng)
    if placed is None:
        return None
    t, info, n = placed
    what = int(rng.integers(10))
    desc = "valid"
    if what == 1:
        info["offset"] = str(pick(rng, EXTREME_OFFSETS))
        desc = f"offset {info['offset']!r}"
    elif what == 2:
        info["length"] = str(pick(rng, EXTREME_OFFSETS + (n + 1, n - 1)))
        desc = f"length {info['length']!r}"
    elif what == 3:
        info["location"] = pick(rng, HOSTILE_LOCATIONS)
        desc = f"location {info['location']!r}"
    elif what == 4:
        m.links.append((f"{MODEL_DIR}/linked.bin", "outside/secret.bin"))
        info.update(location="linked.bin", offset=str(len(SECRET)))
        desc = "a hard link to a file outside the folder"
    elif what == 5:
        target = pick(rng, ("../outside/secret.bin", "/dev/zero", "/etc/hostname", "weights.bin"))
        m.symlinks.append((f"{MODEL_DIR}/sym.bin", target))
        info["location"] = "sym.bin"
        desc = f"a symbolic link to {target}"
    elif what == 6:
        m.fifos.append(f"{MODEL_DIR}/fifo.bin")
        info["location"] = "fifo.bin"
        desc = "a FIFO"
    elif what == 7:
        info.pop(pick(rng, ("location", "offset", "length")))
        info[pick(rng, ("checksum", "bogus", "location"))] = "x"
        desc = f"keys {sorted(info)}"
    elif what == 8:
        t.data_location = TensorProto.DEFAULT
        desc = "external_data entries on a tensor whose data_location is DEFAULT (no data)"
    for key, value in info.items():
        e = t.external_data.add()
        e.key, e.value = key, value
    if what == 9:
        t.external_data.add().CopyFrom(t.external_data[0])
        t.external_data[-1].value = "other.bin"
        desc = "location given twice"
    return f"tensor {t.name!r} external: {desc}"


def file_bytes(m: Mutant, rng: np.random.Generator) -> str | None:
    """The serialized file truncated, with bytes flipped, or with garbage appended."""
    what = int(rng.integers(3))
    r = np.random.default_rng(int(rng.integers(2**63)))
    if what == 0:
        frac = float(r.random())

        def truncate(data: bytes) -> bytes:
            return data[: int(len(data) * frac)]

        m.byte_patches.append(truncate)
        return f"file truncated to {frac:.3f} of its length"
    if what == 1:
        count = int(r.integers(1, 9))
        spots = r.random(count)
        xors = r.integers(1, 256, count)

        def flip(data: bytes) -> bytes:
            b = bytearray(data)
            for s, x in zip(spots, xors):
                if b:
                    b[int(s * len(b))] ^= int(x)
            return bytes(b)

        m.byte_patches.append(flip)
        return f"{count} byte(s) of the file flipped"
    tail = bytes(r.integers(0, 256, int(r.integers(1, 64)), dtype=np.uint8))
    m.byte_patches.append(lambda data: data + tail)
    return f"{len(tail)} garbage bytes appended"


def _extremes(dtype: np.dtype) -> list[float]:
    if dtype.kind == "f" or dtype.name.startswith(("bfloat", "float8", "float4")):
        return [math.inf, -math.inf, math.nan, -0.0, 1e30, -1e30, 65504.0, 1e-30, 3e38]
    try:
        info = np.iinfo(dtype)
        return [info.min, info.max, 0, -1 if info.min < 0 else 1, info.max // 2]
    except (ValueError, TypeError):
        return [0, 1]


def input_extreme(m: Mutant, rng: np.random.Generator) -> str | None:
    """Input values set to infinities, NaN, -0, huge or the integer extremes (all or some elements)."""
    cands = [k for k, a in enumerate(m.inputs) if a.size and a.dtype != np.bool_ and a.dtype.kind != "O"]
    if not cands:
        return None
    k = pick(rng, cands)
    a = m.inputs[k]
    v = pick(rng, _extremes(a.dtype))
    with np.errstate(all="ignore"):
        filled = np.array(v).astype(a.dtype)
        mask = rng.random(a.shape) < (1.0 if rng.random() < 0.3 else 0.25)
        m.inputs[k] = np.where(mask, filled, a).astype(a.dtype)
    return f"input {k}: some or all values = {v}"


def _random_like(dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 4, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def input_shape(m: Mutant, rng: np.random.Generator) -> str | None:
    """An input of another shape (a dimension 0, 1, larger, or one more or fewer), declared or not."""
    real = m.real_inputs()
    cands = [k for k in range(min(len(real), len(m.inputs))) if m.inputs[k].dtype.kind != "O"]
    if not cands:
        return None
    k = pick(rng, cands)
    a, vi = m.inputs[k], real[k]
    shape = list(a.shape)
    what = int(rng.integers(3))
    if what == 0 and shape:
        j = int(rng.integers(len(shape)))
        shape[j] = int(pick(rng, (0, 1, shape[j] + 1, 2 * shape[j] + 1)))
    elif what == 1 and shape:
        del shape[int(rng.integers(len(shape)))]
    else:
        shape.insert(int(rng.integers(len(shape) + 1)), int(pick(rng, (1, 2))))
    if math.prod(shape) > MAX_NEW_ELEMENTS:
        return None
    try:
        m.inputs[k] = _random_like(a.dtype, tuple(shape), rng)
    except (TypeError, ValueError):
        return None
    declared = rng.random() < 0.7
    if declared:
        dims = vi.type.tensor_type.shape
        dims.ClearField("dim")
        for d in shape:
            dims.dim.add().dim_value = d
    return f"input {k} ({vi.name}): shape {list(a.shape)} -> {shape}{' (declared)' if declared else ''}"


CASTS = (np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8, np.bool_)


def input_dtype(m: Mutant, rng: np.random.Generator) -> str | None:
    """An input cast to another element type, declared as that type."""
    real = m.real_inputs()
    cands = [k for k in range(min(len(real), len(m.inputs))) if m.inputs[k].dtype.kind in "biuf"]
    if not cands:
        return None
    k = pick(rng, cands)
    to = np.dtype(pick(rng, CASTS))
    with np.errstate(all="ignore"):
        m.inputs[k] = m.inputs[k].astype(to)
    real[k].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(to)
    return f"input {k} ({real[k].name}) cast to {to}"


DATA_MUTATORS: dict[str, Mutator] = {
    "tensor_raw": tensor_raw,
    "tensor_dims": tensor_dims,
    "external_data": external_data,
    "file_bytes": file_bytes,
    "input_extreme": input_extreme,
    "input_shape": input_shape,
    "input_dtype": input_dtype,
}

__all__ = ["DATA_MUTATORS", "promote_input", "tensors"]
