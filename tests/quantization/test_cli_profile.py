"""``glow profile``: round trip through the CLI, errors, and the commands of docs/quantization.md."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from glow_core.pipeline import prepare_function
from glow_core.importer import import_model
from glow_core.plugin_host import get_backend
from glow_core.quantization import ProfileMismatchError, load_profile
from tests.cliutil import glow, save
from tests.quantization.models import mlp_softmax_model, two_input_model
from tests.quantization.test_data import write_png

DOC = Path(__file__).resolve().parents[2] / "docs" / "quantization.md"


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_cli_round_trip(tmp_path: Path, backend: str) -> None:
    model = save(mlp_softmax_model(), tmp_path / "m.onnx")
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(3)]
    for i, x in enumerate(xs):
        np.save(data / f"{i}.npy", x)
    out = tmp_path / "p.json"
    r = glow(["profile", str(model), "--data", str(data), "-b", backend, "-o", str(out)])
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no progress bar when stderr is not a terminal
    assert re.search(rf"profiled \d+ values .* on {backend} over 3 samples", r.stdout)
    fn = prepare_function(import_model(mlp_softmax_model()), get_backend(backend), quantizable=True)
    prof = load_profile(out, fn, backend)
    assert prof.records["x"].min == float(np.min(xs)) and prof.records["x"].max == float(np.max(xs))
    other = "cpu" if backend == "interpreter" else "interpreter"  # a profile quantizes for any backend
    mixed = load_profile(out, prepare_function(import_model(mlp_softmax_model()), get_backend(other),
                                               quantizable=True), other)
    assert mixed.backend == other and mixed.records["x"].max == prof.records["x"].max
    with pytest.raises(ProfileMismatchError, match="inputs not in the profile: a, b"):
        load_profile(out, prepare_function(import_model(two_input_model()), get_backend(other), quantizable=True),
                     other)


def test_cli_progress_and_images(tmp_path: Path) -> None:
    from tests.quantization.models import conv_image_model

    model = save(conv_image_model(size=6), tmp_path / "c.onnx")
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    write_png(imgs / "a.png", np.random.default_rng(1).integers(0, 256, (9, 7, 3)).astype(np.uint8), 2, [4])
    write_png(imgs / "b.png", np.full((3, 3, 1), 255, np.uint8), 0, [0])
    r = glow(["profile", str(model), "--data", str(imgs), "-o", str(tmp_path / "p.json"), "--image-size", "6",
              "--mean", "0.5", "--progress"])
    assert r.returncode == 0, r.stderr
    assert "profiling" in r.stderr and "2/2" in r.stderr


def test_cli_errors(tmp_path: Path) -> None:
    model = save(two_input_model(), tmp_path / "t.onnx")
    data = tmp_path / "d"
    data.mkdir()
    r = glow(["profile", str(model), "--data", str(data), "-o", str(tmp_path / "p.json")])
    assert r.returncode == 1 and "no samples in folder" in r.error_line()
    np.savez(data / "s.npz", a=np.zeros((1, 4), np.float32))
    r = glow(["profile", str(model), "--data", str(data), "-o", str(tmp_path / "p.json")])
    assert r.returncode == 1 and re.search(r"s\.npz: no array for input\(s\) 'b'", r.error_line())
    r = glow(["profile", str(model), "--data", str(data), "-o", "x.json", "--image-size", "0"])
    assert r.returncode == 2 and "--image-size" in r.error_line()
    r = glow(["profile", str(model), "-o", "x.json"])
    assert r.returncode == 2 and "--data" in r.error_line()
    assert "profile" in glow(["--help"]).stdout


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.DOTALL)


def test_docs_commands_run(tmp_path: Path) -> None:
    """Every Python snippet of docs/quantization.md runs (in order), then every ``glow`` command."""
    text = DOC.read_text()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ns: dict = {}
        for block in _blocks(text, "python"):
            exec(compile(block, str(DOC), "exec"), ns)  # noqa: S102  (our own documentation)
    finally:
        os.chdir(cwd)
    commands = [ln for b in _blocks(text, "sh") for ln in b.splitlines() if ln.startswith("glow ")]
    assert len(commands) == 3
    for cmd in commands:
        r = glow(cmd.split()[1:], cwd=tmp_path, timeout=600)
        assert r.returncode == 0, (cmd, r.stderr)
        out = tmp_path / cmd.split("-o ")[1].split()[0]
        assert out.exists(), cmd
        assert re.search(r"over (2 samples|1 sample) ->", r.stdout), r.stdout
