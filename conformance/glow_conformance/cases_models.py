"""Whole-model cases: the light model zoo shipped inside the onnx package, with seeded random weights.

The shipped light models build every weight with ``ConstantOfShape`` (all
0.02), so every channel computes the same thing and a comparison could catch
little. Each model is therefore run with seeded random weights (the
``ConstantOfShape`` weights replaced by initializers: fan-in scaled normal
values, biases and statistics in safe ranges) and with the logits before the
final Softmax exposed as a second output, on the backend and on the reference,
on the same seeded input; every output is compared under the ``model``
tolerance of ``glow_tools.testing``.

A model case is mandatory: a backend running the primitives must run it,
since glow lowers everything else. When glow cannot lower some kind of the
model onto the primitives (an incomplete lowering, not the backend's doing),
the case is ``unsupported`` and not mandatory.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx

from glow_conformance.model import Case, Context, Level, Outcome, Result
from glow_core import zoo
from glow_core.pipeline import compile_options
from glow_core.ir.kinds import Category
from glow_tools.testing import compare_arrays, prepare_for, tolerance_for, unsupported_nodes

SEED = 20240607
#: variance gain of the random conv / gemm weights per model
GAINS = zoo.RANDOM_WEIGHT_GAINS
#: the models of level core; level full adds the three with large dense layers (alexnet, zfnet512, vgg19:
#: 60 to 140 million weights each, a minute or more between them)
CORE_MODELS = ("densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet")


def with_random_weights(model: onnx.ModelProto, gain: float, seed: int = SEED) -> onnx.ModelProto:
    """Seeded random weights in place of the ``ConstantOfShape`` ones, logits exposed (glow_core.zoo)."""
    return zoo.with_random_weights(model, gain, seed, expose_logits=True)


def _model(ctx: Context, name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    key = ("model", name)
    if key not in ctx.cache:
        proto = with_random_weights(onnx.load(str(zoo.model_path(name))), GAINS.get(name, 2.0), SEED + ctx.seed)
        ctx.cache[key] = (proto, zoo.model_feeds(proto, SEED + ctx.seed))
    cached: tuple[onnx.ModelProto, dict[str, np.ndarray]] = ctx.cache[key]
    return cached


def _reference_outputs(ctx: Context, name: str) -> dict[str, np.ndarray]:
    key = ("model-reference", name)
    if key not in ctx.cache:
        import glow_core

        proto, feeds = _model(ctx, name)
        ctx.cache[key] = glow_core.compile(proto, ctx.reference_name).run(feeds)
    out: dict[str, np.ndarray] = ctx.cache[key]
    return out


def run_model_case(ctx: Context, name: str) -> Outcome:
    from glow_core.importer import import_model

    proto, feeds = _model(ctx, name)
    want = _reference_outputs(ctx, name)
    fn = import_model(proto)
    try:
        prepare_for(fn, ctx.backend)
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"glow failed to prepare the model for the backend: {type(e).__name__}: {e}")
    bad = unsupported_nodes(fn, ctx.backend)
    nodes = fn.count_by_kind()
    if bad:
        kinds = sorted({f"{n.kind.name}({'/'.join(sorted({v.type.elem.value for v in n.inputs if v is not None}))})"
                        for n in bad})
        beyond = sorted({n.kind.name for n in bad if not n.kind.is_(Category.PRIMITIVE)})
        if beyond:
            return Outcome(Result.UNSUPPORTED, f"after lowering, {len(bad)} node(s) are not primitives the backend "
                           f"runs: {', '.join(kinds)} (glow has no lowering of {', '.join(beyond)} onto the "
                           "primitives: not mandatory)", details={"nodes": nodes}, mandatory=False)
        return Outcome(Result.UNSUPPORTED, f"the backend does not declare primitive(s) the model needs: "
                       f"{', '.join(kinds)}", details={"nodes": nodes})
    try:
        exe = ctx.backend.compile(fn, compile_options())
        with np.errstate(all="ignore"):
            got = exe.execute(dict(feeds))
    except Exception as e:  # noqa: BLE001
        return Outcome(Result.FAIL, f"{type(e).__name__}: {e}", details={"nodes": nodes})
    errors = []
    max_err = 0.0
    tol_text = ""
    for out_name, w in want.items():
        tol = tolerance_for("", _elem_of(w), "model")
        tol_text = tol.describe()
        if out_name not in got:
            errors.append(f"output {out_name} is missing")
            continue
        c = compare_arrays(got[out_name], w, tol)
        max_err = max(max_err, c.max_abs_error) if np.isfinite(c.max_abs_error) else max_err
        if not c.ok:
            errors.append(f"output {out_name}: {c.message}")
    details = {"nodes": nodes, "node_count": sum(nodes.values())}
    if errors:
        return Outcome(Result.FAIL, "; ".join(errors) + f" (glow compare zoo:{name} --backend "
                       f"{ctx.backend_name} names the first diverging node)", max_err, tol_text, details)
    return Outcome(Result.PASS, "", max_err, tol_text, details)


def _elem_of(a: np.ndarray):  # type: ignore[no-untyped-def]
    from glow_core.ir.types import ElemKind

    return ElemKind.from_dtype(a.dtype)


def _run_model(name: str, ctx: Context) -> Outcome:
    return run_model_case(ctx, name)


def model_cases(level: Level) -> list[Case]:
    """One case per light zoo model shipped by the installed onnx (level core: :data:`CORE_MODELS`)."""
    cases = []
    for name in sorted(zoo.MODELS):
        if not (zoo.zoo_dir() / f"light_{zoo.MODELS[name]}.onnx").is_file():
            continue
        lvl = Level.CORE if name in CORE_MODELS else Level.FULL
        if level is Level.CORE and lvl is Level.FULL:
            continue
        cases.append(Case(f"model/{name}", "model", lvl, True, functools.partial(_run_model, name),
                          description=f"zoo:{name} with seeded random weights"))
    return cases


__all__ = ["CORE_MODELS", "model_cases", "run_model_case", "with_random_weights"]
