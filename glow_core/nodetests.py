"""Run ONNX backend node-test cases (``test_*/model.onnx`` + data sets) on a glow backend.

Each case ends in one of:

- ``pass``: every output matches as ONNX's runner compares (rtol 1e-3,
  atol 1e-7 for floats; exact for integers and bools; dtypes and shapes equal);
- ``unsupported``: glow raised an :class:`UnsupportedError` (a clear, expected refusal);
- ``wrong``: glow produced outputs that do not match (a wrong answer: a bug);
- ``error``: any other failure (a bug too).

``python -m glow_core.nodetests DIR --backend NAME [-k SUBSTR]`` prints a summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from glow_core.errors import GlowError, UnsupportedError

RTOL = 1e-3
ATOL = 1e-7
STATUSES = ("pass", "unsupported", "wrong", "error")


@dataclass
class CaseResult:
    name: str
    status: str
    message: str = ""
    seconds: float = 0.0
    max_error: float = 0.0


def default_root() -> Path | None:
    """``$GLOW_ONNX_NODE_TESTS`` or ``../shared/onnx-node-tests`` beside the checkout."""
    env = os.environ.get("GLOW_ONNX_NODE_TESTS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1]
    for cand in (here.parent / "shared" / "onnx-node-tests", Path.cwd().parent / "shared" / "onnx-node-tests"):
        if cand.is_dir():
            return cand
    return None


def list_cases(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "model.onnx").is_file())


class _NotTensor(UnsupportedError):
    pass


def _read_value(path: Path, type_proto: onnx.TypeProto | None) -> np.ndarray:
    data = path.read_bytes()
    which = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if which not in (None, "tensor_type"):
        raise _NotTensor(f"{path.name} holds a {which.replace('_type', '')} value; only tensors are supported")
    t = onnx.TensorProto()
    t.ParseFromString(data)
    if t.data_type == onnx.TensorProto.STRING:
        raise _NotTensor("string tensors are not supported")
    return numpy_helper.to_array(t)


def load_data_sets(case: Path, model: onnx.ModelProto) -> Iterator[tuple[list[np.ndarray], list[np.ndarray]]]:
    inits = {t.name for t in model.graph.initializer}
    in_types = [i.type for i in model.graph.input if i.name not in inits]
    out_types = [o.type for o in model.graph.output]
    for ds in sorted(case.glob("test_data_set_*")):
        n_in = len(list(ds.glob("input_*.pb")))
        n_out = len(list(ds.glob("output_*.pb")))
        ins = [_read_value(ds / f"input_{i}.pb", in_types[i] if i < len(in_types) else None) for i in range(n_in)]
        outs = [_read_value(ds / f"output_{i}.pb", out_types[i] if i < len(out_types) else None) for i in range(n_out)]
        yield ins, outs


def compare(expected: np.ndarray, actual: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> tuple[bool, str, float]:
    """ONNX-runner-style comparison; returns (ok, message, max abs error)."""
    if expected.dtype != actual.dtype:
        return False, f"dtype {actual.dtype}, expected {expected.dtype}", float("inf")
    if expected.shape != actual.shape:
        return False, f"shape {list(actual.shape)}, expected {list(expected.shape)}", float("inf")
    if expected.dtype.kind in "biuU" or expected.dtype == np.bool_:
        bad = int(np.count_nonzero(expected != actual))
        return bad == 0, (f"{bad} of {expected.size} elements differ" if bad else ""), float(bad)
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


def run_case(case: Path, backend: str = "interpreter", **options: Any) -> CaseResult:
    from glow_core import onnx_backend

    t0 = time.perf_counter()
    name = case.name
    try:
        model = onnx.load(str(case / "model.onnx"))
        rep = None
        max_err = 0.0
        for ins, outs in load_data_sets(case, model):
            if rep is None:
                rep = onnx_backend.prepare(model, backend=backend, **options)
            got = rep.run(ins)
            if len(got) != len(outs):
                return CaseResult(name, "wrong", f"{len(got)} outputs, expected {len(outs)}", time.perf_counter() - t0)
            for i, (e, a) in enumerate(zip(outs, got)):
                ok, msg, err = compare(e, np.asarray(a))
                max_err = max(max_err, err)
                if not ok:
                    return CaseResult(name, "wrong", f"output {i}: {msg}", time.perf_counter() - t0, err)
        return CaseResult(name, "pass", "", time.perf_counter() - t0, max_err)
    except UnsupportedError as e:
        return CaseResult(name, "unsupported", e.one_line(), time.perf_counter() - t0)
    except GlowError as e:
        return CaseResult(name, "error", f"{type(e).__name__}: {e.one_line()}", time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001
        tb = traceback.format_exception(e)[-3:]
        return CaseResult(name, "error", f"{type(e).__name__}: {e} | {''.join(tb).strip()}", time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", type=Path, default=None)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("-k", dest="pattern", default="", help="only cases whose name contains this")
    ap.add_argument("--show", default="wrong,error", help="statuses to list (comma-separated, or 'all')")
    args = ap.parse_args(argv)
    root = args.root or default_root()
    if root is None or not root.is_dir():
        print("no node-test folder found (give DIR or set GLOW_ONNX_NODE_TESTS)", file=sys.stderr)
        return 2
    counts = {s: 0 for s in STATUSES}
    show = set(STATUSES) if args.show == "all" else set(args.show.split(","))
    for case in list_cases(root):
        if args.pattern and args.pattern not in case.name:
            continue
        r = run_case(case, args.backend)
        counts[r.status] += 1
        if r.status in show:
            print(f"{r.status:11s} {r.name}: {r.message[:300]}")
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 0 if counts["wrong"] == 0 and counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
