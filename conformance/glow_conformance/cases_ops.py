"""Node cases: every primitive x element kind x shape family, every high-level kind, against the reference.

A case builds a function of one node whose operands are inputs (constants
where the generator says so), evaluates the node on the reference backend
(its ``evaluate``: the executable specification), prepares the function for
the backend under test through the real pipeline (optimization, lowering of
whatever the backend does not run natively), compiles, runs and compares
every result under the tolerance of ``glow_tools.testing``.

- ``unsupported``: after lowering, some node is not declared by the backend
  (the message lists them, as ``glow_core.compile`` would);
- ``fail``: compile or execute raised, or a result differs (the message names
  the result, how many elements differ, the worst one with both values).
"""

from __future__ import annotations

import traceback
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from glow_conformance.gen import Build, Variant, generators
from glow_conformance.model import Case, Context, Level, Outcome, Result
from glow_core.errors import GlowError, UnsupportedError
from glow_core.ir.defs.quant import TYPED_QUANT_KINDS
from glow_core.ir.defs.symbolic import SYMBOLIC_ONLY_KINDS
from glow_core.ir.kinds import all_kinds
from glow_core.ir.types import ElemKind
from glow_sdk.backend import Backend
from glow_sdk.primitives import mandatory_primitives, primitive_kinds
from glow_tools.testing import (
    compare_arrays,
    feeds_of,
    one_node_function,
    pad_operands,
    prepare_for,
    tolerance_for,
)


def case_seed(case_id: str, seed: int) -> int:
    """A seed of its own for every case: results do not depend on which cases run (``-k``)."""
    return zlib.crc32(case_id.encode()) ^ (seed * 0x9E3779B1 & 0xFFFFFFFF)


def _describe_exception(e: BaseException) -> str:
    text = " ".join(str(e).split())
    where = ""
    tb = traceback.extract_tb(e.__traceback__)
    if tb:
        last = tb[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return f"{type(e).__name__}: {text}{where}"


def run_node_case(ctx: Context, case_id: str, kind: str, build: Build, lower_all: bool) -> Outcome:
    rng = np.random.default_rng(case_seed(case_id, ctx.seed))
    v: Variant = build(rng)
    operands = pad_operands(kind, v.operands)
    try:
        fn = one_node_function(kind, operands, v.attrs, v.types, v.consts)
    except GlowError as e:
        return Outcome(Result.FAIL, f"the suite built an invalid {kind} node (a suite bug): {e.one_line()}")
    node = fn.nodes[0]
    out_types = [o.type for o in node.outputs]
    try:
        with np.errstate(all="ignore"):
            want = ctx.reference.evaluate(kind, node.attrs, operands, out_types)
    except UnsupportedError as e:
        return Outcome(Result.UNSUPPORTED, f"the reference backend cannot evaluate this {kind}: {e.one_line()}")
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"the reference backend failed on the suite's {kind} case (a suite bug): "
                                    f"{_describe_exception(e)}")
    backend: Backend = ctx.backend
    try:
        prepare_for(fn, backend, lower_all=lower_all)
    except Exception as e:  # noqa: BLE001  (a lowering or pass failure: glow's, but the backend cannot run it)
        return Outcome(Result.FAIL, f"glow failed to prepare the function for the backend: {_describe_exception(e)}")
    nodes = fn.count_by_kind()
    details = {"nodes": nodes}
    try:
        from glow_core.pipeline import check_support, compile_options

        check_support(fn, backend)
    except UnsupportedError as e:
        return Outcome(Result.UNSUPPORTED, str(e), details=details)
    feeds = feeds_of(fn, operands)
    try:
        exe = backend.compile(fn, compile_options())
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"compile raised {_describe_exception(e)}", details=details)
    try:
        with np.errstate(all="ignore"):
            got = exe.execute(dict(feeds))
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"execute raised {_describe_exception(e)}", details=details)
    return compare_outputs(kind, got, want, [t.elem for t in out_types], v.tolerance, details)


def compare_outputs(kind: str, got: Mapping[str, np.ndarray], want: list[np.ndarray], elems: list[ElemKind],
                    tolerance_class: str | None, details: dict[str, Any]) -> Outcome:
    errors: list[str] = []
    max_err = 0.0
    tols = []
    for j, (w, elem) in enumerate(zip(want, elems)):
        tol = tolerance_for(kind, elem, tolerance_class)
        tols.append(tol.describe())
        name = f"out{j}"
        if name not in got:
            errors.append(f"result {j} is missing from the outputs")
            continue
        c = compare_arrays(got[name], w, tol)
        if np.isfinite(c.max_abs_error):
            max_err = max(max_err, c.max_abs_error)
        if not c.ok:
            errors.append(f"result {j}: {c.message}")
    tol_text = "; ".join(sorted(set(tols)))
    if errors:
        return Outcome(Result.FAIL, "; ".join(errors), max_err, tol_text, details)
    return Outcome(Result.PASS, "", max_err, tol_text, details)


def _node_case(category: str, kind: str, elem: ElemKind, variant: str, build: Build, level: Level,
               mandatory: bool, lower_all: bool) -> Case:
    case_id = f"{category}/{kind}/{elem.value}/{variant}"

    def run(ctx: Context) -> Outcome:
        return run_node_case(ctx, case_id, kind, build, lower_all and ctx.force_lowering)

    return Case(case_id, category, level, mandatory, run, kind=kind, elem=elem.value, variant=variant)


def node_cases(backend: Backend, level: Level, missing: list[str]) -> list[Case]:
    """The primitive cases (and, at level full, the high-level ones) for ``backend``.

    Kinds without a generator are appended to ``missing`` (reported, never silently passed).
    """
    declared = {k: frozenset(v) for k, v in backend.supported_kinds().items()}
    declared_any = frozenset().union(*declared.values()) if declared else frozenset()
    mand = mandatory_primitives()
    prims = primitive_kinds()
    gens = generators()
    cases: list[Case] = []
    for kind in sorted(all_kinds()):
        if kind in SYMBOLIC_ONLY_KINDS:  # (compiles for symbolic dims make it: the symbolic cases cover it)
            continue
        gen = gens.get(kind)
        if gen is None:
            missing.append(kind)
            continue
        if kind in prims:
            need = mand.get(kind, frozenset())
            avail = need | declared.get(kind, frozenset())
            optional = kind not in mand  # the quantized primitives: cases for what the backend declares
            for elem in sorted(avail & gen.elems, key=lambda e: e.value):
                # mandatory: the mandatory element kinds (also for Cast's targets); then, at level full,
                # the variants that need what the backend declares beyond them
                core = gen.variants(elem, avail if optional else need) if elem in need or optional else {}
                for variant, build in core.items():
                    cases.append(_node_case("primitive", kind, elem, variant, build, Level.CORE, not optional,
                                            False))
                if level is Level.FULL:
                    for variant, build in gen.variants(elem, avail).items():
                        if variant not in core:
                            cases.append(_node_case("primitive", kind, elem, variant, build, Level.FULL, False,
                                                    False))
        elif level is Level.FULL:
            if kind in TYPED_QUANT_KINDS:
                # a typed quantized kind, for the typed element kinds the backend runs natively only: a
                # backend never sees it otherwise, since quantization rewrites the whole function onto
                # QuantizeLinear / QLinearConv / ... (their cases are above), and typed operands cannot cross
                # a single node's lowering (the cpu backend declares QLookup on plain int8 codes only)
                elems = gen.elems & declared.get(kind, frozenset())
            else:
                elems = gen.elems & (declared_any | declared.get(kind, frozenset()))
            for elem in sorted(elems, key=lambda e: e.value):
                for variant, build in gen.variants(elem, declared_any).items():
                    cases.append(_node_case("high-level", kind, elem, variant, build, Level.FULL, False, True))
    return cases


__all__ = ["case_seed", "compare_outputs", "node_cases", "run_node_case"]
