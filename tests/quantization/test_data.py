"""Sample data forms: folders of .npy/.npz/images, one .npz/.npy; the PNG/PNM readers; preprocessing."""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from glow_core.errors import InputError
from glow_core.ir.types import ElemKind, TensorType
from glow_core.quantization import ImageError, ImageOptions, open_samples, read_image, resize_bilinear

F32 = ElemKind.FLOAT32


def _paeth(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    p = a + b - c
    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
    return np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))


def write_png(path: Path, pixels: np.ndarray, color_type: int, filters: list[int]) -> None:
    """A PNG writer for the tests: 8-bit, each row filtered with the given filter type (0-4)."""
    h = pixels.shape[0]
    rows = pixels.reshape(h, -1).astype(np.int64)
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
    raw = bytearray()
    prev = np.zeros(rows.shape[1], np.int64)
    for r in range(h):
        cur = rows[r]
        left = np.concatenate([np.zeros(bpp, np.int64), cur[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int64), prev[:-bpp]])
        f = filters[r % len(filters)]
        pred = [np.zeros_like(cur), left, prev, (left + prev) // 2, _paeth(left, prev, upleft)][f]
        raw += bytes([f]) + bytes(((cur - pred) % 256).astype(np.uint8))
        prev = cur

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", pixels.shape[1], h, 8, color_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(raw)))
                     + chunk(b"IEND", b""))


@pytest.mark.parametrize(("color_type", "channels"), [(0, 1), (2, 3), (4, 2), (6, 4)])
def test_png_reader_undoes_every_filter(tmp_path: Path, color_type: int, channels: int) -> None:
    px = np.random.default_rng(color_type).integers(0, 256, (7, 5, channels)).astype(np.uint8)
    path = tmp_path / "t.png"
    write_png(path, px, color_type, [0, 1, 2, 3, 4])
    got = read_image(path)
    want = px[..., :3] if channels == 4 else (px[..., :1] if channels == 2 else px)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_png_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.png"
    write_png(path, np.zeros((2, 2, 3), np.uint8), 2, [0])
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # inside IHDR: the CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(ImageError, match="t.png: PNG chunk b'IHDR' fails its CRC check"):
        read_image(path)
    path.write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ImageError, match="no IEND"):
        read_image(path)
    (tmp_path / "x.png").write_bytes(b"GIF89a")
    with pytest.raises(ImageError, match="not a PNG"):
        read_image(tmp_path / "x.png")


def test_pnm_readers(tmp_path: Path) -> None:
    px = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 7
    (tmp_path / "a.ppm").write_bytes(b"P6\n# comment\n3 2\n255\n" + px.tobytes())
    np.testing.assert_array_equal(read_image(tmp_path / "a.ppm"), px.astype(np.float32))
    (tmp_path / "b.pgm").write_bytes(b"P2 2 1 15 0 15")
    np.testing.assert_array_equal(read_image(tmp_path / "b.pgm"), np.float32([[[0.0], [255.0]]]))
    (tmp_path / "c.ppm").write_bytes(b"P6 3 2 255\n" + px.tobytes()[:5])
    with pytest.raises(ImageError, match="c.ppm: pixel data has 5 bytes, expected 18"):
        read_image(tmp_path / "c.ppm")


def test_jpeg_without_pillow_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL fails
    (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(ImageError, match="a.jpg: reading .jpg images needs Pillow") as err:
        read_image(tmp_path / "a.jpg")
    assert "pip install pillow" in err.value.one_line()


def test_bilinear_resize() -> None:
    img = np.arange(16, dtype=np.float32).reshape(4, 4, 1)
    half = resize_bilinear(img, 2, 2)  # half-pixel centres: the mean of each 2x2 block for an exact halving
    np.testing.assert_allclose(half[..., 0], [[2.5, 4.5], [10.5, 12.5]])
    np.testing.assert_array_equal(resize_bilinear(img, 4, 4), img)
    up = resize_bilinear(np.float32([[[0.0], [4.0]]]), 1, 4)  # source x = (x + 0.5) / 2 - 0.5, clamped
    np.testing.assert_allclose(up[0, :, 0], [0.0, 1.0, 3.0, 4.0])


def test_image_folder_preprocessing(tmp_path: Path) -> None:
    px = np.zeros((4, 4, 3), np.uint8)
    px[..., 0], px[..., 1], px[..., 2] = 255, 51, 0
    write_png(tmp_path / "a.png", px, 2, [1])
    (tmp_path / "notes.txt").write_text("ignored")
    t = TensorType(F32, (1, 3, 2, 2))
    opts = ImageOptions(channel_order="BGR", mean=(0.5,), std=(0.5, 0.25, 0.5))
    (label, feeds), = list(open_samples(tmp_path, {"img": t}, opts))
    assert label.endswith("a.png")
    x = feeds["img"]
    assert x.shape == (1, 3, 2, 2) and x.dtype == np.float32
    # BGR: channel 0 is blue (0), 1 green (0.2), 2 red (1.0); then (v - 0.5) / std
    np.testing.assert_allclose(x[0, :, 0, 0], [(0 - 0.5) / 0.5, (0.2 - 0.5) / 0.25, (1.0 - 0.5) / 0.5], rtol=1e-6)
    nhwc = TensorType(F32, (1, 3, 3, 3))
    (_, f2), = list(open_samples(tmp_path, {"img": nhwc}, ImageOptions(layout="NHWC", scale=1.0)))
    np.testing.assert_allclose(f2["img"][0, 1, 1], [255.0, 51.0, 0.0], rtol=1e-6)


def test_npy_and_npz_folders(tmp_path: Path) -> None:
    types = {"a": TensorType(F32, (1, 2)), "b": TensorType(F32, (3,))}
    for i in range(3):
        np.savez(tmp_path / f"s{i}.npz", a=np.full((1, 2), i, np.float32), b=np.full(3, -i, np.float32))
    got = list(open_samples(tmp_path, types))
    assert [f["a"][0, 0] for _, f in got] == [0, 1, 2] and got[2][1]["b"].tolist() == [-2, -2, -2]
    one = tmp_path / "one"
    one.mkdir()
    np.save(one / "x.npy", np.ones((1, 2), np.float32))
    assert len(list(open_samples(one, {"a": types["a"]}))) == 1
    with pytest.raises(InputError, match="x.npy: a .npy file holds one array but the model has 2 inputs"):
        list(open_samples(one, types))


def test_stacked_npz_and_mapping(tmp_path: Path) -> None:
    types = {"a": TensorType(F32, (1, 2)), "b": TensorType(F32, (3,))}
    np.savez(tmp_path / "all.npz", a=np.arange(8, dtype=np.float32).reshape(4, 2), b=np.zeros((4, 3), np.float32))
    got = list(open_samples(tmp_path / "all.npz", types))
    assert len(got) == 4 and got[3][1]["a"].tolist() == [[6.0, 7.0]] and got[3][0].endswith("all.npz sample 3")
    src = open_samples({"a": np.zeros((2, 1, 2), np.float32), "b": np.zeros((2, 3), np.float32)}, types)
    assert src.count == 2 and len(list(src)) == 2
    with pytest.raises(InputError, match="different numbers of samples"):
        open_samples({"a": np.zeros((2, 1, 2), np.float32), "b": np.zeros((3, 3), np.float32)}, types)
    with pytest.raises(InputError, match=r"input 'b' has shape \[4, 2\]; with samples along axis 0 .* \[N, 3\]"):
        open_samples({"a": np.zeros((4, 1, 2), np.float32), "b": np.zeros((4, 2), np.float32)}, types)


def test_data_errors_name_the_file_and_the_input(tmp_path: Path) -> None:
    types = {"a": TensorType(F32, (1, 2)), "b": TensorType(F32, (3,))}
    with pytest.raises(InputError, match="no samples in folder"):
        open_samples(tmp_path, types)
    np.savez(tmp_path / "s0.npz", a=np.zeros((1, 2), np.float32))
    with pytest.raises(InputError, match=r"s0.npz: no array for input\(s\) 'b'"):
        list(open_samples(tmp_path, types))
    np.savez(tmp_path / "s0.npz", a=np.zeros((1, 2), np.float64), b=np.zeros(3, np.float32))
    with pytest.raises(InputError, match="s0.npz: input 'a' has dtype float64, the model expects float32"):
        list(open_samples(tmp_path, types))
    np.savez(tmp_path / "s0.npz", a=np.zeros((2, 2), np.float32), b=np.zeros(3, np.float32))
    with pytest.raises(InputError, match=r"s0.npz: input 'a' has shape \[2, 2\], the model expects \[1, 2\]"):
        list(open_samples(tmp_path, types))
    np.savez(tmp_path / "s0.npz", a=np.zeros((1, 2), np.float32), b=np.zeros(3, np.float32), c=np.zeros(1))
    with pytest.raises(InputError, match="s0.npz: array.*'c' name no model input"):
        list(open_samples(tmp_path, types))
    (tmp_path / "s0.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="s0.npz: cannot read as .npz"):
        list(open_samples(tmp_path, types))
    with pytest.raises(InputError, match="does not exist"):
        open_samples(tmp_path / "nope", types)


def test_image_options_validation() -> None:
    with pytest.raises(InputError, match="layout must be NCHW or NHWC"):
        ImageOptions(layout="CHW")
    with pytest.raises(InputError, match="std must not contain 0"):
        ImageOptions(std=(0.0,))


def _png_bytes(width: int, height: int, depth: int, color_type: int, rows: list[bytes], plte: bytes = b"") -> bytes:
    """A PNG from already packed rows (filter 0)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + (chunk(b"PLTE", plte) if plte else b"")
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_png_palette_16bit_and_low_bit_depths(tmp_path: Path) -> None:
    pal = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255])
    (tmp_path / "p.png").write_bytes(_png_bytes(3, 1, 8, 3, [bytes([2, 0, 1])], pal))
    np.testing.assert_array_equal(read_image(tmp_path / "p.png")[0], [[0, 0, 255], [255, 0, 0], [0, 255, 0]])
    (tmp_path / "p2.png").write_bytes(_png_bytes(3, 1, 8, 3, [bytes([3, 0, 1])], pal))
    with pytest.raises(ImageError, match="palette entry 3 of 3"):
        read_image(tmp_path / "p2.png")
    (tmp_path / "g16.png").write_bytes(_png_bytes(2, 1, 16, 0, [struct.pack(">HH", 0, 65535)]))
    np.testing.assert_allclose(read_image(tmp_path / "g16.png")[0, :, 0], [0.0, 255.0])
    (tmp_path / "g1.png").write_bytes(_png_bytes(10, 1, 1, 0, [bytes([0b10100000, 0b01000000])]))
    np.testing.assert_array_equal(read_image(tmp_path / "g1.png")[0, :, 0], [255, 0, 255] + [0] * 6 + [255])
    (tmp_path / "g4.png").write_bytes(_png_bytes(3, 1, 4, 0, [bytes([0xF0, 0x50])]))
    np.testing.assert_array_equal(read_image(tmp_path / "g4.png")[0, :, 0], [255, 0, 85])
    (tmp_path / "short.png").write_bytes(_png_bytes(4, 2, 8, 0, [bytes(4)]))  # one row of two
    with pytest.raises(ImageError, match="short.png: PNG image data has 5 bytes, expected 10"):
        read_image(tmp_path / "short.png")
