"""Which node diverges first? A per-value numerical diff of one model on two backends.

:func:`first_divergence` imports the model once per backend, makes every
value of the imported graph an output of its function (so each survives
optimization and lowering under its name, whatever the backend does with the
nodes around it), runs both on the same inputs and compares the values in
topological order. The first one beyond tolerance names the node that
diverges, with both values' statistics. ``glow compare`` prints this report.

Exposing every value keeps some optimizations (fusions) from firing, so the
model is also run as is on both backends; when its outputs differ although
every exposed value agrees, the report says the divergence comes from an
optimization the exposed run did not make.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from glow_core.ir.graph import Function
from glow_tools.testing import ArrayStats, Comparison, Tolerance, array_stats, compare_arrays, run_function

if TYPE_CHECKING:
    import onnx

#: the default tolerance of a model's intermediate values: relative to each tensor's largest magnitude
DEFAULT_TOLERANCE = Tolerance(rtol=1e-3, atol=1e-6, scaled=True)
#: prefix of the output names given to exposed values
PREFIX = "glow.value."


@dataclass(frozen=True)
class ValueDiff:
    """One graph value compared on both backends."""

    position: int  # of its node, in topological order of the imported graph
    node: str
    kind: str
    origin: str  # the ONNX node it came from
    value: str
    type: str
    comparison: Comparison
    got: ArrayStats
    want: ArrayStats

    def where(self) -> str:
        origin = f", ONNX node '{self.origin}'" if self.origin and self.origin != self.node else ""
        return f"node #{self.position} '{self.node}' ({self.kind}{origin}), value %{self.value}: {self.type}"


@dataclass
class DivergenceReport:
    backend: str
    reference: str
    tolerance: Tolerance
    values: list[ValueDiff] = field(default_factory=list)
    outputs: list[tuple[str, Comparison]] = field(default_factory=list)
    feeds: dict[str, str] = field(default_factory=dict)

    @property
    def first(self) -> ValueDiff | None:
        """The first value (in topological order) beyond tolerance."""
        return next((v for v in self.values if not v.comparison.ok), None)

    @property
    def outputs_agree(self) -> bool:
        return all(c.ok for _, c in self.outputs)

    @property
    def diverges(self) -> bool:
        return self.first is not None or not self.outputs_agree

    def lines(self) -> list[str]:
        """The human-readable report."""
        out = [(f"compared {len(self.values)} values of the graph on '{self.backend}' and the reference "
                f"'{self.reference}' ({self.tolerance.describe()})")]
        first = self.first
        if first is not None:
            c = first.comparison
            out += [f"first divergence: {first.where()}",
                    f"  {self.backend + ':':<12} {first.got.format()}",
                    f"  {self.reference + ':':<12} {first.want.format()}",
                    f"  {c.message}"]
            later = sum(1 for v in self.values if not v.comparison.ok) - 1
            if later:
                out.append(f"  ({later} later value(s) diverge too, downstream of it or independently)")
        elif not self.outputs_agree:
            out.append("every graph value agrees when exposed, but the model's outputs differ when it runs as is: "
                       "the divergence comes from an optimization (a fusion) that exposing values prevents")
        else:
            out.append("no divergence: every value agrees")
        for name, c in self.outputs:
            out.append(f"model output {name}: " + (f"agrees (max abs error {c.max_abs_error:.3g})" if c.ok
                                                   else f"differs: {c.message}"))
        return out


def expose_all_values(fn: Function) -> list[tuple[int, str, str, str, str, str]]:
    """Make every node result an output of ``fn`` (named :data:`PREFIX` + value name).

    Returns (position, node name, kind, origin, value name, output name) per
    value, in topological order.
    """
    taken = {n for n, _ in fn.outputs}
    exposed = []
    for pos, node in enumerate(list(fn.nodes)):
        for o in node.outputs:
            name = PREFIX + o.name
            if name in taken:
                continue
            taken.add(name)
            fn.set_output(name, o)
            exposed.append((pos, node.name, node.kind.name, node.origin, o.name, name))
    return exposed


def _import(model: str | os.PathLike[str] | onnx.ModelProto,
            input_shapes: Mapping[str, Sequence[int]] | None) -> Function:
    from glow_core import zoo
    from glow_core.importer import import_model

    ref = zoo.resolve_model(model) if isinstance(model, str) else model
    return import_model(ref, input_shapes)


def first_divergence(model: str | os.PathLike[str] | onnx.ModelProto, backend: str, reference: str = "interpreter",
                     *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                     feeds: Mapping[str, np.ndarray] | None = None, seed: int = 0,
                     tolerance: Tolerance | None = None) -> DivergenceReport:
    """Run ``model`` on ``backend`` and ``reference``; compare every graph value in topological order."""
    from glow_core import zoo
    from glow_core.plugin_host import get_backend

    tol = tolerance or DEFAULT_TOLERANCE
    be, ref = get_backend(backend), get_backend(reference)  # fail fast on unknown names
    fn_be, fn_ref = _import(model, input_shapes), _import(model, input_shapes)
    types = {p.name: p.type for p in fn_ref.inputs}
    given = dict(feeds) if feeds is not None else zoo.random_feeds(types, seed)
    report = DivergenceReport(backend, reference, tol,
                              feeds={n: ("given" if feeds is not None else f"random (seed {seed})") for n in types})
    # as is: the model's own outputs
    plain_be, plain_ref = _import(model, input_shapes), _import(model, input_shapes)
    out_be = run_function(plain_be, be, given)
    out_ref = run_function(plain_ref, ref, given)
    for name, _ in plain_ref.outputs:
        report.outputs.append((name, compare_arrays(out_be[name], out_ref[name], tol)))
    # every value exposed
    exposed = expose_all_values(fn_be)
    expose_all_values(fn_ref)
    got_all = run_function(fn_be, be, given)
    want_all = run_function(fn_ref, ref, given)
    value_types: dict[str, Any] = {n: v.type for n, v in fn_ref.outputs}
    for pos, node, kind, origin, value, out_name in exposed:
        got, want = got_all[out_name], want_all[out_name]
        report.values.append(ValueDiff(pos, node, kind, origin, value, str(value_types[out_name]),
                                       compare_arrays(got, want, tol), array_stats(got), array_stats(want)))
    return report


__all__ = ["DEFAULT_TOLERANCE", "DivergenceReport", "ValueDiff", "expose_all_values", "first_divergence"]
