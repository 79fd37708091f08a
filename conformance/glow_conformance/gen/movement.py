"""Generators of the data-movement and indexing kinds."""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import ALL, FLOATS, NUMERIC, PLAIN, arr, simple, types_for
from glow_core.ir.types import ElemKind

E = ElemKind


def _one(elem: ElemKind, shape: tuple[int, ...], attrs: dict[str, Any], domain: str = "any") -> Build:
    return simple(elem, [shape], [domain], attrs)


def _with_specials(elem: ElemKind, shape: tuple[int, ...], attrs: dict[str, Any]) -> Build:
    """Random values with the kind's special values at the front: movement must keep every bit."""

    def build(rng: np.random.Generator) -> Variant:
        from glow_conformance.values import special_values

        flat = arr(elem, shape, rng).reshape(-1)
        if not elem.is_quantized:
            sp = special_values(elem)
            n = min(sp.size, flat.size)
            flat[:n] = sp[:n]
        a = flat.reshape(shape)
        return Variant([a], dict(attrs), types_for([a], elem))

    return build


# -- primitives --------------------------------------------------------------------------------

@generator("Reshape", elems=ALL)
def _reshape(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"scalar": _one(elem, (), {"shape": (1, 1)}), "unit": _one(elem, (1, 1, 1), {"shape": (1,)}),
            "odd": _one(elem, (3, 5, 7), {"shape": (7, 15)}), "large": _one(elem, (64, 1031), {"shape": (1031, 64)}),
            "special": _with_specials(elem, (4, 5), {"shape": (20,)})}


@generator("Transpose", elems=ALL)
def _transpose(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"unit": _one(elem, (1, 1, 1), {"perm": (2, 0, 1)}), "odd": _one(elem, (3, 5, 7), {"perm": (2, 0, 1)}),
            "rank4": _one(elem, (2, 3, 4, 5), {"perm": (0, 2, 3, 1)}),
            "large": _one(elem, (64, 1031), {"perm": (1, 0)}),
            "special": _with_specials(elem, (4, 5), {"perm": (1, 0)})}


@generator("Slice", elems=ALL)
def _slice(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {
        "unit": _one(elem, (1, 1), {"starts": (0, 0), "sizes": (1, 1), "steps": (1, 1)}),
        "odd": _one(elem, (7, 9), {"starts": (1, 8), "sizes": (3, 4), "steps": (2, -2)}),
        "empty": _one(elem, (3, 5), {"starts": (0, 0), "sizes": (0, 5), "steps": (1, 1)}),
        "large": _one(elem, (64, 1031), {"starts": (3, 1030), "sizes": (30, 500), "steps": (2, -2)}),
        "special": _with_specials(elem, (4, 5), {"starts": (3, 0), "sizes": (4, 5), "steps": (-1, 1)}),
    }


@generator("Concat", elems=ALL)
def _concat(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"unit": simple(elem, [(1,), (1,)], ["any"], {"axis": 0}),
            "odd": simple(elem, [(3, 2, 5), (3, 4, 5), (3, 1, 5)], ["any"], {"axis": 1}),
            "one-operand": simple(elem, [(3, 5)], ["any"], {"axis": 1}),
            "large": simple(elem, [(64, 1031), (17, 1031)], ["any"], {"axis": 0})}


def _gather(elem: ElemKind, data_shape: tuple[int, ...], idx_shape: tuple[int, ...], axis: int,
            idx_elem: ElemKind = E.INT64) -> Build:
    def build(rng: np.random.Generator) -> Variant:
        data = arr(elem, data_shape, rng)
        dim = data_shape[axis]
        idx = rng.integers(-dim, dim, size=idx_shape).astype(idx_elem.dtype)  # negatives count from the end
        return Variant([data, idx], {"axis": axis}, types_for([data, idx], elem))

    return build


@generator("Gather", elems=ALL)
def _gather_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    out = {"scalar": _gather(elem, (5, 3), (), 0), "unit": _gather(elem, (1, 1), (1,), 1),
           "odd": _gather(elem, (5, 7, 3), (2, 4), 1), "large": _gather(elem, (1031, 64), (500,), 0)}
    if E.INT32 in avail:
        out["odd-int32-indices"] = _gather(elem, (5, 7, 3), (6,), 2, E.INT32)
    return out


@generator("Broadcast", elems=ALL)
def _broadcast(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"scalar": _one(elem, (), {"shape": (2, 3)}), "unit": _one(elem, (1, 1), {"shape": (4, 3, 5)}),
            "odd": _one(elem, (3, 1, 5), {"shape": (2, 3, 7, 5)}), "large": _one(elem, (1, 1031), {"shape": (64, 1031)})}


@generator("Pad", elems=PLAIN)
def _pad(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    value = np.asarray(True if elem == E.BOOL else 7.5 if elem.is_float else 7)
    return {
        "constant": _one(elem, (3, 5), {"pads": (1, 0, 2, 3), "mode": "constant", "value": value}),
        "unit": _one(elem, (1, 1), {"pads": (1, 1, 1, 1), "mode": "constant", "value": value}),
        "reflect": _one(elem, (4, 5), {"pads": (2, 1, 3, 4), "mode": "reflect"}),
        "edge": _one(elem, (3, 5, 2), {"pads": (1, 0, 2, 2, 3, 0), "mode": "edge"}),
        "wrap": _one(elem, (4, 5), {"pads": (3, 2, 1, 7), "mode": "wrap"}),
        "large": _one(elem, (64, 1031), {"pads": (1, 2, 3, 4), "mode": "constant", "value": value}),
    }


def _unique_tuples(rng: np.random.Generator, dims: tuple[int, ...], n: int) -> np.ndarray:
    flat = rng.choice(int(np.prod(dims)), size=n, replace=False)
    idx = np.stack(np.unravel_index(flat, dims), axis=-1).astype(np.int64)
    neg = rng.random(idx.shape) < 0.3
    return np.where(neg, idx - np.asarray(dims, np.int64), idx)  # some negative (from the end)


def _scatter_nd(elem: ElemKind, data_shape: tuple[int, ...], n: int, k: int, reduction: str) -> Build:
    def build(rng: np.random.Generator) -> Variant:
        data = arr(elem, data_shape, rng, "near1" if reduction == "mul" else "any")
        idx = _unique_tuples(rng, data_shape[:k], n)
        upd = arr(elem, (n,) + data_shape[k:], rng, "near1" if reduction == "mul" else "any")
        return Variant([data, idx, upd], {"reduction": reduction})

    return build


@generator("ScatterND", elems=PLAIN)
def _scatter_nd_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    out = {"odd": _scatter_nd(elem, (4, 5, 6), 3, 2, "none"), "full-tuples": _scatter_nd(elem, (4, 5), 6, 2, "none"),
           "slices": _scatter_nd(elem, (6, 3, 2), 2, 1, "none"), "large": _scatter_nd(elem, (1031, 64), 300, 1, "none")}
    if elem in NUMERIC:
        for red in ("add", "mul", "max", "min"):
            out[f"odd-{red}"] = _scatter_nd(elem, (4, 5, 6), 3, 2, red)
    return out


# -- high-level ----------------------------------------------------------------------------------

@generator("Split", elems=ALL)
def _split(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": _one(elem, (3, 7, 2), {"axis": 1, "splits": (2, 4, 1)}),
            "empty-piece": _one(elem, (6, 2), {"axis": 0, "splits": (3, 0, 3)})}


@generator("Tile", elems=ALL)
def _tile(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": _one(elem, (2, 3, 1), {"repeats": (2, 1, 3)}), "scalar": _one(elem, (), {"repeats": ()})}


@generator("DepthToSpace", elems=ALL)
def _d2s(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"dcr": _one(elem, (1, 8, 2, 3), {"blocksize": 2, "mode": "DCR"}),
            "crd": _one(elem, (2, 8, 3, 2), {"blocksize": 2, "mode": "CRD"})}


@generator("SpaceToDepth", elems=ALL)
def _s2d(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": _one(elem, (1, 2, 4, 6), {"blocksize": 2})}


@generator("Trilu", elems=PLAIN)
def _trilu(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"upper": _one(elem, (2, 4, 5), {"upper": True, "k": 1}),
            "lower": _one(elem, (5, 4), {"upper": False, "k": -1})}


def _indices_along(rng: np.random.Generator, shape: tuple[int, ...], dim: int) -> np.ndarray:
    return rng.integers(-dim, dim, size=shape).astype(np.int64)


@generator("GatherElements", elems=ALL)
def _gather_elements(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(rng: np.random.Generator) -> Variant:
        data = arr(elem, (4, 5, 3), rng)
        idx = _indices_along(rng, (4, 7, 2), 5)
        return Variant([data, idx], {"axis": 1}, types_for([data, idx], elem))

    return {"basic": build}


@generator("GatherND", elems=ALL)
def _gather_nd(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(batch_dims: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            data = arr(elem, (3, 4, 5), rng)
            if batch_dims == 0:
                idx = np.stack([rng.integers(0, 3, (2, 3)), rng.integers(-4, 4, (2, 3))], axis=-1)
            else:
                idx = rng.integers(0, 4, (3, 2, 1))
            idx = idx.astype(np.int64)
            return Variant([data, idx], {"batch_dims": batch_dims}, types_for([data, idx], elem))

        return b

    return {"basic": build(0), "batch-dims": build(1)}


@generator("ScatterElements", elems=PLAIN)
def _scatter_elements(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(reduction: str) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            data = arr(elem, (4, 5), rng)
            # distinct targets per column for "none" (duplicates would make the order matter)
            idx = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1).astype(np.int64)
            upd = arr(elem, (3, 5), rng)
            return Variant([data, idx, upd], {"axis": 0, "reduction": reduction})

        return b

    out = {"none": build("none")}
    if elem in NUMERIC:
        out["add"] = build("add")
        out["max"] = build("max")
    return out


@generator("OneHot", elems=PLAIN)
def _one_hot(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(axis: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            idx = rng.integers(-5, 7, (3, 4)).astype(np.int64)  # out of range matches nothing
            values = np.array([0, 1] if elem != E.BOOL else [False, True]).astype(elem.dtype)
            return Variant([idx, values], {"depth": 5, "axis": axis})

        return b

    return {"last-axis": build(2), "first-axis": build(0)}


@generator("ReverseSequence", elems=ALL)
def _reverse_sequence(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(batch_axis: int) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            shape = (4, 3, 2) if batch_axis == 1 else (3, 4, 2)
            data = arr(elem, shape, rng)
            lens = np.array([4, 0, 2], dtype=np.int64)
            return Variant([data, lens], {"batch_axis": batch_axis, "time_axis": 1 - batch_axis},
                           types_for([data, lens], elem))

        return b

    return {"time-major": build(1), "batch-major": build(0)}


@generator("TensorScatter", elems=PLAIN)
def _tensor_scatter(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(circular: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            past = arr(elem, (2, 3, 6, 4), rng)
            upd = arr(elem, (2, 3, 2, 4), rng)
            write = np.array([1, 5 if circular else 3], dtype=np.int64)
            return Variant([past, upd, write], {"axis": 2, "circular": circular})

        return b

    return {"linear": build(False), "circular": build(True)}


@generator("Resize", elems=PLAIN)
def _resize(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(mode: str, coord: str, out_hw: tuple[int, int], extra: dict[str, Any] | None = None) -> Build:
        in_shape = (1, 2, 4, 5)
        sizes = (1, 2) + out_hw
        scales = tuple(float(o) / i for o, i in zip(sizes, in_shape))
        attrs = {"sizes": sizes, "scales": scales, "mode": mode, "coordinate_transformation_mode": coord,
                 **(extra or {})}
        return _one(elem, in_shape, attrs)

    out = {"nearest-up": build("nearest", "asymmetric", (8, 10), {"nearest_mode": "floor"}),
           "nearest-half-pixel": build("nearest", "half_pixel", (6, 7))}
    if elem in FLOATS:
        out["linear-down"] = build("linear", "half_pixel", (3, 3))
        out["linear-align-corners"] = build("linear", "align_corners", (7, 9))
        out["cubic"] = build("cubic", "pytorch_half_pixel", (6, 8))
    return out


@generator("MaxUnpool", elems=FLOATS)
def _max_unpool(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(rng: np.random.Generator) -> Variant:
        x = arr(elem, (1, 2, 2, 2), rng)
        # each input position scatters to a distinct position of its 4x4 plane (flat N*C*H*W indices)
        pos = np.stack([rng.choice(16, 4, replace=False) for _ in range(2)]).reshape(1, 2, 2, 2)
        idx = (pos + (np.arange(2) * 16).reshape(1, 2, 1, 1)).astype(np.int64)
        return Variant([x, idx], {"output_shape": (1, 2, 4, 4)})

    return {"basic": build}

