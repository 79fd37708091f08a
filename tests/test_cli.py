"""The ``glow`` command line, run as a user would: in a subprocess, checking exit codes and stderr.

Every bad input must end in one line on stderr (``glow: error: ...``) and a
non-zero exit code, never a traceback, unless ``--traceback`` or
``GLOW_TRACEBACK=1`` asks for it.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cliutil import Result, add_relu_model, glow, int_add_model, save, unsupported_op_model


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    save(add_relu_model(), d / "addrelu.onnx")
    save(add_relu_model(batch="N"), d / "addrelu_sym.onnx")
    save(int_add_model(), d / "intadd.onnx")
    save(unsupported_op_model(), d / "unsupported.onnx")
    data = (d / "addrelu.onnx").read_bytes()
    (d / "truncated.onnx").write_bytes(data[: len(data) // 2])
    (d / "garbage.onnx").write_bytes(b"this is not a model\n" * 10)
    np.save(d / "x.npy", (np.arange(10, dtype=np.float32) - 5).reshape(1, 10))
    np.save(d / "y.npy", np.ones((1, 10), np.float32))
    np.save(d / "y3.npy", np.ones((3, 10), np.float32))
    np.save(d / "y64.npy", np.ones((1, 10), np.float64))
    np.save(d / "y_wrong_shape.npy", np.ones((1, 9), np.float32))
    (d / "not_npy.npy").write_bytes(b"\x00garbage")
    return d


def assert_clean_failure(r: Result, code: int = 1, *expected: str) -> str:
    """One ``glow...: error:`` line, exit ``code``, no traceback; returns the line."""
    assert r.returncode == code, f"exit {r.returncode}, expected {code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    line = r.error_line()
    assert ": error: " in line, line
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"
    return line


# -- help and the command table --------------------------------------------------
def test_help_lists_commands_and_exit_codes() -> None:
    r = glow(["--help"])
    assert r.returncode == 0
    for cmd in ("backends", "run", "dump"):
        assert cmd in r.stdout
    assert "exit codes" in r.stdout


def test_version() -> None:
    import glow_core

    r = glow(["--version"])
    assert r.returncode == 0 and glow_core.__version__ in r.stdout


def test_console_script_is_installed() -> None:
    scripts = Path(sys.executable).parent
    exe = scripts / ("glow.exe" if os.name == "nt" else "glow")
    if not exe.exists():
        pytest.skip(f"the 'glow' console script is not beside {sys.executable} (package not pip-installed here)")
    import subprocess

    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and "backends" in out.stdout


@pytest.mark.parametrize("args, text", [
    ([], "COMMAND"),
    (["frobnicate"], "invalid choice"),
    (["run"], "required"),
    (["run", "m.onnx", "--backend", "interpreter", "--input", "x"], "NAME=FILE.npy"),
    (["run", "m.onnx", "--backend", "interpreter", "--input-shape", "x=1,a"], "integers"),
    (["run", "m.onnx", "--backend", "interpreter", "--threads", "0"], "at least 1"),
    (["dump"], "required"),
])
def test_usage_errors_exit_2_in_one_line(args: list[str], text: str) -> None:
    assert_clean_failure(glow(args), 2, text)


# -- glow backends ------------------------------------------------------------------
def test_backends_lists_interpreter_from_its_entry_point() -> None:
    r = glow(["backends"])
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "KINDS", "DISTRIBUTION"]
    row = next(ln for ln in rows if ln.startswith("interpreter "))
    name, status, kinds, dist, version = row.split()[:5]
    assert (name, status, dist) == ("interpreter", "ok", "glow-backend-interpreter")
    assert int(kinds) >= 2 and version[0].isdigit()


def test_backends_verbose_lists_kinds() -> None:
    r = glow(["backends", "--verbose"])
    assert r.returncode == 0, r.stderr
    assert "kinds:" in r.stdout and "Relu" in r.stdout and "SDK API version" in r.stdout


def test_backends_with_autoload_disabled() -> None:
    r = glow(["backends"], env={"GLOW_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert r.returncode == 0
    assert "no glow backends installed" in r.stdout and "GLOW_DISABLE_PLUGIN_AUTOLOAD" in r.stdout


# -- glow run -----------------------------------------------------------------------
def test_run_random_inputs_prints_summary_and_times(work: Path) -> None:
    r = glow(["run", "addrelu.onnx", "--backend", "interpreter", "--seed", "3"], cwd=work)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "input x: float32[1,10]  random (seed 3)" in out
    assert "output out: float32[1,10]" in out and "min " in out and "max " in out and "mean " in out
    assert "top-5:" in out
    assert "compile " in out and "ms" in out and "\nrun " in out
    assert all(ln.startswith("glow: warning:") for ln in r.stderr_lines)  # nothing but skipped-plugin notes


def test_run_is_reproducible_with_a_seed(work: Path) -> None:
    a = glow(["run", "addrelu.onnx", "-b", "interpreter", "--seed", "7", "-o", "a.npz"], cwd=work)
    b = glow(["run", "addrelu.onnx", "-b", "interpreter", "--seed", "7", "-o", "b.npz"], cwd=work)
    assert a.returncode == 0 and b.returncode == 0
    with np.load(work / "a.npz") as fa, np.load(work / "b.npz") as fb:
        np.testing.assert_array_equal(fa["out"], fb["out"])


def test_run_with_input_files_and_output(work: Path) -> None:
    r = glow(["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=x.npy", "--input", "y=y.npy",
              "--output", "out.npz", "--threads", "2"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert "input x: float32[1,10]  x.npy" in r.stdout
    with np.load(work / "out.npz") as f:
        expected = np.maximum((np.arange(10, dtype=np.float32) - 5).reshape(1, 10) + 1, 0)
        np.testing.assert_array_equal(f["out"], expected)
    assert "top-5: 9 (5)  8 (4)  7 (3)  6 (2)  5 (1)" in r.stdout


def test_run_symbolic_dims_from_input_shape_or_files(work: Path) -> None:
    r = glow(["run", "addrelu_sym.onnx", "-b", "interpreter", "--input-shape", "y=4,10"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert "output out: float32[4,10]" in r.stdout and "top-5" not in r.stdout
    r = glow(["run", "addrelu_sym.onnx", "-b", "interpreter", "--input", "x=x.npy", "--input", "y=y3.npy"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert "output out: float32[3,10]" in r.stdout


def test_run_integer_inputs_are_small_ints(work: Path) -> None:
    r = glow(["run", "intadd.onnx", "-b", "interpreter", "-o", "int.npz"], cwd=work)
    assert r.returncode == 0, r.stderr
    with np.load(work / "int.npz") as f:
        out = f["out"]
    assert out.dtype == np.int64 and out.min() >= 0 and out.max() <= 18
    assert "top-5" not in r.stdout


def test_run_symbolic_dims_without_shape_names_the_input(work: Path) -> None:
    r = glow(["run", "addrelu_sym.onnx", "-b", "interpreter"], cwd=work)
    assert_clean_failure(r, 1, "symbolic", " y ", "--input-shape")


@pytest.mark.parametrize("args, expected", [
    (["run", "truncated.onnx", "-b", "interpreter"], ["truncated.onnx", "truncated"]),
    (["run", "garbage.onnx", "-b", "interpreter"], ["garbage.onnx"]),
    (["run", "missing.onnx", "-b", "interpreter"], ["missing.onnx", "does not exist"]),
    (["run", ".", "-b", "interpreter"], ["directory"]),
    (["run", "addrelu.onnx", "-b", "nosuch"], ["unknown backend 'nosuch'", "choose one of:", "interpreter"]),
    (["run", "zoo:nosuch", "-b", "interpreter"], ["unknown zoo model 'nosuch'", "choose one of:", "resnet50"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=nofile.npy", "--input", "y=y.npy"],
     ["nofile.npy", "does not exist"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=not_npy.npy", "--input", "y=y.npy"],
     ["not_npy.npy", "not a numpy .npy or .npz file"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=x.npy"], ["no --input for 'y'"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=x.npy", "--input", "y=y64.npy"],
     ["'y'", "y64.npy", "dtype float64", "float32[1,10]"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=x.npy", "--input", "y=y_wrong_shape.npy"],
     ["'y'", "shape [1,9]", "float32[1,10]"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input", "x=x.npy", "--input", "z=y.npy"],
     ["'z'", "not an input", "x, y"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input-shape", "q=1,10"], ["'q'", "not an input"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "--input-shape", "y=1,10,3"], ["'y'", "rank"]),
    (["run", "unsupported.onnx", "-b", "interpreter"], ["Frobnicate", "frob1", "unsupported"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "-o", "out.txt"], [".npz"]),
    (["run", "addrelu.onnx", "-b", "interpreter", "-o", "nodir/out.npz"], ["cannot write", "nodir"]),
    (["dump", "truncated.onnx"], ["truncated"]),
    (["dump", "unsupported.onnx"], ["Frobnicate"]),
    (["dump", "addrelu.onnx", "--backend", "nosuch"], ["choose one of:"]),
])
def test_bad_input_is_one_line_and_exit_1(work: Path, args: list[str], expected: list[str]) -> None:
    assert_clean_failure(glow(args, cwd=work), 1, *expected)


def test_unsupported_ops_are_listed_all_at_once(work: Path) -> None:
    line = assert_clean_failure(glow(["run", "unsupported.onnx", "-b", "interpreter"], cwd=work), 1)
    assert "2 nodes" in line and "frob2" in line


def test_traceback_flag_and_env_show_the_traceback(work: Path) -> None:
    args = ["run", "missing.onnx", "-b", "interpreter"]
    for r in (glow([*args, "--traceback"], cwd=work), glow(["--traceback", *args], cwd=work),
              glow(args, cwd=work, env={"GLOW_TRACEBACK": "1"})):
        assert r.returncode == 1
        assert "Traceback" in r.stderr and "ModelError" in r.stderr
        assert r.stderr.rstrip().splitlines()[-1].startswith("glow: error: ")


# -- glow dump -----------------------------------------------------------------------
def test_dump_prints_the_graph_ir(work: Path) -> None:
    r = glow(["dump", "addrelu.onnx"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("function ")
    assert "Add(%x, %y)" in r.stdout and "Relu(" in r.stdout and "return out" in r.stdout


def test_dump_with_backend_and_input_shape(work: Path) -> None:
    r = glow(["dump", "addrelu_sym.onnx", "--input-shape", "y=2,10", "--backend", "interpreter"], cwd=work)
    assert r.returncode == 0, r.stderr
    assert "float32[2,10]" in r.stdout


def test_dump_dot(work: Path) -> None:
    r = glow(["dump", "addrelu.onnx", "--dot", "g.dot"], cwd=work)
    assert r.returncode == 0, r.stderr
    text = (work / "g.dot").read_text()
    assert text.startswith("digraph") and "Relu" in text
    assert "wrote g.dot" in r.stderr


def test_dump_svg_without_graphviz_is_a_clear_error(work: Path, tmp_path: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    r = glow(["dump", "addrelu.onnx", "--dot", "g.svg"], cwd=work, env={"PATH": str(empty_bin)})
    assert_clean_failure(r, 1, "graphviz", ".dot")
    assert not (work / "g.svg").exists()


@pytest.mark.skipif(os.name == "nt", reason="fake 'dot' is a shell script")
def test_dump_svg_uses_graphviz_dot(work: Path, tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "dot"
    # a stand-in for graphviz: records its arguments and input, writes an <svg> to the -o file
    fake.write_text('#!/bin/sh\nout=""\nwhile [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
                    'cat > "$out.in"\necho "<svg/>" > "$out"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = glow(["dump", "addrelu.onnx", "--dot", "g.svg"], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    assert (work / "g.svg").read_text().strip() == "<svg/>"
    assert (work / "g.svg.in").read_text().startswith("digraph")


# -- in-process: the command table and unexpected errors --------------------------------
def test_unexpected_exception_is_one_line_exit_3(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from glow_cli import main as cli_main
    from glow_cli.common import Command

    def boom(args: argparse.Namespace) -> int:
        raise KeyError("kaboom")

    monkeypatch.setattr(cli_main, "COMMANDS", list(cli_main.COMMANDS))
    monkeypatch.delenv("GLOW_TRACEBACK", raising=False)
    cli_main.register_command(Command("boom", "always fails", lambda p: None, boom))
    assert cli_main.main(["boom"]) == 3
    err = capsys.readouterr().err
    assert err.strip() == "glow: internal error: KeyError: 'kaboom' (rerun with --traceback for details)"
    assert cli_main.main(["boom", "--traceback"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("glow: internal error: KeyError")


# -- a real model from the zoo (needs Conv, MaxPool, Concat, ... in the interpreter) -------
@pytest.mark.slow
def test_run_zoo_squeezenet(tmp_path: Path) -> None:
    r = glow(["run", "zoo:squeezenet", "--backend", "interpreter", "-o", "sq.npz"], cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "light_squeezenet.onnx" in r.stdout
    assert "input data_0: float32[1,3,224,224]" in r.stdout
    assert "output softmaxout_1: float32[1,1000,1,1]" in r.stdout and "top-5:" in r.stdout
    with np.load(tmp_path / "sq.npz") as f:
        (out,) = [f[k] for k in f.files]
    assert np.isfinite(out).all()


def test_run_zoo_model_with_random_weights_gives_informative_outputs() -> None:
    r = glow(["run", "zoo:squeezenet", "--backend", "interpreter", "--random-weights"])
    assert r.returncode == 0, r.stderr
    top = r.stdout.split("top-5:")[1].splitlines()[0]
    scores = [float(tok.strip("()")) for tok in top.split() if tok.startswith("(")]
    assert len(scores) == 5 and len(set(scores)) > 1, top


def test_random_weights_only_for_zoo_models(work: Path) -> None:
    r = glow(["run", str(work / "addrelu.onnx"), "--backend", "interpreter", "--random-weights"])
    assert r.returncode == 1 and "zoo:NAME models only" in r.error_line()


# -- command plugins (entry-point group glow.commands) ------------------------------
def _dist(site: Path, name: str, version: str, entry_points: str, modules: dict[str, str] | None = None) -> None:
    """A distribution as importlib.metadata finds it on PYTHONPATH: NAME-VERSION.dist-info, plus its modules."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    for mod, text in (modules or {}).items():
        (site / f"{mod}.py").write_text(text)


HELLO = '''
from glow_cli.common import Command

def add_arguments(p):
    p.add_argument("--who", default="world")

def run(args):
    print(f"hello, {args.who}")
    return 0

COMMAND = Command(name="hello", help="say hello (a test command plugin)", add_arguments=add_arguments, run=run)
'''


def test_command_plugins_come_from_entry_points_and_a_broken_one_is_skipped(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist(site, "glow-hello", "0.1", "[glow.commands]\nhello = glow_hello:COMMAND\n", {"glow_hello": HELLO})
    _dist(site, "glow-broken-cmd", "0.2", "[glow.commands]\nbroken = glow_broken_cmd:COMMAND\n",
          {"glow_broken_cmd": "raise RuntimeError('the frobnicator is not installed')\n"})
    _dist(site, "glow-clash", "0.3", "[glow.commands]\nrun = glow_hello:COMMAND\n")
    r = glow(["--help"], pythonpath=[site])
    assert r.returncode == 0, r.stderr
    assert "hello" in r.stdout and "say hello" in r.stdout and "broken" not in r.stdout
    warnings = sorted(r.stderr_lines)
    assert len(warnings) == 2, r.stderr
    assert warnings[0] == ("glow: warning: command plugin 'broken' (glow-broken-cmd 0.2) skipped: failed to import "
                           "glow_broken_cmd:COMMAND: RuntimeError: the frobnicator is not installed")
    assert warnings[1] == ("glow: warning: command plugin 'run' (glow-clash 0.3) skipped: the command 'run' "
                           "already exists")
    hello = glow(["hello", "--who", "glow"], pythonpath=[site])
    assert hello.returncode == 0 and hello.stdout == "hello, glow\n"
    backends = glow(["backends"], pythonpath=[site])  # every other command keeps working
    assert backends.returncode == 0 and "interpreter" in backends.stdout


def test_conformance_command_missing_or_broken_says_what_to_install(tmp_path: Path) -> None:
    """A glow-conformance distribution earlier on the path hides the installed one (importlib.metadata takes the
    first of a name): without its entry point, as if not installed; with a broken one, as broken."""
    missing = tmp_path / "missing"
    _dist(missing, "glow-conformance", "0.0.0", "")
    r = glow(["conformance", "--backend", "interpreter", "-k", "x"], pythonpath=[missing])
    assert_clean_failure(r, 1, "glow: error: 'glow conformance' needs the conformance suite (glow-conformance), "
                               "which is not installed (pip install glow-conformance")
    assert "(not available: needs glow-conformance)" in glow(["--help"], pythonpath=[missing]).stdout
    broken = tmp_path / "broken"
    _dist(broken, "glow-conformance", "0.0.1", "[glow.commands]\nconformance = glow_conformance_gone.cli:COMMAND\n")
    r = glow(["conformance", "--help"], pythonpath=[broken])
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert any(ln.startswith("glow: warning: command plugin 'conformance' (glow-conformance 0.0.1) skipped")
               for ln in r.stderr_lines)
    line = r.error_line()
    assert "is installed (glow-conformance 0.0.1) but failed to load: failed to import " in line
    assert "ModuleNotFoundError" in line and "pip install glow-conformance" in line


def test_core_cli_does_not_import_the_conformance_suite() -> None:
    import glow_cli

    root = Path(glow_cli.__file__).resolve().parent
    assert not (root / "cmd_conformance.py").exists()
    offenders = [p.name for p in root.glob("*.py") if "import glow_conformance" in p.read_text()
                 or "from glow_conformance" in p.read_text()]
    assert offenders == []


# -- glow cache ------------------------------------------------------------------------
def _cache_rows(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("BACKEND"))
    return {ln.split()[0]: ln.split() for ln in lines[head + 1:] if ln and not ln.startswith((" ", "other"))}


def test_cache_info_and_clear(work: Path, tmp_path: Path) -> None:
    pytest.importorskip("glow_backend_cpu")
    env = {"GLOW_CACHE_DIR": str(tmp_path / "c"), "GLOW_CACHE_MAX_BYTES": "256M"}
    empty = glow(["cache", "info"], env=env)
    assert empty.returncode == 0, empty.stderr
    assert f"cache root: {tmp_path / 'c'}" in empty.stdout
    row = _cache_rows(empty.stdout)["cpu"]
    assert row[1:3] == ["0", "0"] and row[5:7] == ["256.0", "MiB"]
    assert glow(["run", str(work / "addrelu.onnx"), "-b", "cpu"], env=env).returncode == 0
    assert glow(["run", str(work / "intadd.onnx"), "-b", "cpu"], env=env).returncode == 0
    (tmp_path / "c" / "retired-backend").mkdir()
    (tmp_path / "c" / "retired-backend" / "blob").write_bytes(b"x" * 10)
    folder = tmp_path / "c" / "cpu"
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())  # (support/: the run-time support)
    info = glow(["cache", "info"], env=env)
    rows = _cache_rows(info.stdout)
    assert rows["cpu"][1:3] == ["2", str(size)] and rows["cpu"][-1] == str(folder)
    assert rows["interpreter"][1:3] == ["0", "0"] and rows["interpreter"][-2] == "-"
    assert f"{tmp_path / 'c' / 'retired-backend'}  1 files, 10 bytes" in info.stdout
    one = glow(["cache", "info", "--backend", "cpu"], env=env)
    assert list(_cache_rows(one.stdout)) == ["cpu"]
    cleared = glow(["cache", "clear", "--backend", "cpu"], env=env)
    assert cleared.returncode == 0 and cleared.stdout == f"cpu: removed 2 entries, {size} bytes ({size / 1024:.1f} KiB)\n"
    assert list(folder.iterdir()) == []
    everything = glow(["cache", "clear"], env=env)
    assert everything.returncode == 0 and "all: removed 0 entries, 0 bytes" in everything.stdout
    assert (tmp_path / "c" / "retired-backend" / "blob").exists()  # not a backend's folder: left alone
    assert_clean_failure(glow(["cache", "clear", "--backend", "nosuch"], env=env), 1, "unknown backend 'nosuch'")
    assert_clean_failure(glow(["cache", "wipe"], env=env), 2, "invalid choice: 'wipe'")
