"""Generators of matrix products, convolutions, pools, normalizations and spatial kinds."""

from __future__ import annotations

from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant, generator
from glow_conformance.gen.common import FLOATS, NUMERIC, arr, simple
from glow_core.ir.types import ElemKind

E = ElemKind

# -- primitives ----------------------------------------------------------------------------------


@generator("MatMul", elems=NUMERIC)
def _matmul(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = "any" if elem.is_float else "near1"
    shapes: dict[str, list[tuple[int, ...]]] = {
        "unit": [(1, 1), (1, 1)], "odd": [(3, 5), (5, 7)], "vector-matrix": [(5,), (5, 7)],
        "matrix-vector": [(3, 5), (5,)], "batched-broadcast": [(2, 1, 3, 4), (3, 4, 5)],
        "large": [(64, 256), (256, 96)],
    }
    return {name: simple(elem, sh, [dom]) for name, sh in shapes.items()}


def _conv_attrs(nd: int, strides: int = 1, pads: tuple[int, ...] | None = None, dilations: int = 1,
                group: int = 1) -> dict[str, Any]:
    return {"strides": (strides,) * nd, "pads": pads if pads is not None else (0,) * (2 * nd),
            "dilations": (dilations,) * nd, "group": group}


def _conv(elem: ElemKind, x: tuple[int, ...], w: tuple[int, ...], attrs: dict[str, Any], bias: bool,
          extra: dict[str, Any] | None = None) -> Build:
    def build(rng: np.random.Generator) -> Variant:
        ops: list[np.ndarray | None] = [arr(elem, x, rng, "small"), arr(elem, w, rng, "small"),
                                        arr(elem, (w[0],), rng) if bias else None]
        return Variant(ops, {**attrs, **(extra or {})})

    return build


def conv_variants(elem: ElemKind, extra: dict[str, Any] | None = None) -> dict[str, Build]:
    return {
        "unit": _conv(elem, (1, 1, 1, 1), (1, 1, 1, 1), _conv_attrs(2), False, extra),
        "odd": _conv(elem, (1, 3, 7, 9), (4, 3, 3, 3), _conv_attrs(2, pads=(1, 1, 1, 1)), True, extra),
        "strided-dilated": _conv(elem, (2, 2, 9, 8), (3, 2, 3, 2), _conv_attrs(2, 2, (1, 0, 2, 1), 2), True, extra),
        "grouped": _conv(elem, (1, 4, 6, 6), (6, 2, 3, 3), _conv_attrs(2, group=2, pads=(1, 1, 1, 1)), False, extra),
        "depthwise": _conv(elem, (1, 3, 5, 5), (3, 1, 3, 3), _conv_attrs(2, group=3, pads=(1, 1, 1, 1)), True, extra),
        "1d": _conv(elem, (2, 4, 11), (3, 4, 3), _conv_attrs(1, 2, (1, 2)), True, extra),
        "3d": _conv(elem, (1, 2, 4, 5, 3), (2, 2, 2, 3, 2), _conv_attrs(3, pads=(0, 1, 1, 1, 0, 0)), True, extra),
        "large": _conv(elem, (1, 16, 32, 32), (16, 16, 3, 3), _conv_attrs(2, pads=(1, 1, 1, 1)), True, extra),
    }


@generator("Conv", elems=FLOATS)
def _conv_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return conv_variants(elem)


def _pool_attrs(nd: int, k: int, s: int, pads: tuple[int, ...] | None = None, d: int = 1, ceil: bool = False,
                **extra: Any) -> dict[str, Any]:
    return {"kernel_shape": (k,) * nd, "strides": (s,) * nd, "pads": pads if pads is not None else (0,) * (2 * nd),
            "dilations": (d,) * nd, "ceil_mode": ceil, **extra}


def pool_variants(kind: str, elem: ElemKind) -> dict[str, Build]:
    avg = kind in ("AvgPool", "LpPool")
    extra: dict[str, Any] = {"count_include_pad": False} if kind == "AvgPool" else {}
    if kind == "LpPool":
        extra = {"p": 2}
    out = {
        "unit": simple(elem, [(1, 1, 1, 1)], ["any"], _pool_attrs(2, 1, 1, **extra)),
        "odd": simple(elem, [(1, 3, 7, 9)], ["any"], _pool_attrs(2, 3, 2, (1, 1, 1, 1), **extra)),
        "ceil-mode": simple(elem, [(2, 2, 8, 7)], ["any"], _pool_attrs(2, 3, 2, (0, 1, 1, 0), ceil=True, **extra)),
        "1d": simple(elem, [(2, 3, 10)], ["any"], _pool_attrs(1, 4, 3, (2, 1), **extra)),
        "large": simple(elem, [(1, 16, 64, 64)], ["any"], _pool_attrs(2, 2, 2, **extra)),
    }
    if kind == "AvgPool":
        out["count-include-pad"] = simple(elem, [(1, 2, 6, 6)], ["any"],
                                          _pool_attrs(2, 3, 2, (1, 1, 1, 1), ceil=True, count_include_pad=True))
    if not avg:
        out["dilated"] = simple(elem, [(1, 2, 9, 9)], ["any"], _pool_attrs(2, 2, 1, (1, 1, 1, 1), d=2, **extra))
    return out


@generator("MaxPool", "AvgPool", "LpPool", elems=FLOATS | {E.INT8, E.UINT8})
def _pool_variants(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return pool_variants(kind, elem)


@generator("MaxPoolWithArgmax", elems=FLOATS | {E.INT8, E.UINT8})
def _maxpool_argmax(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    out = pool_variants("MaxPool", elem)
    del out["large"]
    for name, b in list(out.items()):
        out[name] = _with_storage_order(b, 0)
    out["column-major"] = lambda rng: _add_attrs(pool_variants("MaxPool", elem)["odd"](rng), storage_order=1)
    return out


def _with_storage_order(build: Build, order: int) -> Build:
    return lambda rng: _add_attrs(build(rng), storage_order=order)


def _add_attrs(v: Variant, **attrs: Any) -> Variant:
    v.attrs.update(attrs)
    return v


# -- high-level ------------------------------------------------------------------------------------

@generator("Gemm", elems=NUMERIC)
def _gemm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = "any" if elem.is_float else "near1"
    out = {"basic": simple(elem, [(3, 5), (5, 4), (4,)], [dom]),
           "no-c": lambda rng: Variant([arr(elem, (3, 5), rng, dom), arr(elem, (5, 4), rng, dom), None])}
    if elem.is_float:
        out["transposed-scaled"] = simple(elem, [(5, 3), (4, 5), (3, 1)], [dom],
                                          {"alpha": 0.5, "beta": 2.0, "trans_a": True, "trans_b": True})
    return out


@generator("FusedMatMul", elems=NUMERIC)
def _fused_matmul(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = "any" if elem.is_float else "near1"
    return {"relu": simple(elem, [(3, 5), (5, 4), (4,)], [dom], {"activation": "relu"}),
            "clip": simple(elem, [(2, 3, 5), (5, 4), (4,)], [dom], {"activation": "clip",
                                                                    "clip_min": -1.0 if elem.is_float or elem.value
                                                                    .startswith("int") else 0.0,
                                                                    "clip_max": 2.0}),
            "none": lambda rng: Variant([arr(elem, (3, 5), rng, dom), arr(elem, (5, 4), rng, dom), None]),
            **({"hardswish": simple(elem, [(2, 3, 5), (5, 4), (4,)], [dom], {"activation": "hardswish"})}
               if elem is ElemKind.FLOAT32 else {})}


def _dequant_case(elem: ElemKind, lhs: tuple[int, ...], kn: tuple[int, int], scale: tuple[int, int], bias: bool,
                  attrs: dict[str, Any] | None = None) -> Build:
    """DequantMatMul operands: float32 LHS, an 8-bit constant weight, a positive scale, an optional bias."""
    f32 = ElemKind.FLOAT32

    def build(rng: np.random.Generator) -> Variant:
        s = (rng.random(scale) * 0.05 + 0.001).astype(np.float32)
        b = arr(f32, (kn[1],), rng) if bias else None
        return Variant([arr(f32, lhs, rng), arr(elem, kn, rng, "full"), s, b], dict(attrs or {}), consts=(1, 2))
    return build


@generator("DequantMatMul", elems={ElemKind.INT8, ElemKind.UINT8})
def _dequant_matmul(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"per-column": _dequant_case(elem, (3, 40), (40, 37), (1, 37), True, {"activation": "relu"}),
            "per-row": _dequant_case(elem, (2, 5, 24), (24, 70), (24, 1), False),
            "one-scale": _dequant_case(elem, (1, 33), (33, 17), (1, 1), True,
                                       {"activation": "clip", "clip_min": -1.0, "clip_max": 1.0})}


@generator("FusedConv", elems=FLOATS)
def _fused_conv(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    relu = conv_variants(elem, {"activation": "relu"})
    clip = conv_variants(elem, {"activation": "clip", "clip_min": 0.0, "clip_max": 6.0})
    out = {"relu": relu["odd"], "relu-grouped": relu["grouped"], "clip": clip["strided-dilated"]}
    if elem is ElemKind.FLOAT32:  # (hardswish is a float32 activation)
        hswish = conv_variants(elem, {"activation": "hardswish"})
        out.update({"hardswish": hswish["large"], "hardswish-depthwise": hswish["depthwise"],
                    "hardswish-3d": hswish["3d"]})
    return out


@generator("Einsum", elems=NUMERIC)
def _einsum(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    dom = "any" if elem.is_float else "near1"
    return {"matmul": simple(elem, [(3, 4), (4, 5)], [dom], {"equation": "ij,jk->ik"}),
            "batched-ellipsis": simple(elem, [(2, 3, 4), (2, 4, 5)], [dom], {"equation": "...ij,...jk->...ik"}),
            "transpose": simple(elem, [(3, 4, 5)], [dom], {"equation": "abc->cab"}),
            "trace-sum": simple(elem, [(4, 4)], [dom], {"equation": "ii->"}),
            "outer": simple(elem, [(3,), (4,)], [dom], {"equation": "i,j->ij"})}


@generator("ConvTranspose", elems=FLOATS)
def _conv_transpose(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(x: tuple[int, ...], w: tuple[int, ...], attrs: dict[str, Any], bias: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            m = w[1] * attrs["group"]
            return Variant([arr(elem, x, rng, "small"), arr(elem, w, rng, "small"),
                            arr(elem, (m,), rng) if bias else None], dict(attrs))

        return b

    return {"basic": build((1, 2, 4, 5), (2, 3, 3, 3), {**_conv_attrs(2), "output_padding": (0, 0)}, True),
            "strided-padded": build((1, 2, 3, 4), (2, 2, 3, 2), {**_conv_attrs(2, 2, (1, 0, 1, 1)),
                                                                 "output_padding": (1, 0)}, False),
            "grouped-1d": build((2, 4, 5), (4, 1, 3), {**_conv_attrs(1, 1, (0, 0), 2, 2),
                                                        "output_padding": (0,)}, True)}


@generator("Col2Im", elems=NUMERIC)
def _col2im(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    # image 4x5, block 2x3, stride 1, no pads: 3x3 = 9 blocks; C = 2 -> input [1, 2*6, 9]
    return {"basic": simple(elem, [(1, 12, 9)], ["any"], {"image_shape": (4, 5), "block_shape": (2, 3),
                                                          "strides": (1, 1), "pads": (0, 0, 0, 0),
                                                          "dilations": (1, 1)}),
            "strided-padded": simple(elem, [(2, 4, 9)], ["any"], {"image_shape": (5, 5), "block_shape": (2, 2),
                                                                  "strides": (2, 2), "pads": (1, 1, 0, 0),
                                                                  "dilations": (1, 1)})}


@generator("GridSample", elems=FLOATS)
def _grid_sample(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(mode: str, padding: str, align: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (1, 2, 4, 5), rng)
            grid = rng.uniform(-1.2, 1.2, (1, 3, 6, 2)).astype(elem.dtype)
            return Variant([x, grid], {"mode": mode, "padding_mode": padding, "align_corners": align})

        return b

    return {"linear-zeros": build("linear", "zeros", False), "nearest-border": build("nearest", "border", True),
            "cubic-reflection": build("cubic", "reflection", False)}


@generator("RoiAlign", elems=FLOATS)
def _roi_align(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(mode: str) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (2, 3, 8, 8), rng)
            starts = rng.uniform(0, 4, (3, 2))
            rois = np.concatenate([starts, starts + rng.uniform(1, 4, (3, 2))], axis=1).astype(elem.dtype)
            idx = np.array([0, 1, 1], dtype=np.int64)
            return Variant([x, rois, idx], {"mode": mode, "output_height": 2, "output_width": 3,
                                            "sampling_ratio": 2, "spatial_scale": 1.0})

        return b

    return {"avg": build("avg"), "max": build("max")}


@generator("DeformConv", elems=FLOATS)
def _deform_conv(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(with_mask: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = arr(elem, (1, 2, 5, 5), rng)
            w = arr(elem, (3, 2, 2, 2), rng, "small")
            off = rng.uniform(-1.5, 1.5, (1, 8, 4, 4)).astype(elem.dtype)
            mask = rng.uniform(0, 1, (1, 4, 4, 4)).astype(elem.dtype) if with_mask else None
            return Variant([x, w, off, arr(elem, (3,), rng), mask], _conv_attrs(2))

        return b

    return {"basic": build(False), "masked": build(True)}


# -- normalizations ----------------------------------------------------------------------------------

def _params(elem: ElemKind, rng: np.random.Generator, c: int) -> list[np.ndarray | None]:
    return [arr(elem, (c,), rng, "positive"), arr(elem, (c,), rng)]


@generator("BatchNormalization", elems=FLOATS)
def _batchnorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(shape: tuple[int, ...]) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            c = shape[1]
            return Variant([arr(elem, shape, rng), *_params(elem, rng, c), arr(elem, (c,), rng),
                            arr(elem, (c,), rng, "positive")], {"epsilon": 1e-3})

        return b

    return {"2d": build((2, 3)), "4d": build((2, 3, 4, 5))}


@generator("InstanceNormalization", elems=FLOATS)
def _instancenorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": lambda rng: Variant([arr(elem, (2, 3, 4, 5), rng), *_params(elem, rng, 3)], {"epsilon": 1e-5})}


@generator("GroupNormalization", elems=FLOATS)
def _groupnorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": lambda rng: Variant([arr(elem, (2, 4, 3, 3), rng), *_params(elem, rng, 4)],
                                         {"num_groups": 2, "epsilon": 1e-5})}


@generator("LayerNormalization", elems=FLOATS)
def _layernorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(axis: int, bias: bool) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            shape = (2, 3, 4)
            pshape = shape[axis:]
            return Variant([arr(elem, shape, rng), arr(elem, pshape, rng, "positive"),
                            arr(elem, pshape, rng) if bias else None], {"axis": axis, "epsilon": 1e-5})

        return b

    return {"last-axis": build(2, True), "middle-axis-no-bias": build(1, False)}


@generator("RMSNormalization", elems=FLOATS)
def _rmsnorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"basic": lambda rng: Variant([arr(elem, (2, 3, 4), rng), arr(elem, (4,), rng, "positive")],
                                         {"axis": 2, "epsilon": 1e-5})}


@generator("LpNormalization", elems=FLOATS)
def _lpnorm(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"p2": simple(elem, [(3, 4, 5)], ["any"], {"axis": 1, "p": 2}),
            "p1": simple(elem, [(3, 4, 5)], ["any"], {"axis": 2, "p": 1})}


@generator("MeanVarianceNormalization", elems=FLOATS)
def _mvn(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"nchw": simple(elem, [(2, 3, 4, 5)], ["any"], {"axes": (0, 2, 3), "epsilon": 1e-9})}


@generator("LRN", elems=FLOATS)
def _lrn(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    return {"odd-size": simple(elem, [(2, 5, 3, 3)], ["any"], {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 1.0}),
            "even-size": simple(elem, [(1, 4, 2, 2)], ["any"], {"size": 2, "alpha": 0.5, "beta": 0.5, "bias": 2.0})}


@generator("NegativeLogLikelihoodLoss", elems=FLOATS)
def _nll(kind: str, elem: ElemKind, avail: frozenset[ElemKind]) -> dict[str, Build]:
    def build(reduction: str, weight: bool, ignore: int | None) -> Build:
        def b(rng: np.random.Generator) -> Variant:
            x = rng.uniform(-3, 0, (4, 3, 2)).astype(elem.dtype)
            target = rng.integers(0, 3, (4, 2)).astype(np.int64)
            w = arr(elem, (3,), rng, "positive") if weight else None
            attrs = {"reduction": reduction, "ignore_index": 0 if ignore is None else ignore,
                     "has_ignore_index": ignore is not None}
            return Variant([x, target, w], attrs)

        return b

    return {"mean-weighted": build("mean", True, None), "sum": build("sum", False, None),
            "none-ignore": build("none", True, 1)}

