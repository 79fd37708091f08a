"""Run ONNX backend node-test cases (``test_*/model.onnx`` + data sets) on a glow backend.

Each case ends in one of:

- ``pass``: every output matches as ONNX's runner compares (rtol 1e-3,
  atol 1e-7 for floats, two bfloat16 ulps for bfloat16; exact for integers
  and bools; dtypes and shapes equal; sequences element by element). The
  cases in :data:`ATOL_OVERRIDES`, whose expected data is itself off the exact
  answer by more than 1e-7, get the larger atol given there with the reason;
- ``unsupported``: glow raised an :class:`UnsupportedError` (a clear, deliberate refusal);
- ``wrong``: glow produced outputs that do not match (a wrong answer: a bug);
- ``error``: any other failure (a bug too), including a time-out and an
  ``UnsupportedError`` raised *from* a Python error (an import rule that
  crashed with a KeyError is not a clear refusal).

The expectations file of a backend (``tests/expectations/<backend>.txt``) lists
every case known to end in ``unsupported``, one per line::

    test_name: unsupported: <first ~150 characters of the message>

A wrong answer or an error can never be listed (the loader refuses such lines).
A run is held to the file as a ratchet (:func:`ratchet_failure`): an unlisted
case must pass, and a listed case that passes must be removed, so the number of
passing cases only goes up.

Command line::

    python -m glow_tools.nodetests [DIR] [--backend NAME] [-k SUBSTR]   # summary
    python -m glow_tools.nodetests --check tests/expectations/interpreter.txt
    python -m glow_tools.nodetests --write-expectations tests/expectations/interpreter.txt

``--write-expectations`` writes the file from a full run and refuses (exit 1,
listing them) when any case gives a wrong answer or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from glow_core.errors import GlowError, UnsupportedError

RTOL = 1e-3
ATOL = 1e-7
#: ONNX's runner allows two bfloat16 ulps
BFLOAT16_RTOL = 2.0**-6
STATUSES = ("pass", "unsupported", "wrong", "error")
#: cases whose expected data is itself further than ATOL from the exact answer: (atol, why). Each entry is
#: measured; the interpreter (which computes as onnx.reference does) still passes them at ATOL.
ATOL_OVERRIDES: dict[str, tuple[float, str]] = {
    **{name: (1e-6, "the expected values come from a single-precision FFT (numpy >= 2, as onnx.reference): "
                    "imaginary parts that are exactly 0 read 1.9e-7 there; a lowered DFT computed in float64 "
                    "gives the exact 0, 1.9e-7 away")
       for name in ("test_dft_inverse", "test_dft_inverse_opset19")},
}
#: characters of the message kept as the reason in an expectations file
REASON_CHARS = 150
#: a case running longer than this (seconds) ends in "error"
DEFAULT_TIMEOUT = 120.0
ENV_ROOT = "GLOW_ONNX_NODE_TESTS"


@dataclass
class CaseResult:
    name: str
    status: str
    message: str = ""
    seconds: float = 0.0
    max_error: float = 0.0
    backend: str = "interpreter"

    @property
    def reason(self) -> str:
        """The message as one line of at most REASON_CHARS characters."""
        return one_line(self.message, REASON_CHARS)


def one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def default_root() -> Path | None:
    """``$GLOW_ONNX_NODE_TESTS`` or ``../shared/onnx-node-tests`` beside the checkout."""
    env = os.environ.get(ENV_ROOT)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1]
    for cand in (here.parent / "shared" / "onnx-node-tests", Path.cwd().parent / "shared" / "onnx-node-tests"):
        if cand.is_dir():
            return cand
    return None


def list_cases(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "model.onnx").is_file())


# -- loading a case ----------------------------------------------------------


class _NotTensor(UnsupportedError):
    pass


#: inputs and outputs: arrays, lists of arrays (sequences), None (empty optionals)
DataSet = tuple[tuple[Any, ...], tuple[Any, ...]]


@dataclass(frozen=True)
class LoadedCase:
    """A case's model and data sets, parsed once (shared by every backend run)."""

    name: str
    model: onnx.ModelProto | None
    data_sets: tuple[DataSet, ...] = ()
    #: a refusal found while reading the data (sequence or string values)
    load_error: UnsupportedError | None = None


def _read_value(path: Path, type_proto: onnx.TypeProto | None) -> Any:
    """A tensor as an array; a sequence as a list; an optional as None or its content."""
    data = path.read_bytes()
    which = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if which == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return _from_sequence(seq, path)
    if which == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        if opt.HasField("tensor_value"):
            return _from_tensor(opt.tensor_value)
        if opt.HasField("sequence_value"):
            return _from_sequence(opt.sequence_value, path)
        if opt.elem_type in (onnx.OptionalProto.UNDEFINED, onnx.OptionalProto.TENSOR, onnx.OptionalProto.SEQUENCE):
            return None
        raise _NotTensor(f"{path.name} holds an optional map; only tensors and sequences of them are supported")
    if which not in (None, "tensor_type"):
        raise _NotTensor(f"{path.name} holds a {which.replace('_type', '')} value; only tensors are supported")
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return _from_tensor(t)


def _from_tensor(t: onnx.TensorProto) -> np.ndarray:
    if t.data_type == onnx.TensorProto.STRING:
        raise _NotTensor("string tensors are not supported")
    return numpy_helper.to_array(t)


def _from_sequence(seq: onnx.SequenceProto, path: Path) -> list[np.ndarray]:
    if seq.elem_type not in (onnx.SequenceProto.TENSOR, onnx.SequenceProto.UNDEFINED) or len(seq.sequence_values) or len(seq.map_values):
        raise _NotTensor(f"{path.name} holds a sequence of non-tensors; only sequences of tensors are supported")
    return [_from_tensor(t) for t in seq.tensor_values]


def load_data_sets(case: Path, model: onnx.ModelProto) -> Iterator[DataSet]:
    inits = {t.name for t in model.graph.initializer}
    in_types = [i.type for i in model.graph.input if i.name not in inits]
    out_types = [o.type for o in model.graph.output]
    for ds in sorted(case.glob("test_data_set_*")):
        n_in = len(list(ds.glob("input_*.pb")))
        n_out = len(list(ds.glob("output_*.pb")))
        ins = [_read_value(ds / f"input_{i}.pb", in_types[i] if i < len(in_types) else None) for i in range(n_in)]
        outs = [_read_value(ds / f"output_{i}.pb", out_types[i] if i < len(out_types) else None) for i in range(n_out)]
        yield tuple(ins), tuple(outs)


@functools.lru_cache(maxsize=4)
def load_case(case: Path) -> LoadedCase:
    """Parse ``model.onnx`` and the data sets once; a few recent cases stay cached."""
    model = onnx.load(str(case / "model.onnx"))
    try:
        return LoadedCase(case.name, model, tuple(load_data_sets(case, model)))
    except _NotTensor as e:
        return LoadedCase(case.name, model, (), e)


# -- comparing ---------------------------------------------------------------


def _exact(dtype: np.dtype) -> bool:
    if dtype.kind in "biuUSO":
        return True
    return dtype.kind == "V" and dtype.name.startswith(("int", "uint"))  # ml_dtypes int4 / uint4


def compare(expected: Any, actual: Any, rtol: float = RTOL, atol: float = ATOL) -> tuple[bool, str, float]:
    """ONNX-runner-style comparison; returns (ok, message, max abs error).

    Sequences (lists) compare element by element; an empty optional (None) only equals None.
    """
    if expected is None or actual is None:
        same = expected is None and actual is None
        return same, "" if same else ("an empty optional, expected a value" if actual is None
                                      else "a value, expected an empty optional"), 0.0 if same else float("inf")
    if isinstance(expected, list) or isinstance(actual, list):
        if not (isinstance(expected, list) and isinstance(actual, list)):
            return False, "a tensor where a sequence was expected (or the reverse)", float("inf")
        if len(expected) != len(actual):
            return False, f"a sequence of {len(actual)} tensors, expected {len(expected)}", float("inf")
        worst = 0.0
        for i, (e, a) in enumerate(zip(expected, actual)):
            ok, msg, err = compare(e, np.asarray(a), rtol, atol)
            worst = max(worst, err)
            if not ok:
                return False, f"sequence element {i}: {msg}", err
        return True, "", worst
    return _compare_arrays(expected, np.asarray(actual), rtol, atol)


def _compare_arrays(expected: np.ndarray, actual: np.ndarray, rtol: float, atol: float) -> tuple[bool, str, float]:
    if expected.dtype != actual.dtype:
        return False, f"dtype {actual.dtype}, expected {expected.dtype}", float("inf")
    if expected.shape != actual.shape:
        return False, f"shape {list(actual.shape)}, expected {list(expected.shape)}", float("inf")
    if _exact(expected.dtype):
        bad = int(np.count_nonzero(expected != actual))
        return bad == 0, (f"{bad} of {expected.size} elements differ" if bad else ""), float(bad)
    if expected.dtype.name == "bfloat16":
        rtol = max(rtol, BFLOAT16_RTOL)
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    nan_ok = np.isnan(e) == np.isnan(a)
    both = ~np.isnan(e) & ~np.isnan(a)
    inf_same = np.where(np.isinf(e) | np.isinf(a), e == a, True)
    with np.errstate(all="ignore"):
        diff = np.where(both & ~np.isinf(e) & ~np.isinf(a), np.abs(e - a), 0.0)
        tol = atol + rtol * np.abs(np.where(np.isfinite(e), e, 0.0))
    ok_mask = nan_ok & inf_same & (diff <= tol)
    max_err = float(diff.max()) if diff.size else 0.0
    if bool(ok_mask.all()):
        return True, "", max_err
    bad = int((~ok_mask).sum())
    return False, f"{bad} of {e.size} elements differ (max abs error {max_err:.3g})", max_err


# -- running -----------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so kernels' ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread on POSIX only; otherwise no limit)."""
    usable = (seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"timed out after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_case(case: Path, backend: str = "interpreter", *, timeout: float | None = DEFAULT_TIMEOUT,
             **options: Any) -> CaseResult:
    """Run one case folder on ``backend`` through ``glow_core.onnx_backend``."""
    from glow_core import onnx_backend

    t0 = time.perf_counter()
    name = case.name

    def result(status: str, message: str = "", max_err: float = 0.0) -> CaseResult:
        return CaseResult(name, status, message, time.perf_counter() - t0, max_err, backend)

    try:
        with time_limit(timeout):
            loaded = load_case(case)
            if loaded.load_error is not None:
                return result("unsupported", loaded.load_error.one_line())
            rep = None
            max_err = 0.0
            for ins, outs in loaded.data_sets:
                if rep is None:
                    rep = onnx_backend.prepare(loaded.model, backend=backend, **options)
                got = rep.run(list(ins))
                if len(got) != len(outs):
                    return result("wrong", f"{len(got)} outputs, expected {len(outs)}")
                atol = ATOL_OVERRIDES.get(name, (ATOL, ""))[0]
                for i, (e, a) in enumerate(zip(outs, got)):
                    ok, msg, err = compare(e, a, atol=atol)
                    max_err = max(max_err, err)
                    if not ok:
                        return result("wrong", f"output {i}: {msg}", err)
            return result("pass", "", max_err)
    except CaseTimeout as e:
        return result("error", f"{e}: a case must finish well within {timeout:g} s")
    except UnsupportedError as e:
        cause = e.__cause__
        if cause is not None and not isinstance(cause, GlowError):
            # e.g. the importer's "cannot import: KeyError": a crash, not a deliberate refusal
            return result("error", f"a {type(cause).__name__} inside glow was reported as unsupported: "
                                   f"{e.one_line()}")
        return result("unsupported", e.one_line())
    except GlowError as e:
        return result("error", f"{type(e).__name__}: {e.one_line()}")
    except Exception as e:  # noqa: BLE001
        tb = traceback.format_exception(e)[-3:]
        return result("error", f"{type(e).__name__}: {e} | {''.join(tb).strip()}")


# -- expectations ------------------------------------------------------------


class ExpectationsError(GlowError):
    """An expectations file that cannot be used (bad line, listed wrong answer, duplicate)."""


_LINE = re.compile(r"^(?P<name>[^\s:]+)\s*:\s*(?P<status>[A-Za-z_-]+)\s*(?::\s?(?P<reason>.*))?$")


def parse_expectations(text: str, source: str = "<expectations>") -> dict[str, str]:
    """``name -> reason`` for every listed case; refuses anything but ``unsupported``."""
    out: dict[str, str] = {}
    problems: list[str] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            problems.append(f"{source}:{no}: not of the form 'test_name: unsupported: reason': {line[:80]!r}")
            continue
        name, status = m["name"], m["status"]
        if status != "unsupported":
            problems.append(
                f"{source}:{no}: {name} is listed as '{status}'; only 'unsupported' cases may be listed "
                "(a wrong answer or an error is a bug to fix, never an expectation)"
            )
            continue
        if name in out:
            problems.append(f"{source}:{no}: {name} is listed twice")
            continue
        out[name] = (m["reason"] or "").strip()
    if problems:
        raise ExpectationsError("invalid expectations file:\n  " + "\n  ".join(problems))
    return out


def load_expectations(path: Path) -> dict[str, str]:
    return parse_expectations(path.read_text(encoding="utf-8"), str(path))


def regenerate_command(backend: str, path: str | Path) -> str:
    return f"python -m glow_tools.nodetests --backend {backend} --write-expectations {path}"


def format_expectations(results: Sequence[CaseResult], backend: str, path: str | Path) -> str:
    """The expectations file for a full run (only ``unsupported`` cases are listed)."""
    counts = count_statuses(results)
    if counts["wrong"] or counts["error"]:
        raise ExpectationsError("wrong answers and errors cannot be written as expectations")
    lines = [
        f"# ONNX node-test expectations for backend '{backend}'.",
        "# Every case listed here is known to end in a clear 'unsupported' error; every other case",
        "# must pass. Wrong answers and errors can never be listed. Regenerate with:",
        f"#   {regenerate_command(backend, path)}",
        f"# {counts['pass']} pass, {counts['unsupported']} unsupported (of {len(results)})",
    ]
    for r in sorted(results, key=lambda r: r.name):
        if r.status == "unsupported":
            lines.append(f"{r.name}: unsupported: {r.reason}".rstrip())
    return "\n".join(lines) + "\n"


def ratchet_failure(result: CaseResult, listed: str | None, source: str = "the expectations file") -> str | None:
    """Why ``result`` breaks the ratchet (``listed``: its reason in the file, None if unlisted), or None."""
    head = f"{result.name} [{result.backend}]"
    fix = f"(regenerate with: {regenerate_command(result.backend, source)})"
    if listed is None:
        if result.status == "pass":
            return None
        if result.status == "unsupported":
            return (f"{head} is not listed in {source} and ended in: unsupported: {result.message} -- "
                    f"a regression, or a new case that is expected to be unsupported {fix}")
        what = "gives a WRONG ANSWER" if result.status == "wrong" else "ends in an ERROR"
        return f"{head} {what}: {result.message}"
    if result.status == "pass":
        return f"{head} passes now: remove it from {source}, the count ratchets up {fix}"
    if result.status == "unsupported":
        return None
    what = "a WRONG ANSWER" if result.status == "wrong" else "an ERROR"
    return f"{head} is listed as unsupported in {source} but now gives {what}: {result.message}"


def count_statuses(results: Sequence[CaseResult]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for r in results:
        counts[r.status] += 1
    return counts


@dataclass
class Summary:
    """Per-backend tallies of a run, for a closing report."""

    results: dict[str, list[CaseResult]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)

    def add(self, result: CaseResult, failure: str | None = None) -> None:
        self.results.setdefault(result.backend, []).append(result)
        if failure:
            self.failures.setdefault(result.backend, []).append(failure)

    def lines(self, slowest: int = 5) -> list[str]:
        out: list[str] = []
        for backend, results in sorted(self.results.items()):
            c = count_statuses(results)
            total = sum(r.seconds for r in results)
            fails = len(self.failures.get(backend, []))
            out.append(
                f"[{backend}] {len(results)} cases: {c['pass']} pass, {c['unsupported']} unsupported, "
                f"{c['wrong']} wrong, {c['error']} error; {fails} ratchet failure(s); {total:.1f} s in cases"
            )
            if slowest:
                slow = sorted(results, key=lambda r: -r.seconds)[:slowest]
                out.append("  slowest: " + ", ".join(f"{r.name} {r.seconds:.2f}s" for r in slow))
        return out


# -- command line ------------------------------------------------------------


def _select(root: Path, pattern: str) -> list[Path]:
    return [c for c in list_cases(root) if not pattern or pattern in c.name]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glow_tools.nodetests", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", type=Path, default=None,
                    help=f"the node-test folder (default: ${ENV_ROOT} or ../shared/onnx-node-tests)")
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("-k", dest="pattern", default="", help="only cases whose name contains this")
    ap.add_argument("--show", default="wrong,error", help="statuses to list (comma-separated, or 'all')")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case (0: none)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write-expectations", type=Path, metavar="FILE",
                       help="write the expectations file from this run (refused on wrong answers or errors)")
    group.add_argument("--check", type=Path, metavar="FILE", help="hold the run to an expectations file")
    args = ap.parse_args(argv)
    root = args.root or default_root()
    if root is None or not root.is_dir():
        print(f"no node-test folder found (give DIR or set {ENV_ROOT})", file=sys.stderr)
        return 2
    if args.write_expectations and args.pattern:
        print("--write-expectations needs the full set of cases; drop -k", file=sys.stderr)
        return 2
    expected: dict[str, str] | None = None
    if args.check:
        try:
            expected = load_expectations(args.check)
        except (OSError, ExpectationsError) as e:
            print(f"cannot use {args.check}: {e}", file=sys.stderr)
            return 2
    show = set(STATUSES) if args.show == "all" else set(args.show.split(","))
    summary = Summary()
    results: list[CaseResult] = []
    for case in _select(root, args.pattern):
        r = run_case(case, args.backend, timeout=args.timeout or None)
        results.append(r)
        failure = ratchet_failure(r, expected.get(r.name), str(args.check)) if expected is not None else None
        summary.add(r, failure)
        if r.status in show:
            print(f"{r.status:11s} {r.name}: {r.message[:300]}")
        if failure:
            print(f"RATCHET     {failure[:400]}")
    for line in summary.lines():
        print(line)
    counts = count_statuses(results)
    bad = [r for r in results if r.status in ("wrong", "error")]
    if args.write_expectations:
        if bad:
            print(f"refusing to write {args.write_expectations}: {len(bad)} case(s) give wrong answers or errors, "
                  "which can never be listed; fix them first:", file=sys.stderr)
            for r in bad:
                print(f"  {r.status:6s} {r.name}: {r.message[:200]}", file=sys.stderr)
            return 1
        args.write_expectations.parent.mkdir(parents=True, exist_ok=True)
        args.write_expectations.write_text(
            format_expectations(results, args.backend, args.write_expectations), encoding="utf-8")
        print(f"wrote {args.write_expectations}: {counts['unsupported']} expected-unsupported cases, "
              f"{counts['pass']} pass")
        return 0
    if expected is not None:
        unknown = sorted(set(expected) - {c.name for c in list_cases(root)})
        for n in unknown:
            print(f"RATCHET     {n} is listed in {args.check} but there is no such case")
        return 1 if summary.failures or unknown else 0
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
