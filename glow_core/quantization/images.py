"""Small image readers (PNG, PPM/PGM) and a bilinear resize, in numpy; JPEG through Pillow if installed.

:func:`read_image` returns a float32 array ``[H, W, C]`` (C = 1 or 3, alpha
dropped) of values in [0, 255] (16-bit images are scaled by 255/65535).
Images are untrusted input: sizes are bounded and every malformation is an
:class:`ImageError` naming the file.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from glow_core.errors import InputError

MAX_PIXELS = 1 << 26  # 64 Mpixel


class ImageError(InputError):
    """An image file cannot be decoded."""


_PNG_SIG = b"\x89PNG\r\n\x1a\n"
#: PNG colour type -> samples per pixel
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _png_chunks(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    pos, chunks = 8, []
    while pos + 12 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        crc = data[pos + 8 + n:pos + 12 + n]
        if len(body) != n or len(crc) != 4:
            raise ImageError(f"{where}: truncated PNG chunk {kind!r}")
        if zlib.crc32(kind + body) != int.from_bytes(crc, "big"):
            raise ImageError(f"{where}: PNG chunk {kind!r} fails its CRC check")
        chunks.append((kind, body))
        pos += 12 + n
        if kind == b"IEND":
            return chunks
    raise ImageError(f"{where}: PNG has no IEND chunk (truncated file)")


def _unfilter(raw: np.ndarray, rows: int, stride: int, bpp: int, where: str) -> np.ndarray:
    """Undo the per-row PNG filters (None, Sub, Up, Average, Paeth)."""
    out = np.zeros((rows, stride), np.uint8)
    prev = np.zeros(stride, np.int32)
    for r in range(rows):
        ftype = int(raw[r, 0])
        line = raw[r, 1:].astype(np.int32)
        if ftype == 0:
            cur = line
        elif ftype == 1 or ftype == 3 or ftype == 4:
            cur = line.copy()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                if ftype == 1:
                    pred = a
                elif ftype == 3:
                    pred = (a + prev[i]) >> 1
                else:
                    b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (cur[i] + pred) & 0xFF
        elif ftype == 2:
            cur = (line + prev) & 0xFF
        else:
            raise ImageError(f"{where}: PNG row {r} has unknown filter type {ftype}")
        out[r] = cur
        prev = cur
    return out


def read_png(path: Path) -> np.ndarray:
    data = path.read_bytes()
    where = str(path)
    if not data.startswith(_PNG_SIG):
        raise ImageError(f"{where}: not a PNG file")
    chunks = _png_chunks(data, where)
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise ImageError(f"{where}: PNG does not start with an IHDR chunk")
    h = chunks[0][1]
    width, height = int.from_bytes(h[0:4], "big"), int.from_bytes(h[4:8], "big")
    depth, ctype, interlace = h[8], h[9], h[12]
    if ctype not in _PNG_CHANNELS or depth not in (1, 2, 4, 8, 16) or (ctype not in (0, 3) and depth < 8):
        raise ImageError(f"{where}: PNG colour type {ctype} with bit depth {depth} is not valid")
    if interlace:
        raise ImageError(f"{where}: interlaced (Adam7) PNG is not supported", hint="save it non-interlaced")
    if not 0 < width * height <= MAX_PIXELS:
        raise ImageError(f"{where}: PNG size {width}x{height} is empty or larger than {MAX_PIXELS} pixels")
    chans = _PNG_CHANNELS[ctype]
    stride = (width * chans * depth + 7) // 8
    expected = height * (stride + 1)
    z = zlib.decompressobj()
    try:
        raw = z.decompress(b"".join(b for k, b in chunks if k == b"IDAT"), expected + 1)
    except zlib.error as e:
        raise ImageError(f"{where}: PNG image data does not decompress: {e}") from None
    if len(raw) != expected:
        raise ImageError(f"{where}: PNG image data has {len(raw)} bytes, expected {expected}")
    rows = _unfilter(np.frombuffer(raw, np.uint8).reshape(height, stride + 1), height, stride,
                     max(1, chans * depth // 8), where)
    if depth == 16:
        px = rows.reshape(height, -1).view(">u2").astype(np.float32) * (255.0 / 65535.0)
    elif depth < 8:
        bits = np.unpackbits(rows, axis=1).reshape(height, -1, depth)[:, :width]
        px = (bits * (1 << np.arange(depth - 1, -1, -1))).sum(axis=2).astype(np.float32)
        if ctype == 0:
            px *= 255.0 / ((1 << depth) - 1)
    else:
        px = rows.astype(np.float32)
    px = px.reshape(height, width, chans)
    if ctype == 3:
        plte = next((b for k, b in chunks if k == b"PLTE"), None)
        if plte is None or len(plte) % 3:
            raise ImageError(f"{where}: palette PNG without a valid PLTE chunk")
        pal = np.frombuffer(plte, np.uint8).reshape(-1, 3).astype(np.float32)
        idx = px[..., 0].astype(np.int64)
        if idx.max() >= len(pal):
            raise ImageError(f"{where}: PNG pixel refers to palette entry {idx.max()} of {len(pal)}")
        return pal[idx]
    return px[..., :3] if ctype == 6 else (px[..., :1] if ctype == 4 else px)


def _pnm_tokens(data: bytes, count: int, where: str) -> tuple[list[int], int]:
    """The first ``count`` header integers (after the magic) and the offset after them."""
    vals: list[int] = []
    pos = 2
    while len(vals) < count:
        while pos < len(data) and (data[pos:pos + 1].isspace() or data[pos:pos + 1] == b"#"):
            if data[pos:pos + 1] == b"#":
                pos = data.find(b"\n", pos)
                pos = len(data) if pos < 0 else pos
            pos += 1
        start = pos
        while pos < len(data) and data[pos:pos + 1].isdigit():
            pos += 1
        if start == pos:
            raise ImageError(f"{where}: malformed PPM/PGM header")
        vals.append(int(data[start:pos]))
    return vals, pos


def read_pnm(path: Path) -> np.ndarray:
    """Binary (P5/P6) and ASCII (P2/P3) PGM/PPM."""
    data = path.read_bytes()
    where = str(path)
    magic = data[:2]
    chans = {b"P2": 1, b"P5": 1, b"P3": 3, b"P6": 3}.get(magic)
    if chans is None:
        raise ImageError(f"{where}: not a PGM/PPM file (magic {magic!r}; P2, P3, P5 and P6 are read)")
    (width, height, maxval), pos = _pnm_tokens(data, 3, where)
    if not 0 < width * height <= MAX_PIXELS or not 0 < maxval < 65536:
        raise ImageError(f"{where}: bad size {width}x{height} or maxval {maxval}")
    n = width * height * chans
    if magic in (b"P5", b"P6"):
        body = data[pos + 1:]
        dt = np.dtype(">u2") if maxval > 255 else np.dtype(np.uint8)
        if len(body) < n * dt.itemsize:
            raise ImageError(f"{where}: pixel data has {len(body)} bytes, expected {n * dt.itemsize}")
        px = np.frombuffer(body[:n * dt.itemsize], dt).astype(np.float32)
    else:
        try:
            px = np.array(data[pos:].split()[:n], dtype=np.float32)
        except ValueError:
            raise ImageError(f"{where}: ASCII pixel data is not integers") from None
        if px.size != n:
            raise ImageError(f"{where}: ASCII pixel data has {px.size} values, expected {n}")
    return (px * (255.0 / maxval)).reshape(height, width, chans)


def read_with_pillow(path: Path) -> np.ndarray:
    try:
        from PIL import Image  # type: ignore[import-not-found]
    except ImportError:
        raise ImageError(f"{path}: reading {path.suffix} images needs Pillow, which is not installed",
                         hint="pip install pillow, or convert the images to PNG or PPM") from None
    try:
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB" if im.mode not in ("L", "I;16") else "L"), np.float32)
    except (OSError, ValueError) as e:
        raise ImageError(f"{path}: cannot decode: {e}") from None
    return arr[..., None] if arr.ndim == 2 else arr


#: file suffix -> reader
IMAGE_READERS = {".png": read_png, ".ppm": read_pnm, ".pgm": read_pnm, ".pnm": read_pnm,
                 ".jpg": read_with_pillow, ".jpeg": read_with_pillow}


def read_image(path: Path) -> np.ndarray:
    """Decode an image file to float32 [H, W, C] in [0, 255]."""
    reader = IMAGE_READERS.get(path.suffix.lower())
    if reader is None:
        raise ImageError(f"{path}: unknown image type", hint="use " + ", ".join(IMAGE_READERS))
    try:
        return reader(path)
    except OSError as e:
        raise ImageError(f"{path}: cannot read: {e.strerror or e}") from None


def resize_bilinear(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of [H, W, C] with half-pixel centres (source x = (x + 0.5) * in/out - 0.5, clamped).

    The same sampling as OpenCV's INTER_LINEAR and ONNX Resize(linear, half_pixel) without antialiasing.
    """
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img.astype(np.float32)

    def taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
        i0 = np.floor(src).astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, (src - i0)

    y0, y1, fy = taps(h, height)
    x0, x1, fx = taps(w, width)
    a = img.astype(np.float64)
    top = a[y0][:, x0] * (1 - fx)[None, :, None] + a[y0][:, x1] * fx[None, :, None]
    bot = a[y1][:, x0] * (1 - fx)[None, :, None] + a[y1][:, x1] * fx[None, :, None]
    return (top * (1 - fy)[:, None, None] + bot * fy[:, None, None]).astype(np.float32)
