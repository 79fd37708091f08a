"""Sample data for profiling: folders of .npy/.npz/images, one .npz/.npy, arrays or feed dicts.

Forms (see docs/quantization.md):

- a folder: one sample per file, in sorted file-name order: ``.npy`` (models
  with one input), ``.npz`` (an array per input name), images (``.png``,
  ``.ppm``, ``.pgm``, ``.pnm``; ``.jpg``/``.jpeg`` with Pillow) preprocessed by
  :class:`ImageOptions`; other files are ignored;
- one ``.npz`` file with an array per input name, samples along axis 0 (or one
  ``.npy`` for a one-input model): ``arr[i]`` is sample ``i`` when the array has
  one more axis than the input; when the input's first dimension is 1 and the
  array has the input's rank, ``arr[i:i+1]`` is;
- in Python also a mapping input name -> array (as the .npz) or an iterable of feed dicts.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from glow_core.errors import InputError
from glow_core.ir.types import ElemKind, TensorType
from glow_core.quantization.images import IMAGE_READERS, read_image, resize_bilinear

ARRAY_SUFFIXES = (".npy", ".npz")


@dataclass(frozen=True)
class ImageOptions:
    """Image preprocessing: ``x = (pixel * scale - mean[c]) / std[c]`` after resizing and channel reordering.

    - ``size``: (height, width) to resize to (bilinear, half-pixel centres);
      None takes the model input's spatial size;
    - ``layout``: ``NCHW`` or ``NHWC`` (a batch axis of 1 is added when the input has rank 4);
    - ``channel_order``: ``RGB`` (as decoded) or ``BGR`` (reversed);
    - ``scale``: multiplies the 0..255 pixel values first (default 1/255: 0..1);
    - ``mean``, ``std``: one value or one per channel (after reordering).
    """

    size: tuple[int, int] | None = None
    layout: str = "NCHW"
    channel_order: str = "RGB"
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        if self.layout not in ("NCHW", "NHWC"):
            raise InputError(f"image layout must be NCHW or NHWC, got {self.layout!r}")
        if self.channel_order not in ("RGB", "BGR"):
            raise InputError(f"image channel order must be RGB or BGR, got {self.channel_order!r}")
        if self.size is not None and (len(self.size) != 2 or any(int(d) < 1 or int(d) > 16384 for d in self.size)):
            raise InputError(f"image size must be two positive dimensions (height, width), got {self.size!r}")
        if any(s == 0 for s in self.std):
            raise InputError("image std must not contain 0")
        if not self.mean or not self.std:
            raise InputError("image mean and std need at least one value")


@dataclass(frozen=True)
class SampleType:
    """What the samples of a model input with open symbols must be: its element kind, and its shape with -1 where
    a symbol leaves the size open (None: an unknown rank). Samples of one input may then differ in shape."""

    elem: ElemKind
    shape: tuple[int, ...] | None
    declared: str

    @property
    def dtype(self) -> np.dtype:
        return self.elem.dtype

    def __str__(self) -> str:
        return self.declared


def fits(want: tuple[int, ...] | None, shape: tuple[int, ...]) -> bool:
    """Does ``shape`` conform to ``want`` (-1: any size; None: any shape)?"""
    return want is None or (len(want) == len(shape) and all(w in (-1, n) for w, n in zip(want, shape)))


class SampleSource:
    """An iterable of (label, feeds) with a known ``count`` (None when unknown)."""

    def __init__(self, items: Any, count: int | None) -> None:
        self._items = items
        self.count = count

    def __iter__(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        return iter(self._items())


def _check(label: str, name: str, arr: Any, want: InputType) -> np.ndarray:
    a = np.asarray(arr)
    if a.dtype != want.dtype:
        raise InputError(f"{label}: input '{name}' has dtype {a.dtype}, the model expects {want.dtype} ({want})",
                         hint=f"save it with .astype(numpy.{want.dtype})")
    if not fits(want.shape, tuple(a.shape)):
        expected = list(want.shape) if isinstance(want, TensorType) else str(want)
        raise InputError(f"{label}: input '{name}' has shape {list(a.shape)}, the model expects {expected}",
                         hint="pass input shapes when profiling, or save samples of that shape")
    return a


#: an input's type as samples see it (a static one, or one with open symbols)
InputType = TensorType | SampleType


def _feeds_from(label: str, arrays: Mapping[str, Any], types: Mapping[str, InputType]) -> dict[str, np.ndarray]:
    missing = [n for n in types if n not in arrays]
    if missing:
        raise InputError(f"{label}: no array for input(s) " + ", ".join(f"'{n}'" for n in missing),
                         hint="the model takes " + ", ".join(f"{n}: {t}" for n, t in types.items()))
    unknown = [n for n in arrays if n not in types]
    if unknown:
        raise InputError(f"{label}: array(s) " + ", ".join(f"'{n}'" for n in unknown) + " name no model input",
                         hint="the model takes " + ", ".join(types))
    return {n: _check(label, n, arrays[n], t) for n, t in types.items()}


def _only_input(label: str, types: Mapping[str, InputType], what: str) -> str:
    if len(types) != 1:
        raise InputError(f"{label}: {what} holds one array but the model has {len(types)} inputs "
                         f"({', '.join(types)})", hint="use .npz files with an array per input name")
    return next(iter(types))


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise InputError(f"{path}: cannot read as .npz: {e}") from None


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"{path}: cannot read as .npy: {e}") from None


def image_feed(path: Path, t: InputType, opts: ImageOptions) -> np.ndarray:
    """Decode, resize and normalize one image for an input of type ``t``."""
    if not t.elem.is_float:
        raise InputError(f"{path}: image samples need a float input, the model's is {t}")
    if t.shape is None:
        raise InputError(f"{path}: image samples need an input of known rank, the model's is {t}")
    rank = len(t.shape)
    if rank not in (3, 4):
        raise InputError(f"{path}: image samples need an input of rank 3 or 4, the model's is {t}")
    chw = opts.layout == "NCHW"
    spatial = t.shape[-2:] if chw else t.shape[-3:-1]
    channels = t.shape[-3] if chw else t.shape[-1]
    if channels < 0 or (opts.size is None and min(spatial) < 0):
        raise InputError(f"{path}: the model's input {t} leaves the image's channels or size open",
                         hint="give the size with --image-size H,W (ImageOptions(size=...)), or fix it with --dim")
    img = read_image(path)
    if img.shape[2] == 1 and channels == 3:
        img = np.repeat(img, 3, axis=2)
    elif img.shape[2] == 3 and channels == 1:
        img = img @ np.array([[0.299], [0.587], [0.114]], np.float32)  # ITU-R BT.601 luma
    if img.shape[2] != channels:
        raise InputError(f"{path}: image has {img.shape[2]} channels, input {t} in {opts.layout} wants {channels}",
                         hint="check --layout")
    h, w = opts.size or spatial
    img = resize_bilinear(img, int(h), int(w))
    if opts.channel_order == "BGR":
        img = img[..., ::-1]
    for what, v in (("mean", opts.mean), ("std", opts.std)):
        if len(v) not in (1, channels):
            raise InputError(f"image {what} has {len(v)} values; give 1 or {channels}")
    x = (img * np.float32(opts.scale) - np.asarray(opts.mean, np.float32)) / np.asarray(opts.std, np.float32)
    if chw:
        x = x.transpose(2, 0, 1)
    if rank == 4:
        x = x[None]
    return np.ascontiguousarray(x, dtype=t.dtype)


def _folder(root: Path, types: Mapping[str, InputType], image: ImageOptions | None) -> SampleSource:
    known = ARRAY_SUFFIXES + tuple(IMAGE_READERS)
    files = sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")
                   and p.suffix.lower() in known)
    if not files:
        raise InputError(f"no samples in folder {root}",
                         hint="it should hold one .npy/.npz or image file (" + ", ".join(known) + ") per sample")
    opts = image or ImageOptions()

    def items() -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        for p in files:
            suffix = p.suffix.lower()
            if suffix == ".npz":
                yield str(p), _feeds_from(str(p), _load_npz(p), types)
            elif suffix == ".npy":
                name = _only_input(str(p), types, "a .npy file")
                yield str(p), _feeds_from(str(p), {name: _load_npy(p)}, types)
            else:
                name = _only_input(str(p), types, "an image")
                yield str(p), {name: image_feed(p, types[name], opts)}

    return SampleSource(items, len(files))


def _stacked(label: str, arrays: Mapping[str, Any], types: Mapping[str, InputType]) -> SampleSource:
    """Samples along axis 0 of one array per input."""
    missing = [n for n in types if n not in arrays]
    if missing:
        raise InputError(f"{label}: no array for input(s) " + ", ".join(f"'{n}'" for n in missing),
                         hint="the model takes " + ", ".join(f"{n}: {t}" for n, t in types.items()))
    unknown = [n for n in arrays if n not in types]
    if unknown:
        raise InputError(f"{label}: array(s) " + ", ".join(f"'{n}'" for n in unknown) + " name no model input")
    keep_axis: dict[str, bool] = {}
    counts = set()
    for n, t in types.items():
        a = np.asarray(arrays[n])
        want = t.shape
        if want is None or (a.ndim == len(want) + 1 and fits(want, tuple(a.shape[1:]))):
            keep_axis[n] = False
        elif a.ndim == len(want) and want[:1] == (1,) and fits(want[1:], tuple(a.shape[1:])):
            keep_axis[n] = True
        else:
            shown = [str(d) if d >= 0 else "?" for d in want]
            raise InputError(f"{label}: input '{n}' has shape {list(a.shape)}; with samples along axis 0 it should "
                             f"be [N, {', '.join(shown)}]" + (
                                 f" or [N, {', '.join(shown[1:])}]" if want[:1] == (1,) else ""))
        counts.add(a.shape[0])
    if len(counts) > 1:
        raise InputError(f"{label}: the inputs hold different numbers of samples ({sorted(counts)})")
    count = counts.pop() if counts else 0
    if count == 0:
        raise InputError(f"{label}: holds no samples (axis 0 has length 0)")

    def items() -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        for i in range(count):
            where = f"{label} sample {i}"
            yield where, _feeds_from(where, {n: np.asarray(arrays[n])[i:i + 1] if keep_axis[n]
                                             else np.asarray(arrays[n])[i] for n in types}, types)

    return SampleSource(items, count)


def open_samples(data: Any, types: Mapping[str, InputType], image: ImageOptions | None = None) -> SampleSource:
    """A :class:`SampleSource` for any of the forms in the module docstring."""
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if path.is_dir():
            return _folder(path, types, image)
        if not path.exists():
            raise InputError(f"sample data {path} does not exist")
        if path.suffix.lower() == ".npz":
            return _stacked(str(path), _load_npz(path), types)
        if path.suffix.lower() == ".npy":
            return _stacked(str(path), {_only_input(str(path), types, "a .npy file"): _load_npy(path)}, types)
        raise InputError(f"sample data {path} is neither a folder nor a .npz/.npy file")
    if isinstance(data, Mapping):
        return _stacked("data", data, types)
    try:
        samples = list(data)
    except TypeError:
        raise InputError(f"data must be a path, a mapping of arrays or an iterable of feed dicts, "
                         f"got {type(data).__name__}") from None
    if not samples:
        raise InputError("no samples to profile (the data given is empty)")
    for i, s in enumerate(samples):
        if not isinstance(s, Mapping):
            raise InputError(f"sample {i} is a {type(s).__name__}, not a dict of input name -> array")
    return SampleSource(lambda: ((f"sample {i}", _feeds_from(f"sample {i}", s, types)) for i, s in enumerate(samples)),
                        len(samples))
