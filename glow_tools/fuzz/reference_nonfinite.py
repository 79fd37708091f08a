"""Corrections of ``onnx.reference`` on NaN and infinite inputs, each scoped to the elements it concerns.

Each class runs the reference's own kernel of the model's opset and changes only
the output elements where the reference departs from the spec; everywhere else
its answer stands (and judges glow).

**Pooling over NaN.** The spec defines MaxPool, AveragePool and LpPool over all
the values of a window: "max pooling consisting of computing the max on all
values of a subset of the input tensor", "average pooling consisting of
computing the average on all values of a subset of the input tensor", "Lp
pooling consisting of computing the Lp norm on all values of a subset of the
input tensor" (the ops' schemas). ``onnx.reference`` marks padding with NaN and
drops every NaN of a window (``window_vals[~np.isnan(window_vals)]``, and its
MaxPool compares with ``>``), so a NaN input is skipped as if it were padding.
The average, the Lp norm and the max of values one of which is NaN are NaN
(IEEE 754 arithmetic, and ``np.maximum`` in the reference's own Max and
ReduceMax). :class:`NaNWindows` gives NaN exactly at the output elements whose
window (padding excluded) holds a NaN input element: the reference's kernel run
on the indicator ``isnan(x)`` is positive there and only there. (onnxruntime's
MaxPool compares in order and gives NaN only when the NaN comes last in the
window; glow's gives NaN for any NaN in the window.)

**MaxPool's indices.** The spec: "The indices are computed as flatten 1-D
tensor, and the indices do not consider padding. So the values in indices are
in [0, N x C x D1 x ... x Dn)", and ``storage_order`` chooses row or column
major. ``onnx.reference`` has two MaxPool paths: with every stride and dilation
1 it takes a common pooling kernel whose indices are neither flattened over the
batch and channels nor positions of the input (it unravels the window's argmax
by the output's shape) and ignore ``storage_order``; otherwise a general kernel
that follows the spec (and agrees with onnxruntime). :class:`NaNWindows` takes
the Indices output from the general kernel where the reference took the common
path. Where a window holds a NaN its max is NaN (above), so its index is a NaN's
position: the first NaN in the window's order, the element the reference's own
tie rule picks (its kernel run on the indicator ``isnan(x)``, whose maximal
elements are exactly the NaNs), as ``np.argmax`` (the reference's ArgMax) does.
The index then points at the value the values output holds, as every other
index does.

**Resize over infinities.** The spec: "it calculates every value in the output
tensor as a weighted average of neighborhood (a.k.a. sampling locations) in the
input tensor". ``onnx.reference`` multiplies every tap of the neighbourhood by
its weight, zero weights too, so an infinite input element gives ``0 * inf =
NaN`` in every output element whose neighbourhood holds it, even where its weight
is 0 (``nearest`` mode: every output but the one it is nearest to), and its
separable evaluation can also give a finite value (``-3.4e38``) where an
infinite tap of weight 1 makes the average infinite. A tap of weight 0
contributes nothing to a weighted average; :class:`ZeroWeightTaps` recomputes
the output elements where the reference gives NaN or an infinite input has a
non-zero weight: the finite inputs' weighted sum (the reference's kernel on the
input with infinities set to 0), then ``+inf`` or ``-inf`` where an infinite
input has a non-zero weight of that sign's effect, NaN where both occur
(``inf - inf``); every other element is the reference's. The weights come from the
reference's kernel itself, run on the indicator of the ``+inf`` (``-inf``)
elements: ``nearest`` and ``linear`` weights are not negative, so the weighted
indicator is positive exactly where such an element counts. A NaN input is
treated the same way in those two modes (``0 * NaN`` gave NaN in every
``nearest`` output whose neighbourhood holds it): NaN exactly where a NaN input
has a non-zero weight.

``cubic`` weights have both signs, and an infinity reached by taps of both
signs (edge taps repeat an element; the evaluation is separable, axis by axis)
gives ``+inf``, ``-inf`` or NaN depending on the evaluation order, which the
spec does not fix. Output elements that an infinite input reaches with a
non-zero weight (each infinite element's own weights: the kernel on its
impulse, up to :data:`MAX_IMPULSES` of them) are therefore *undetermined* when
the Resize gives a graph output (:data:`UNDETERMINED`; the judge compares the
other elements), and the reference's NaN from a tap of weight 0 elsewhere
becomes the finite inputs' value. Past :data:`MAX_IMPULSES` infinite elements
the reference's answer stands.

**Fourier transforms over NaN and infinities.** The spec defines the DFT as
``y[m, k] = sum_{n=0}^{N-1} e^{-2 pi j k n / N} x[m, n]`` (DFT's schema; STFT
computes "a DFT of each windowed frame"). A NaN in a transform's input (after
the window) makes every term it enters NaN, whatever the twiddle factor: every
element of that transform's output is NaN. ``onnx.reference`` computes real
transforms with numpy's rfft, which sets the imaginary part of the zero (and
Nyquist) frequency to 0 instead of summing; :class:`NonFiniteFrames` gives NaN
at every output element of a transform whose input holds a NaN. An infinite
input element enters the sum through factors such as ``sin(k pi)``, exactly 0
in the spec's formula but not in any rounded twiddle (``3.7e-16`` in float64,
``-8.7e-8`` for float32's pi), so its terms are ``0 * inf`` or an infinity of
either sign, and the sum ``inf``, ``-inf`` or NaN by the rounding of the
twiddles: the output elements of a transform whose input holds an infinity
(and no NaN) are *undetermined* (:data:`UNDETERMINED`) when the transform gives
a graph output; the other transforms' elements are the reference's.

**LeakyRelu, PRelu and Elu with an infinite or NaN coefficient.** Each spec
gives the identity on the non-negative inputs: "f(x) = alpha * x for x < 0,
f(x) = x for x >= 0" (LeakyRelu), "f(x) = slope * x for x < 0, f(x) = x for
x >= 0" (PRelu), "f(x) = alpha * (exp(x) - 1.) for x < 0, f(x) = x for x >= 0"
(Elu). ``onnx.reference`` multiplies every element by the coefficient:
LeakyRelu by ``1 - (1 - 1) * alpha`` for a positive input, which is NaN for an
infinite alpha, and PRelu and Elu take their negative branch at 0 (``0 * inf =
NaN``). :class:`IdentityAtNonNegative` gives ``x`` at the elements with
``x >= 0``; the others are the reference's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

#: infinite elements whose weights the cubic correction computes one by one (each one run of the kernel)
MAX_IMPULSES = 256


def reference_kernel(onnx_node: Any, run_params: dict[str, Any]) -> Any:
    """``onnx.reference``'s own kernel of the node's op for the model's opset."""
    from onnx.reference.ops._op_list import load_op

    return load_op("", onnx_node.op_type, run_params["opsets"].get("", None))(onnx_node, run_params)


class _OverReference(OpRun):
    """An op run by ``onnx.reference``'s own kernel (``self._kernel``), whose results a subclass corrects."""

    op_domain = ""

    def __init__(self, onnx_node: Any, run_params: dict[str, Any]) -> None:
        super().__init__(onnx_node, run_params)
        self._kernel = reference_kernel(onnx_node, run_params)


class NaNWindows(_OverReference):
    """The reference's MaxPool / AveragePool / LpPool with NaN where the window holds a NaN (module doc)."""

    def _run(self, x: np.ndarray, *rest: Any, **attrs: Any) -> tuple[Any, ...]:
        res = list(self._kernel.run(x, *rest))
        if len(res) > 1:
            res[1] = self._indices(x, res[1])
        if x.dtype.kind != "f" or not np.isnan(x).any():
            return tuple(res)
        isnan = np.isnan(x).astype(x.dtype)
        ran = self._kernel.run(isnan, *rest)
        held = np.asarray(ran[0]) > 0
        y = np.asarray(res[0])
        res[0] = np.where(held, np.array(np.nan, y.dtype), y).astype(y.dtype)
        if len(res) > 1:  # the max of a NaN window is a NaN: its index is the first NaN's (module doc)
            res[1] = np.where(held, self._indices(isnan, ran[1]), res[1]).astype(np.asarray(res[1]).dtype)
        return tuple(res)

    def _indices(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """MaxPool's Indices (module doc): from the reference's general kernel where it took its common path."""
        k = self._kernel
        if any(v != 1 for v in (k.strides or [])) or any(v != 1 for v in (k.dilations or [])):
            return indices  # the general path: flattened over N x C x D1 x ... like the spec says
        return k._max_pool(x, auto_pad=k.auto_pad, ceil_mode=k.ceil_mode, dilations=k.dilations,
                           kernel_shape=k.kernel_shape, pads=k.pads, storage_order=k.storage_order,
                           strides=k.strides)[1]


#: per output name of a cubic Resize run by the judge, the elements an infinite input reaches with a non-zero
#: weight (undetermined: see the module doc); read and cleared by ``runners.run_reference``
UNDETERMINED: dict[str, np.ndarray] = {}


def _signs(run: Any, x: np.ndarray, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where an infinite input contributes +inf, and where -inf, through a non-zero (non-negative) weight."""
    return run((x == np.inf).astype(x.dtype)) - zero > 0, run((x == -np.inf).astype(x.dtype)) - zero > 0


def _reached(run: Any, x: np.ndarray, zero: np.ndarray) -> np.ndarray | None:
    """Where some infinite input has a non-zero weight, each one's weights taken alone (None: more than
    :data:`MAX_IMPULSES` infinite elements)."""
    where = np.argwhere(np.isinf(x))
    if len(where) > MAX_IMPULSES:
        return None
    reached = np.zeros(zero.shape, bool)
    for j in map(tuple, where):
        impulse = np.zeros_like(x)
        impulse[j] = 1
        reached |= run(impulse) - zero != 0
    return reached


class ZeroWeightTaps(_OverReference):
    """The reference's Resize where a tap of weight 0 holds an infinity (module doc)."""

    def _run(self, x: np.ndarray, *rest: Any, **attrs: Any) -> tuple[Any, ...]:
        y = np.asarray(self._kernel.run(x, *rest)[0])
        if x.dtype.kind != "f" or np.isfinite(x).all():
            return (y,)
        mode = next((a.s.decode() for a in self.onnx_node.attribute if a.name == "mode"), "nearest")
        if mode == "cubic" and not np.isinf(x).any():
            return (y,)  # a NaN tap of a cubic neighbourhood: the reference's answer stands

        def run(a: np.ndarray) -> np.ndarray:
            return np.asarray(self._kernel.run(a, *rest)[0], np.float64)

        with np.errstate(all="ignore"):
            zero = run(np.zeros_like(x))
            base = run(np.where(np.isfinite(x), x, x.dtype.type(0)))
            if mode == "cubic":
                reached = _reached(run, x, zero)
                if reached is None:
                    return (y,)
                UNDETERMINED[self.onnx_node.output[0]] = reached
                return (np.where(np.isnan(y) & ~reached, base, y).astype(y.dtype),)
            plus, minus = _signs(run, x, zero)
            held = run(np.isnan(x).astype(x.dtype)) - zero > 0  # a NaN input with a non-zero weight
            fixed = np.where(plus & minus, np.nan, np.where(plus, np.inf, np.where(minus, -np.inf, base)))
            fixed = np.where(np.isnan(base) | held, np.nan, fixed)
        return (np.where(np.isnan(y) | plus | minus | held, fixed, y).astype(y.dtype),)


class NonFiniteFrames(_OverReference):
    """The reference's DFT / STFT, NaN over a transform whose input holds a NaN, and a transform whose input
    holds an infinity undetermined (module doc)."""

    def _run(self, x: np.ndarray, *rest: Any, **attrs: Any) -> tuple[Any, ...]:
        y = np.asarray(self._kernel.run(x, *rest)[0])
        if x.dtype.kind != "f" or (np.isfinite(x).all() and all(
                not isinstance(r, np.ndarray) or r.dtype.kind != "f" or np.isfinite(r).all() for r in rest)):
            return (y,)
        with np.errstate(all="ignore"):
            nan, inf = self._stft_frames(x, *rest) if self.onnx_node.op_type == "STFT" else self._dft_lines(x, *rest)
        nan, inf = np.broadcast_to(nan, y.shape), np.broadcast_to(inf & ~nan, y.shape)
        if inf.any():
            UNDETERMINED[self.onnx_node.output[0]] = inf.copy()
        return (np.where(nan, np.array(np.nan, y.dtype), y),)

    @staticmethod
    def _stft_frames(x: np.ndarray, step: Any, window: Any = None, length: Any = None,
                     *_: Any) -> tuple[np.ndarray, np.ndarray]:
        """Per (batch, frame), whether the windowed frame holds a NaN, an infinity; shaped [B, F, 1, 1]."""
        size = int(length) if length is not None else (len(window) if window is not None else x.shape[-2])
        w = np.ones(size) if window is None else np.asarray(window, np.float64)
        frames = 1 + (x.shape[-2] - size) // int(step)
        at = np.arange(frames)[:, None] * int(step) + np.arange(size)[None, :]
        windowed = x.astype(np.float64)[..., at, :] * w[None, None, :, None]
        return (np.isnan(windowed).any(axis=(2, 3))[:, :, None, None],
                np.isinf(windowed).any(axis=(2, 3))[:, :, None, None])

    def _dft_lines(self, x: np.ndarray, length: Any = None, axis: Any = None,
                   *_: Any) -> tuple[np.ndarray, np.ndarray]:
        """Per transform (a line along the axis), whether its input holds a NaN, an infinity (the axis and the
        complex dim kept, of size 1)."""
        attrs = {a.name: a.i for a in self.onnx_node.attribute if a.name == "axis"}
        if axis is None or np.size(axis) == 0:
            axis = attrs.get("axis", 1 if type(self._kernel).__name__.endswith("_17") else -2)
        ax = int(axis) % x.ndim
        n = x.shape[ax] if length is None or np.size(length) == 0 else min(int(length), x.shape[ax])
        used = np.take(x, np.arange(n), axis=ax)
        keep = (ax, x.ndim - 1)
        return np.isnan(used).any(axis=keep, keepdims=True), np.isinf(used).any(axis=keep, keepdims=True)


class IdentityAtNonNegative(_OverReference):
    """The reference's LeakyRelu / PRelu / Elu with the spec's ``f(x) = x for x >= 0`` (module doc)."""

    def _run(self, x: np.ndarray, *rest: Any, **attrs: Any) -> tuple[Any, ...]:
        y = np.asarray(self._kernel.run(x, *rest)[0])
        if x.dtype.kind != "f":
            return (y,)
        with np.errstate(invalid="ignore"):
            keep = np.broadcast_to(x >= 0, y.shape)
        return (np.where(keep, np.broadcast_to(x, y.shape), y).astype(y.dtype),)


#: the corrected kernels, under the ops' names (``onnx.reference`` looks ``new_ops`` up by class name)
NONFINITE_OPS: list[type[OpRun]] = [
    type("MaxPool", (NaNWindows,), {"op_domain": ""}),
    type("AveragePool", (NaNWindows,), {"op_domain": ""}),
    type("LpPool", (NaNWindows,), {"op_domain": ""}),
    type("Resize", (ZeroWeightTaps,), {"op_domain": ""}),
    type("DFT", (NonFiniteFrames,), {"op_domain": ""}),
    type("STFT", (NonFiniteFrames,), {"op_domain": ""}),
    type("LeakyRelu", (IdentityAtNonNegative,), {"op_domain": ""}),
    type("PRelu", (IdentityAtNonNegative,), {"op_domain": ""}),
    type("Elu", (IdentityAtNonNegative,), {"op_domain": ""}),
]
