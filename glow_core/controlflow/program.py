"""Programs, stages and the executable of a model split at run-time control flow.

- A :class:`Stage` is one compile of a graph for one input signature: the function of the nodes
  before its first run-time control-flow node (compiled by the backend), the node, and a
  :class:`Program` for the nodes after it.
- A :class:`Program` is a graph run with feeds by name (the rest of a graph, an If branch, a loop
  body): it builds a model from its template with the inputs' actual types, compiles a
  :class:`Stage` per input signature (LRU, :data:`CACHE_SIZE`) and binds an input as a compile-time
  constant when it decides shapes (the compile is then cached per its value too).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from glow_core import budget
from glow_core.pipeline import CompiledNetwork, CompileStats, compile_function
from glow_core.controlflow.cache import BindingCache
from glow_core.pipeline.specialize import Specializations
from glow_core.controlflow.hostops import CHECKS, HOST_OPS, WARMERS
from glow_core.controlflow.hostvalues import HostOpt, HostSeq, coerce, declare, from_flat, hoist_appends, to_user
from glow_core.errors import GlowError, ModelError, UnsupportedError
from glow_core.importer import OptShape, SeqShape, Split, import_split
from glow_core.importer.subgraphs import captured_names, node_uses
from glow_core.ir.graph import Function
from glow_sdk.backend import Backend, CompiledFunction

#: compiled stages kept per program (input signatures; loop bodies whose shapes change every iteration
#: recompile once per shape)
CACHE_SIZE = 16


@dataclass
class CompileTarget:
    """What programs compile for: the backend, the compile options and the memory budget (not a machine
    target: the backend decides that), and ``weights``: the initializers of a model stripped of them
    (``importer.weights.split_weights``), by name, which every stage and program of it imports instead of the
    (empty) initializers its templates carry."""

    backend: Backend
    threads: int | None = None
    debug: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    budget: budget.Budget | None = None
    weights: dict[str, np.ndarray] = field(default_factory=dict)


def _onnx_type(a: np.ndarray, name: str) -> int:
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(a.dtype))
    except (KeyError, ValueError, TypeError):
        raise UnsupportedError(f"value '{name}' has dtype {a.dtype}, which cannot cross a control-flow "
                               "boundary") from None


def _as_initializer(name: str, value: np.ndarray, originals: Mapping[str, onnx.TensorProto]) -> onnx.TensorProto:
    if name in originals:
        return originals[name]
    try:
        return numpy_helper.from_array(np.asarray(value), name)
    except (TypeError, ValueError, KeyError) as e:
        raise UnsupportedError(f"constant '{name}' ({np.asarray(value).dtype}) cannot cross a control-flow "
                               f"boundary: {e}") from None


def _template(parent: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], outputs: Sequence[onnx.ValueInfoProto],
              initializers: Sequence[onnx.TensorProto], name: str) -> onnx.ModelProto:
    """A model with ``parent``'s opsets and functions, the given nodes and outputs, and no inputs yet."""
    m = onnx.ModelProto(ir_version=parent.ir_version, producer_name="glow-controlflow")
    m.opset_import.extend(parent.opset_import)
    m.functions.extend(parent.functions)
    g = m.graph
    g.name = name
    g.node.extend(nodes)
    g.initializer.extend(initializers)
    g.output.extend(outputs)  # declared types are checked, shapes (maybe symbolic, -1 or absent) computed
    return m


Signature = tuple[Any, ...]


class Program:
    """A graph (template model without inputs) run with feeds by name; compiled per input signature.

    Feeds are arrays, or sequences and optionals held on the host (:mod:`.hostvalues`); ``declared``:
    the declared types of the graph's formal inputs (a subgraph's), which the feeds are coerced to.
    """

    def __init__(self, template: onnx.ModelProto, input_names: Sequence[str], target: CompileTarget, name: str,
                 declared: Mapping[str, onnx.TypeProto] | None = None) -> None:
        self.declared = dict(declared or {})
        #: SequenceInserts into a carried sequence, run on the host after the compiled pieces
        self.template, self.appends = hoist_appends(template, self.declared)
        template = self.template
        self.input_names = list(input_names)
        host_only = {a.seq for a in self.appends}
        #: the inputs the compiled pieces take
        self.piece_inputs = [n for n in self.input_names if n not in host_only]
        self.output_names = [o.name for o in template.graph.output]
        self.target = target
        self.name = name
        #: the stages compiled, per input signature (and value of the inputs that decide shapes)
        self.compiled: Specializations[Stage] = BindingCache(CACHE_SIZE)
        inputs = set(self.piece_inputs)
        #: a program whose outputs are all among its inputs runs nothing
        self.passthrough = not template.graph.node and all(n in inputs for n in self.output_names)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise ModelError(f"{self.name}: value(s) {', '.join(missing)} are not available here")
        if self.passthrough:
            outs = {n: coerce(n, feeds[n], self.declared.get(n)) for n in self.output_names}
        else:
            values, signatures, flat = self._flatten(feeds)
            outs = self._stage(values, signatures, flat).run(flat)
        for a in self.appends:
            outs[a.out] = a.run(coerce(a.seq, feeds[a.seq], self.declared.get(a.seq)), outs)
        return outs

    def _flatten(self, feeds: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Signature], dict[str, np.ndarray]]:
        """(the feeds as declared, their signatures, the tensors the compiled pieces take)."""
        values: dict[str, Any] = {}
        signatures: dict[str, Signature] = {}
        flat: dict[str, np.ndarray] = {}
        for n in self.piece_inputs:
            v = coerce(n, feeds[n], self.declared.get(n))
            if not isinstance(v, (HostSeq, HostOpt)):
                v = np.asarray(v)
                signatures[n], flat[n] = (v.shape, v.dtype.str), v
            else:
                vi, sig, items = declare(n, v)
                signatures[n] = (sig, vi.type.SerializeToString())
                flat.update(items)
            values[n] = v
        return values, signatures, flat

    def stage_for(self, feeds: Mapping[str, Any]) -> "Stage":
        return self._stage(*self._flatten(feeds))

    def _stage(self, values: Mapping[str, Any], signatures: Mapping[str, Signature],
               flat: Mapping[str, np.ndarray]) -> "Stage":
        shapes = {n: s[0] for n, s in signatures.items() if isinstance(s[0], (SeqShape, OptShape))}

        def build(bound: list[str]) -> Stage:
            return Stage.build(self.model_for(values), shapes, {n: flat[n] for n in bound},
                               self.target, self.name, checked=True, template=self.template)

        return self.compiled.get(tuple(signatures.items()), flat, build)

    def model_for(self, feeds: Mapping[str, Any]) -> onnx.ModelProto:
        """The template with its inputs declared as the feeds' types (what the importer compiles)."""
        m = onnx.ModelProto()
        m.CopyFrom(self.template)
        for n in self.piece_inputs:
            v = feeds[n]
            if isinstance(v, (HostSeq, HostOpt)):
                m.graph.input.append(declare(n, v)[0])
            else:
                a = np.asarray(v)
                m.graph.input.append(onnx.helper.make_tensor_value_info(n, _onnx_type(a, n), list(a.shape)))
        return m


class Stage:
    """One compile of a graph: the compiled nodes before its first run-time control-flow node, the
    node (run on the host) and a program for the rest."""

    def __init__(self, model: onnx.ModelProto, fn: Function, net: CompiledNetwork | None, split: Split | None,
                 input_types: Mapping[str, Any], target: CompileTarget, name: str) -> None:
        self.model = model
        self.fn = fn
        self.net = net
        self.split = split
        self.input_types = dict(input_types)
        self.target = target
        self.name = name
        self.node: onnx.NodeProto | None = None
        self.rest: Program | None = None
        self._subprograms: dict[tuple[str, str], Program] = {}
        self._lock = threading.Lock()
        #: this stage's own compile (import, optimize, backend); see :meth:`total_stats`
        self.stats = CompileStats()
        #: the control-flow node's attributes (subgraphs, axes, ...), read once rather than every run
        self.node_attrs: dict[str, Any] = {}
        if split is not None:
            self.node = model.graph.node[split.index]
            self.node_attrs = {a.name: onnx.helper.get_attribute_value(a) for a in self.node.attribute}
            CHECKS[self.node.op_type](self.node, self.node_attrs, self.opset_of(self.node))
            self.rest = self._rest_program()

    @staticmethod
    def build(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None,
              bind: Mapping[str, np.ndarray] | None, target: CompileTarget, name: str, checked: bool = False,
              template: onnx.ModelProto | None = None) -> "Stage":
        """Import ``model`` up to its first run-time control-flow node and compile that part.

        ``template``: the same graph without declared inputs, which the stage keeps instead of
        ``model`` (a program's per-signature copy need not live as long as the stage).
        """
        stats = CompileStats()
        with budget.using(target.budget or budget.current()):
            t0 = time.perf_counter()
            fn, split = import_split(model, shapes, bind, checked, target.weights)
            stats.import_s = time.perf_counter() - t0
            input_types = {p.name: p.type for p in fn.inputs}
            net = None
            if split is None or split.computed:
                net = compile_function(fn, target.backend, stats, threads=target.threads, debug=target.debug,
                                       options=target.options)
            stage = Stage(template if template is not None else model, fn, net, split, input_types, target, name)
            stage.stats = stats
            stage.warm()
        return stage

    def warm(self) -> None:
        """Compile the control-flow node's branches or body now, for the types its operands will have.

        Zeros of those types stand in for the values. A subgraph that does not compile for them is
        left to its first run (which reports the error if that branch is taken).
        """
        node, split = self.node, self.split
        if node is None or split is None:
            return
        env: dict[str, np.ndarray] = dict(split.constants)
        for name, placeholder in split.inputs.items():
            t = self.input_types[placeholder]
            env[name] = np.zeros(t.shape, t.dtype)
        if self.net is not None:
            for name, value in self.net.function.outputs:
                env[name] = np.zeros(value.type.shape, value.type.dtype)
        self._rebuild(env)
        try:
            WARMERS[node.op_type](self, node, env)
        except GlowError:
            pass

    # -- programs for the rest of the graph and for subgraphs ---------------------------------------
    def _originals(self) -> dict[str, onnx.TensorProto]:
        return {t.name: t for t in self.model.graph.initializer}

    def _program(self, nodes: Sequence[onnx.NodeProto], outputs: Sequence[onnx.ValueInfoProto],
                 own: Sequence[onnx.TensorProto], formal: Sequence[onnx.ValueInfoProto], needed: Sequence[str],
                 name: str) -> Program:
        """A program of ``nodes``; ``needed`` names come from here: constants become initializers."""
        split = self.split
        assert split is not None
        originals = self._originals()
        inits = list(own)
        inputs = [vi.name for vi in formal]
        for n in needed:
            if n in split.constants:
                inits.append(_as_initializer(n, split.constants[n], originals))
            elif n not in inputs:
                inputs.append(n)
        return Program(_template(self.model, nodes, outputs, inits, name), inputs, self.target, name,
                       {vi.name: vi.type for vi in formal})

    def _rest_program(self) -> Program:
        split = self.split
        assert split is not None
        graph = self.model.graph
        nodes = graph.node[split.index + 1:]
        produced = {o for node in nodes for o in node.output if o}
        needed: list[str] = []
        for node in nodes:
            needed.extend(n for n in node_uses(node) if n not in needed and n not in produced)
        needed.extend(o.name for o in graph.output if o.name not in needed and o.name not in produced)
        return self._program(nodes, graph.output, [], [], needed, f"{self.name}/after {self.node_label()}")

    def subprogram(self, attr: str, graph: onnx.GraphProto) -> Program:
        """The program of one subgraph of the control-flow node (built once per stage)."""
        key = (attr, graph.name)
        with self._lock:
            prog = self._subprograms.get(key)
            if prog is None:
                formal = {i.name for i in graph.input}
                prog = self._program(graph.node, graph.output, graph.initializer, graph.input,
                                     [n for n in captured_names(graph) if n not in formal],
                                     f"{self.name}/{self.node_label()}.{attr}")
                self._subprograms[key] = prog
        return prog

    def total_stats(self) -> CompileStats:
        """This stage's compile plus every stage compiled so far under it (subgraphs, the rest)."""
        total = CompileStats(import_s=self.stats.import_s, optimize_s=self.stats.optimize_s,
                             backend_compile_s=self.stats.backend_compile_s,
                             nodes_by_kind=dict(self.stats.nodes_by_kind))
        progs = list(self._subprograms.values()) + ([self.rest] if self.rest is not None else [])
        for prog in progs:
            for st in prog.compiled.entries():
                sub = st.total_stats()
                total.import_s += sub.import_s
                total.optimize_s += sub.optimize_s
                total.backend_compile_s += sub.backend_compile_s
                for kind, n in sub.nodes_by_kind.items():
                    total.nodes_by_kind[kind] = total.nodes_by_kind.get(kind, 0) + n
        return total

    def node_label(self) -> str:
        node = self.node
        return "" if node is None else f"{node.op_type} '{node.name or node.output[0]}'"

    def opset_of(self, node: onnx.NodeProto) -> int:
        """The opset version the model imports for ``node``'s domain."""
        domains = ("", "ai.onnx") if node.domain in ("", "ai.onnx") else (node.domain,)
        return max((o.version for o in self.model.opset_import if o.domain in domains), default=0)

    # -- running ------------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Run with the flattened feeds; returns the outputs (sequences and optionals as host values)."""
        env: dict[str, Any] = {}
        if self.net is not None:
            env.update(self.net.run({n: feeds[n] for n in self.net.input_types}))
        split = self.split
        if split is None:
            declared = {o.name: o.type for o in self.model.graph.output}
            for name, how in self.fn.structure.items():
                env[name] = from_flat(name, how, env, declared.get(name))
            return env
        for name, placeholder in split.inputs.items():
            env[name] = feeds[placeholder]
        env.update(split.constants)
        self._rebuild(env)
        node = self.node
        assert node is not None and self.rest is not None
        HOST_OPS[node.op_type](self, node, env)
        return self.rest.run(env)

    def _rebuild(self, env: dict[str, Any]) -> None:
        """The sequence and optional values the rest needs, from their flattened tensors in ``env``."""
        split = self.split
        assert split is not None
        for name, (how, tp) in split.structured.items():
            env[name] = from_flat(name, how, env, tp)


class StagedExecutable(CompiledFunction):
    """The executable of a :class:`CompiledNetwork` whose model runs control flow on the host (the declared
    members of ``CompiledFunction`` keep their defaults: no one memory plan, LIR or profile of its own)."""

    def __init__(self, stage: Stage) -> None:
        super().__init__(stage.fn)
        self.stage = stage

    def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The outputs; a sequence as a list of arrays, an empty optional as None."""
        return {n: to_user(v) for n, v in self.stage.run(feeds).items()}

    def close(self) -> None:
        """Nothing to release here (``CompiledFunction.close``): the segments' executables are plain ones."""


def compile_staged(proto: onnx.ModelProto, target: CompileTarget, shapes: Mapping[str, Sequence[int]] | None,
                   bind: Mapping[str, np.ndarray] | None) -> CompiledNetwork:
    """Compile a model with control flow: a plain network when every control-flow node folds."""
    stage = Stage.build(proto, shapes, bind, target, proto.graph.name or "main")
    if stage.split is None and stage.net is not None:
        return stage.net
    # the stats count every function compiled so far: the first segment and the subgraphs compiled ahead
    net = CompiledNetwork(stage.fn, StagedExecutable(stage), target.backend, stage.total_stats())
    net.input_types = dict(stage.input_types)
    net.output_names = [o.name for o in proto.graph.output]
    return net
