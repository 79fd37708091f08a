"""The ONNX node-test ratchet: every case of the node-test folder, per backend.

A case fails this test when it is not listed in ``tests/expectations/<backend>.txt``
and does not pass, when it is listed and passes (remove it: the count ratchets
up), or when it is listed and ends in anything but a clear "unsupported" error.
Wrong answers and errors can never be listed. Regenerate a file with
``python -m glow_tools.nodetests --backend NAME --write-expectations tests/expectations/NAME.txt``.

Backends: ``--node-test-backends`` / ``GLOW_NODE_TEST_BACKENDS`` (default
``interpreter,interpreter-primitives,cpu``; the default tier runs each case on one of them in turn, the
``full`` tier on all); a backend runs only when it is installed and has an
expectations file. The folder is ``$GLOW_ONNX_NODE_TESTS`` or
``../shared/onnx-node-tests``; when it is absent the whole set is one skip.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from glow_tools import nodetests
from glow_tools.nodetests import (
    ENV_ROOT,
    REASON_CHARS,
    CaseResult,
    ExpectationsError,
    Summary,
    compare,
    default_root,
    format_expectations,
    list_cases,
    load_expectations,
    parse_expectations,
    ratchet_failure,
    regenerate_command,
    run_case,
)

pytestmark = pytest.mark.nodetests

EXPECTATIONS_DIR = Path(__file__).resolve().parent / "expectations"

#: backend -> listed case -> reason (filled at collection)
_EXPECTED: dict[str, dict[str, str]] = {}


def _expectations_path(backend: str) -> Path:
    return EXPECTATIONS_DIR / f"{backend}.txt"


def _installed_backends() -> set[str]:
    from glow_core.plugin_host import registry

    return set(registry().names())


def _usable_backends(requested: list[str]) -> tuple[list[str], list[Any]]:
    """(backends to run, skip params for the others)."""
    installed = _installed_backends()
    usable: list[str] = []
    skips: list[Any] = []
    for b in requested:
        path = _expectations_path(b)
        reason = ""
        if b not in installed:
            reason = f"backend '{b}' is not installed (installed: {', '.join(sorted(installed)) or 'none'})"
        elif not path.is_file():
            reason = f"backend '{b}' has no expectations file {path}; create it with: {regenerate_command(b, path)}"
        if reason:
            skips.append(pytest.param(None, id=f"{b}-unavailable", marks=pytest.mark.skip(reason=reason)))
            continue
        try:
            _EXPECTED[b] = load_expectations(path)
        except ExpectationsError as e:
            skips.append(pytest.param(("invalid", b, str(e)), id=f"{b}-invalid-expectations"))
            continue
        usable.append(b)
    return usable, skips


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node_case" not in metafunc.fixturenames and "node_backend" not in metafunc.fixturenames:
        return
    requested = [b.strip() for b in str(metafunc.config.getoption("--node-test-backends")).split(",") if b.strip()]
    root = default_root()
    if root is None or not root.is_dir():
        where = f"{root}" if root is not None else "../shared/onnx-node-tests beside the checkout"
        skip = pytest.param(None, id="no-node-tests", marks=pytest.mark.skip(
            reason=f"ONNX node-test folder not found ({where}); set {ENV_ROOT}=DIR to run the ratchet"))
        metafunc.parametrize("node_case" if "node_case" in metafunc.fixturenames else "node_backend", [skip])
        return
    backends, skips = _usable_backends(requested)
    if "node_backend" in metafunc.fixturenames:
        metafunc.parametrize("node_backend", [pytest.param((b, root), id=b) for b in backends] + skips)
        return
    cases = list_cases(root)
    # case-major order: a case's backends run back to back and share its parsed protobufs. The default tier
    # runs each case on one backend, in turn (case i on backend i mod n); the other backends' runs are the
    # `full` tier (`tox -e full`), so every case still runs somewhere on every default run
    params = [pytest.param((b, c), id=f"{b}-{c.name}", marks=[] if i % len(backends) == j else [pytest.mark.full])
              for i, c in enumerate(cases) for j, b in enumerate(backends)]
    metafunc.parametrize("node_case", params + skips)


def test_node(node_case: Any, node_test_summary: Summary, node_test_timeout: float) -> None:
    if node_case[0] == "invalid":
        pytest.fail(f"{node_case[2]}", pytrace=False)
    backend, case = node_case
    source = f"tests/expectations/{backend}.txt"
    result = run_case(case, backend, timeout=node_test_timeout)
    failure = ratchet_failure(result, _EXPECTED[backend].get(case.name), source)
    node_test_summary.add(result, failure)
    if failure:
        pytest.fail(failure, pytrace=False)


def test_expectations_name_real_cases(node_backend: Any) -> None:
    """Every listed name is a case of the folder (a renamed or removed case leaves a stale line)."""
    if node_backend[0] == "invalid":
        pytest.fail(node_backend[2], pytrace=False)
    backend, root = node_backend
    names = {c.name for c in list_cases(root)}
    unknown = sorted(set(_EXPECTED[backend]) - names)
    assert not unknown, (
        f"{_expectations_path(backend)} lists {len(unknown)} case(s) that do not exist in {root}: "
        + ", ".join(unknown[:10]) + f"; regenerate with: {regenerate_command(backend, _expectations_path(backend))}"
    )


# -- the ratchet's own machinery (no node-test folder needed) ------------------


def test_parse_expectations_accepts_comments_and_unsupported_lines() -> None:
    text = "# header\n\ntest_a: unsupported: no rule for Foo: really\ntest_b: unsupported:\ntest_c:unsupported\n"
    assert parse_expectations(text) == {"test_a": "no rule for Foo: really", "test_b": "", "test_c": ""}


def test_parse_expectations_refuses_wrong_answers_errors_duplicates_and_junk() -> None:
    text = "test_a: wrong: 3 of 4 differ\ntest_b: error: KeyError\ntest_c: unsupported: x\ntest_c: unsupported: y\n" \
           "what is this\n"
    with pytest.raises(ExpectationsError) as info:
        parse_expectations(text, "interp.txt")
    msg = str(info.value)
    assert "interp.txt:1: test_a is listed as 'wrong'; only 'unsupported' cases may be listed" in msg
    assert "interp.txt:2: test_b is listed as 'error'" in msg
    assert "interp.txt:4: test_c is listed twice" in msg
    assert "interp.txt:5: not of the form" in msg


@pytest.mark.parametrize("status,listed,verdict", [
    ("pass", None, None),
    ("unsupported", "r", None),
    ("pass", "r", "passes now: remove it from"),
    ("unsupported", None, "is not listed in"),
    ("wrong", None, "gives a WRONG ANSWER"),
    ("error", None, "ends in an ERROR"),
    ("wrong", "r", "listed as unsupported in f.txt but now gives a WRONG ANSWER"),
    ("error", "r", "listed as unsupported in f.txt but now gives an ERROR"),
])
def test_ratchet_verdicts(status: str, listed: str | None, verdict: str | None) -> None:
    got = ratchet_failure(CaseResult("test_x", status, "msg", backend="be"), listed, "f.txt")
    if verdict is None:
        assert got is None
    else:
        assert got is not None and got.startswith("test_x [be] ") and verdict in got


def test_format_expectations_round_trips_and_refuses_bugs() -> None:
    results = [CaseResult("test_b", "unsupported", "no rule\nfor  Foo " + "x" * 300), CaseResult("test_a", "pass"),
               CaseResult("test_c", "unsupported", "bar")]
    text = format_expectations(results, "interpreter", "tests/expectations/interpreter.txt")
    assert "--write-expectations tests/expectations/interpreter.txt" in text
    parsed = parse_expectations(text)
    assert list(parsed) == ["test_b", "test_c"]
    assert parsed["test_b"].startswith("no rule for Foo x") and len(parsed["test_b"]) <= REASON_CHARS
    with pytest.raises(ExpectationsError):
        format_expectations(results + [CaseResult("test_d", "wrong", "off")], "interpreter", "f.txt")


def test_compare_follows_the_onnx_runner() -> None:
    f = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    assert compare(f, f.copy())[0]
    assert compare(f, f * np.float32(1 + 5e-4))[0]  # within rtol 1e-3
    assert not compare(f, f * np.float32(1 + 5e-3))[0]
    assert not compare(f, np.array([1.0, 2.0, 0.0, np.inf], np.float32))[0]  # NaN where none is expected
    assert not compare(f, np.array([1.0, 2.0, np.nan, -np.inf], np.float32))[0]
    assert "dtype float64" in compare(f, f.astype(np.float64))[1]
    assert "shape [1, 4]" in compare(f, f.reshape(1, 4))[1]
    i = np.array([1, 2, 3], np.int64)
    assert not compare(i, i + np.array([0, 0, 1]))[0]  # integers are exact
    import ml_dtypes

    b = np.array([1.0, 100.0], ml_dtypes.bfloat16)
    assert compare(b, np.array([1.0, 101.0], ml_dtypes.bfloat16))[0]  # two bfloat16 ulps allowed


def _write_case(root: Path, name: str, op: str, x: np.ndarray, y: np.ndarray) -> Path:
    case = root / name
    (case / "test_data_set_0").mkdir(parents=True)
    node = helper.make_node(op, ["x"], ["y"], name="n")
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y.shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(case / "model.onnx"))
    onnx.save_tensor(numpy_helper.from_array(x), str(case / "test_data_set_0" / "input_0.pb"))
    onnx.save_tensor(numpy_helper.from_array(y), str(case / "test_data_set_0" / "output_0.pb"))
    return case


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    _write_case(tmp_path, "test_good", "Relu", x, np.maximum(x, 0))
    _write_case(tmp_path, "test_bad", "Relu", x, x)  # a "wrong" expected output: glow's answer differs
    _write_case(tmp_path, "test_nope", "NoSuchOpAnywhere", x, x)
    return tmp_path


def test_run_case_statuses(fake_root: Path) -> None:
    assert run_case(fake_root / "test_good").status == "pass"
    bad = run_case(fake_root / "test_bad")
    assert bad.status == "wrong" and "1 of 3 elements differ" in bad.message
    nope = run_case(fake_root / "test_nope")
    assert nope.status == "unsupported" and "NoSuchOpAnywhere" in nope.message


def test_run_case_time_limit(fake_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import glow_core.onnx_backend

    def slow_prepare(*args: Any, **kwargs: Any) -> Any:
        time.sleep(5)

    monkeypatch.setattr(glow_core.onnx_backend, "prepare", slow_prepare)
    t0 = time.perf_counter()
    r = run_case(fake_root / "test_good", timeout=0.2)
    assert r.status == "error" and "timed out after 0.2 s" in r.message
    assert time.perf_counter() - t0 < 3


def test_write_expectations_refuses_wrong_answers(fake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = fake_root / "exp.txt"
    assert nodetests.main([str(fake_root), "--write-expectations", str(out)]) == 1
    assert not out.exists()
    err = capsys.readouterr().err
    assert "refusing to write" in err and "wrong  test_bad" in err


def test_write_then_check_expectations(fake_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    shutil.rmtree(fake_root / "test_bad")
    out = fake_root / "exp.txt"
    assert nodetests.main([str(fake_root), "--write-expectations", str(out)]) == 0
    assert parse_expectations(out.read_text()).keys() == {"test_nope"}
    assert nodetests.main([str(fake_root), "--check", str(out)]) == 0
    out.write_text(out.read_text() + "test_good: unsupported: stale\ntest_gone: unsupported: renamed\n")
    capsys.readouterr()
    assert nodetests.main([str(fake_root), "--check", str(out)]) == 1
    text = capsys.readouterr().out
    assert "test_good [interpreter] passes now: remove it from" in text
    assert "test_gone is listed in" in text and "no such case" in text


def test_a_crash_reported_as_unsupported_is_an_error(fake_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import glow_core.onnx_backend
    from glow_core.errors import UnsupportedError

    def crashing_prepare(*args: Any, **kwargs: Any) -> Any:
        try:
            {}["missing"]
        except KeyError as e:
            raise UnsupportedError("ONNX node 'n': cannot import: KeyError: 'missing'") from e

    monkeypatch.setattr(glow_core.onnx_backend, "prepare", crashing_prepare)
    r = run_case(fake_root / "test_good")
    assert r.status == "error" and "a KeyError inside glow was reported as unsupported" in r.message
