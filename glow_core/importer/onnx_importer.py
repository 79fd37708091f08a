"""ONNX model -> graph IR function.

In: a path or an ``onnx.ModelProto`` (opset 7 up to the installed onnx's),
user-fixed input shapes and optionally inputs bound to constant values.
Out: a verified :class:`~glow_core.ir.graph.Function` whose inputs are the
model's non-initializer inputs and whose outputs are the model's outputs.

Steps: load (refusing external data that escapes the model's directory: importer/external.py),
onnx checker, fix input shapes, onnx shape inference, check every op has an
import rule (all unsupported ops are reported at once), then run each node's
rule in order, folding constant subgraphs as it goes.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from glow_core import budget
from glow_core.errors import (
    DynamicValueError,
    GlowWarning,
    RuntimeControlFlowError,
    GlowError,
    GlowTypeError,
    GlowVerifyError,
    ImportShapeError,
    InputError,
    ModelError,
    UnsupportedError,
    UnsupportedOpsError,
)
from glow_core.importer.precheck import check_axes, check_declared, check_flags, check_strings, inference_departure
from glow_core.importer.context import (ONNX_ELEMS, NodeContext, deferred_cast, fold_node, import_rules, onnx_elem,
                                        placeholders_behind)
from glow_core.importer.external import load_external_data
from glow_core.importer.liveness import Liveness
from glow_core.importer.qdq import fold_qdq
from glow_core.importer.schema_types import check_node_types, check_result_types
from glow_core.importer.structured import (OptShape, OptValue, RaggedValue, SeqShape, SeqValue, describe, flat_outputs,
                                           structured_input, type_proto_of)
from glow_core.importer.subgraphs import all_nodes, node_uses
from glow_core.importer.symbols import ModelSymbols, dims_of
from glow_core.importer.weights import LEAN_MIN_ELEMENTS, read_initializer
from glow_core.ir.graph import Constant, Function, NodeOutput, Placeholder, Value, infer_types
from glow_core.ir.kinds import get_kind
from glow_core.ir.types import TensorType

MIN_OPSET = 7
#: ops whose onnx shape inference disagrees with the spec and onnxruntime in some configurations
#: (pooling with ceil_mode when the last window would start in the end padding): not cross-checked
INFERENCE_UNRELIABLE = frozenset({"MaxPool", "AveragePool", "LpPool"})
DEFAULT_DOMAINS = ("", "ai.onnx")


#: (LEAN_MIN_ELEMENTS, from importer/weights.py) initializers with more elements are left out of the copy the
#: checker and shape inference see (they stay declared, as graph inputs): serializing the weights dominated
#: cached compiles


def lean_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose large top-level initializers are declared as graph inputs instead.

    Small initializers stay, so that shape inference can still propagate shape-deciding constants.
    The onnx checker and shape inference both serialize the model they are given; on this copy
    that costs kilobytes instead of the whole weight payload.
    """
    graph = proto.graph
    lean = onnx.ModelProto(ir_version=proto.ir_version, producer_name=proto.producer_name,
                           producer_version=proto.producer_version, domain=proto.domain,
                           model_version=proto.model_version)
    lean.opset_import.extend(proto.opset_import)
    lean.metadata_props.extend(proto.metadata_props)
    lean.functions.extend(proto.functions)
    g = lean.graph
    g.name = graph.name
    g.node.extend(graph.node)
    g.input.extend(graph.input)
    g.output.extend(graph.output)
    g.value_info.extend(graph.value_info)
    g.sparse_initializer.extend(graph.sparse_initializer)
    declared = {vi.name for vi in graph.input}
    for t in graph.initializer:
        if 0 <= math.prod(t.dims) <= LEAN_MIN_ELEMENTS:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return lean


def load_model(model: str | os.PathLike[str] | onnx.ModelProto,
               data: bytes | None = None) -> tuple[onnx.ModelProto, Path | None]:
    """Read a model file (external data only from inside its own directory); ``data``: the file's bytes,
    when the caller has read them already (the program cache hashes them), parsed instead of the file."""
    if isinstance(model, onnx.ModelProto):
        external = [t.name for t in _all_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
        if external:  # with no model directory, onnx would read them relative to the working directory
            raise ModelError(
                f"tensor(s) {', '.join(external[:3])}{', ...' if len(external) > 3 else ''} keep their data in "
                "external files, but the model was given in memory: there is no model directory to read them from",
                hint="pass the path of the .onnx file, or load it with onnx.load(path), which reads external data",
            )
        return model, None
    path = Path(model)
    if not path.is_file():
        raise ModelError(f"model file '{path}' does not exist", hint="check the path")
    try:
        proto = onnx.load(str(path), load_external_data=False) if data is None else onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError, onnx.onnx_cpp2py_export.checker.ValidationError) as e:  # type: ignore[attr-defined]
        raise ModelError(f"cannot parse '{path}': not a valid ONNX model or the file is truncated ({e})") from None
    except Exception as e:  # noqa: BLE001  (protobuf raises assorted errors on garbage)
        raise ModelError(f"cannot parse '{path}': {type(e).__name__}: {e}") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelError(f"'{path}' holds no graph: not an ONNX model or the file is truncated")
    load_external_data(_all_tensors(proto.graph), path.parent.resolve())  # (importer/external.py)
    return proto, path


def _all_tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Initializers and tensor attributes of ``graph`` and of its subgraphs."""
    out = list(graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                out.append(a.t)
            elif a.type == onnx.AttributeProto.GRAPH:
                out.extend(_all_tensors(a.g))
    return out


def _fixed(d: onnx.TensorShapeProto.Dimension) -> bool:
    """A fixed dimension: a dim_value >= 0 (exporters write -1 for a dynamic one, like a dim_param)."""
    return d.HasField("dim_value") and d.dim_value >= 0


def parse_shape_spec(spec: str) -> tuple[str, tuple[int, ...]]:
    """``name=1,3,224,224`` -> (name, shape)."""
    name, sep, dims = spec.rpartition("=")
    if not sep or not name:
        raise ImportShapeError(f"input shape '{spec}' is not of the form name=d1,d2,...")
    try:
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip() != "")
    except ValueError:
        raise ImportShapeError(f"input shape '{spec}': dimensions must be integers") from None
    if any(d < 0 for d in shape):
        raise ImportShapeError(f"input shape '{spec}': dimensions must be >= 0")
    return name, shape


@dataclass
class Split:
    """Where a split import stopped: at top-level node ``index``, a control-flow node run at run time.

    What the rest of the graph needs is split three ways: ``computed`` values are outputs of the
    imported function, ``inputs`` are model inputs passed through (by input name) and ``constants``
    are known at compile time.
    """

    index: int
    computed: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    #: sequence and optional values (by ONNX name): (how they rebuild, their ONNX type or None); their
    #: flattened tensors (importer/structured.py) are among the three above
    structured: dict[str, tuple[Any, Any]] = field(default_factory=dict)


class OnnxImporter:
    def __init__(
        self,
        proto: onnx.ModelProto,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        bind: Mapping[str, np.ndarray] | None = None,
        name: str = "main",
        split: bool = False,
        checked: bool = False,
        weights: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.proto = proto
        #: initializers already read (shared arrays, importer/weights.py), used instead of the model's bytes
        self.weights = dict(weights or {})
        self.input_shapes = {k: v if isinstance(v, (SeqShape, OptShape)) else tuple(int(d) for d in v)
                             for k, v in (input_shapes or {}).items()}
        #: symbol -> size or bound (``dims=``, ``--dim``), applied to every input that names the symbol
        self.dims = dims_of(input_shapes)
        self.bind = dict(bind or {})
        self.fn = Function(name)
        self.values: dict[str, Value] = {}
        self.opsets: dict[str, int] = {}
        self.budget = budget.current()
        #: bytes of constants (initializers, folded and generated values) allocated so far
        self.tally = budget.Tally(self.budget)
        #: stop at the first control-flow node that must run at run time instead of raising
        self.split_control_flow = split
        #: where the import stopped (see :class:`Split`), or None when the whole graph was imported
        self.split: Split | None = None
        #: the model is a part of a model the onnx checker already accepted (a subgraph): not checked again
        self.checked = checked

    # -- values --------------------------------------------------------------
    def value(self, onnx_name: str, where: str) -> Value:
        try:
            return self.values[onnx_name]
        except KeyError:
            raise ModelError(f"{where}: operand '{onnx_name}' is not produced by any earlier node or input") from None

    def placeholders_behind(self, v: Value) -> set[str]:
        return placeholders_behind(v)

    def emit(self, kind: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any], name: str,
             origin: str) -> list[Value]:
        spec = get_kind(kind)
        where = f"{kind} for ONNX node '{origin}'"
        spec.check_arity(len(inputs), where)
        norm = spec.normalize_attrs(attrs, where)
        present = [v for v in inputs if v is not None]
        if present and all(isinstance(v, Constant) for v in present) and not deferred_cast(kind, present, norm):
            out_types = infer_types(spec, [v.type if v is not None else None for v in inputs], norm, where)
            for t in out_types:  # before the fold allocates anything
                self.tally.add(t.shape, t.elem.itemsize, where, "folded constant")
            folded = fold_node(self.fn, kind, inputs, norm, out_types, name)
            if folded is not None:
                return folded
        node = self.fn.create(kind, inputs, norm, name=name, origin=origin)
        for out in node.outputs:
            self.budget.check_tensor(out.type.shape, out.type.elem.itemsize, where, "output")
        return list(node.outputs)

    def _rank_of(self, onnx_name: str) -> int | None:
        v = self.values.get(onnx_name)
        return len(v.type.shape) if isinstance(v, Value) else None

    # -- the import ----------------------------------------------------------
    def run(self) -> Function:
        proto = self.proto = fold_qdq(self.proto)  # pre-quantized (QDQ) products onto the integer operators
        self.opsets = {o.domain: o.version for o in proto.opset_import}
        versions: dict[str, set[int]] = {}
        for o in proto.opset_import:
            versions.setdefault("" if o.domain == "ai.onnx" else o.domain, set()).add(o.version)
        twice = {d: sorted(v) for d, v in versions.items() if len(v) > 1}
        if twice:  # which version would each node follow? runtimes disagree: refuse
            d, v = next(iter(twice.items()))
            raise ModelError(f"the model imports opset domain {d or 'ai.onnx'!r} more than once, with versions {v}",
                             hint="the model file is corrupt: keep one opset_import per domain")
        opset = max(self.opsets.get("", 0), self.opsets.get("ai.onnx", 0))
        if opset and opset < MIN_OPSET:
            self._check_old_opset(proto.graph, opset)
            # every node's schema is the opset-7 one: import with opset-7 rules
            self.opsets[""] = MIN_OPSET
            self.opsets.pop("ai.onnx", None)
        if opset > onnx.defs.onnx_opset_version():
            raise UnsupportedError(f"model uses opset {opset}, newer than the installed onnx package supports "
                                   f"({onnx.defs.onnx_opset_version()})", hint="upgrade onnx")
        graph = proto.graph
        check_strings(proto)
        for t in graph.initializer:  # dims first: an int64 product of hostile dims wraps around
            self.budget.check_tensor(t.dims, 1, f"initializer '{t.name}'", "initializer")
        self._check_ops(graph)
        lean = lean_copy(proto)
        if not self.checked:
            self._check_model(lean)
        inits = {t.name: t for t in graph.initializer}
        for t in graph.initializer:
            self.values[t.name] = self._constant_from(t)
        self._add_inputs(graph, inits)
        # glow's own rules check every node first: onnx's native shape inference only sees a checked model
        imported = self._import_nodes(graph)
        for node in imported:
            check_axes(node, self._rank_of, f"ONNX node '{node.name or node.output[0]}' ({node.op_type})")
        inferred = self._infer_shapes(lean)
        for node in imported:
            self._cross_check(node, inferred)
        if self.split is not None:
            self._split_outputs(graph)
        else:
            for out in graph.output:
                v = self.value(out.name, f"graph output '{out.name}'")
                if isinstance(v, Value):
                    check_declared(out, v.type)
                else:  # a sequence or an optional: flattened into tensors (glow_core/importer/structured.py)
                    self.fn.structure[out.name] = describe(v)
                for flat, x in flat_outputs(out.name, v):
                    self.fn.set_output(flat, x)
        self.fn.erase_unused_constants()
        self.fn.verify()
        return self.fn

    def _import_nodes(self, graph: onnx.GraphProto) -> list[onnx.NodeProto]:
        """Import the nodes in order, freeing constants after their last reader (importer/liveness.py); in
        split mode stop at the first run-time control-flow node."""
        liveness = Liveness(graph, self.values, self.fn, self.tally)
        for k, node in enumerate(graph.node):
            check_flags(node, f"ONNX node '{node.name or node.output[0]}' ({node.op_type})")
            try:
                self._import_node(node)
            except RuntimeControlFlowError:
                if not self.split_control_flow:
                    raise
                self.split = Split(k)
                return list(graph.node[:k])
            liveness.after(k, node, self.values)
        return list(graph.node)

    def _split_outputs(self, graph: onnx.GraphProto) -> None:
        """Make every value the rest of the graph needs available: a function output, an input or a constant."""
        split = self.split
        assert split is not None
        needed: list[str] = []
        for node in graph.node[split.index:]:
            needed.extend(n for n in node_uses(node) if n not in needed)
        needed.extend(o.name for o in graph.output if o.name not in needed)
        for name in needed:
            v = self.values.get(name)
            if isinstance(v, (SeqValue, OptValue, RaggedValue)):
                # flattened into tensors; the host rebuilds the value (glow_core/controlflow/hostvalues.py)
                split.structured[name] = (describe(v), type_proto_of(v))
                for flat, x in flat_outputs(name, v):
                    self._split_one(flat, x)
            else:
                self._split_one(name, v)

    def _split_one(self, name: str, v: Any) -> None:
        split = self.split
        assert split is not None
        if isinstance(v, Constant):
            split.constants[name] = v.payload
        elif isinstance(v, Placeholder):
            split.inputs[name] = v.name
        elif isinstance(v, NodeOutput):
            split.computed.append(name)
            self.fn.set_output(name, v)

    def import_subgraph(self, graph: onnx.GraphProto, where: str) -> list[Value]:
        """Import a subgraph in place (a folded If's branch); returns the values of its outputs.

        The subgraph sees every value of the enclosing scopes; its own names do not leak out.
        """
        saved = dict(self.values)
        try:
            for t in graph.initializer:
                self.values[t.name] = self._constant_from(t)
            for node in graph.node:
                check_flags(node, f"{where}: ONNX node '{node.name or node.output[0]}' ({node.op_type})")
                self._import_node(node)
            return [self.value(o.name, f"{where}: output '{o.name}'") for o in graph.output]
        finally:
            self.values = saved

    def _check_model(self, proto: onnx.ModelProto) -> None:
        try:
            onnx.checker.check_model(proto)
        except onnx.checker.ValidationError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else "invalid model"
            raise ModelError(f"the ONNX checker rejected the model: {first}") from None
        except ValueError as e:
            # models over 2 GB cannot be checked in memory: skip the checker for them
            if "2GB" not in str(e):
                raise ModelError(f"the ONNX checker rejected the model: {e}") from None

    def _check_old_opset(self, graph: onnx.GraphProto, opset: int) -> None:
        """Accept an opset below 7 only when every node's schema is the one still in force at opset 7."""
        changed = set()
        for n in graph.node:
            if n.domain not in DEFAULT_DOMAINS:
                continue
            try:
                old = onnx.defs.get_schema(n.op_type, opset, "").since_version
                new = onnx.defs.get_schema(n.op_type, MIN_OPSET, "").since_version
            except onnx.defs.SchemaError:
                changed.add(n.op_type)
                continue
            if old != new:
                changed.add(n.op_type)
        if changed:
            raise UnsupportedError(
                f"model uses opset {opset}; opsets {MIN_OPSET} and later are supported, and "
                f"{', '.join(sorted(changed))} changed since opset {opset}",
                hint="convert it with onnx.version_converter",
            )

    def _infer_shapes(self, fixed: onnx.ModelProto) -> dict[str, TensorType]:
        """Run onnx shape inference with the input shapes fixed; static results by value name.

        ``fixed`` is this importer's own copy of the model (see :func:`lean_copy`): it is modified here.
        """
        del fixed.graph.value_info[:]
        for vi in fixed.graph.output:  # inference computes them: a wrong declaration must not be echoed back
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
        for vi in fixed.graph.input:
            v = self.values.get(vi.name)
            if v is not None and vi.type.HasField("tensor_type"):
                shape = vi.type.tensor_type.shape
                del shape.dim[:]
                for d in v.type.shape:
                    shape.dim.add().dim_value = d
        try:
            done = onnx.shape_inference.infer_shapes(fixed, check_type=False, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001  (inference is a cross-check; our own type rules decide)
            return {}
        out: dict[str, TensorType] = {}
        for vi in list(done.graph.value_info) + list(done.graph.output):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type") or tt.elem_type not in ONNX_ELEMS or not tt.HasField("shape"):
                continue
            if all(_fixed(d) for d in tt.shape.dim):  # -1 (from a subgraph's declaration) is dynamic
                out[vi.name] = TensorType(ONNX_ELEMS[tt.elem_type], tuple(d.dim_value for d in tt.shape.dim))
        return out

    def _cross_check(self, node: onnx.NodeProto, inferred: Mapping[str, TensorType]) -> None:
        """Our type rules must agree with onnx shape inference wherever it is static."""
        if node.op_type in INFERENCE_UNRELIABLE:
            return
        for name in node.output:
            want = inferred.get(name)
            got = self.values.get(name)
            if want is None or not isinstance(got, Value):
                continue
            if got.type.elem != want.elem or got.type.shape != want.shape:
                shapes = [v.type.shape if isinstance(v, Value) else None
                          for v in (self.values.get(n) if n else None for n in node.input)]
                why = inference_departure(node, shapes, got.type, want, list(node.output).index(name))
                if why is not None:  # onnx's inference departs from the spec here, glow follows the spec
                    warnings.warn(f"ONNX node '{node.name or name}' ({node.op_type}): onnx shape inference types "
                                  f"output '{name}' as {want}; {why}: glow follows the spec", GlowWarning,
                                  stacklevel=2)
                    continue
                raise GlowVerifyError(
                    f"ONNX node '{node.name or name}' ({node.op_type}): glow typed output '{name}' as {got.type}, "
                    f"onnx shape inference says {want}",
                    hint="this is a bug in glow's import rule or type rule; please report it",
                )

    def _check_ops(self, graph: onnx.GraphProto) -> None:
        rules = import_rules()
        missing: dict[str, list[str]] = {}
        for n in all_nodes(graph):
            dom = "" if n.domain in DEFAULT_DOMAINS else n.domain
            if (dom, n.op_type) not in rules:
                key = f"{n.domain}::{n.op_type}" if dom else n.op_type
                missing.setdefault(key, []).append(n.name or (n.output[0] if n.output else "?"))
        if missing:
            total = sum(len(v) for v in missing.values())
            parts = []
            for op, names in sorted(missing.items()):
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                parts.append(f"{op} ({len(names)} node{'s' if len(names) > 1 else ''}: {shown})")
            raise UnsupportedOpsError(
                f"{len(missing)} unsupported ONNX operator{'s' if len(missing) > 1 else ''} "
                f"in {total} node{'s' if total > 1 else ''}: " + "; ".join(parts),
                hint="these operators have no import rule in this version of glow",
            )

    def _constant_from(self, t: onnx.TensorProto) -> Constant:
        elem = onnx_elem(t.data_type, f"initializer '{t.name}'")
        self.tally.add(t.dims, elem.itemsize, f"initializer '{t.name}'", "initializer")
        try:
            arr = self.weights[t.name] if t.name in self.weights else read_initializer(t)
        except MemoryError:
            raise budget.BudgetError(f"initializer '{t.name}': out of memory reading it") from None
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"initializer '{t.name}' cannot be read: {e}") from None
        arr = np.asarray(arr.astype(elem.dtype, copy=False), order="C")
        return self.fn.add_constant(arr, t.name)

    def _add_inputs(self, graph: onnx.GraphProto, inits: Mapping[str, onnx.TensorProto]) -> None:
        unknown: list[str] = []
        real_inputs = [i for i in graph.input if i.name not in inits]
        names = {i.name for i in real_inputs}
        for given in self.input_shapes:
            if given not in names:
                raise ImportShapeError(
                    f"a shape given (--input-shape, input_shapes=) names '{given}', which is not an input of the "
                    "model; "
                    f"its inputs are: {', '.join(sorted(names)) or '(none)'}"
                )
        symbols = ModelSymbols(self.proto, self.dims)
        for vi in real_inputs:
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                self.values[vi.name] = structured_input(self, vi, self.input_shapes.get(vi.name))
                continue
            elem = onnx_elem(tt.elem_type, f"input '{vi.name}'")
            if vi.name in self.input_shapes:
                shape = self.input_shapes[vi.name]
                self._check_given(vi, shape)
            elif vi.name in self.bind:
                shape = tuple(self.bind[vi.name].shape)
            else:
                resolved = symbols.inputs[vi.name].resolve(self.dims)
                if resolved is None:
                    unknown.append(f"{vi.name} {symbols.inputs[vi.name].describe()}")
                    continue
                shape = resolved
            symbols.check(vi.name, tuple(shape))  # sizes dims fix, bounds (glow_core/importer/symbols.py)
            self.values[vi.name] = self.tensor_input(vi.name, elem, tuple(shape))
        if unknown:
            raise ImportShapeError(
                "input(s) with symbolic or unknown dimensions: " + "; ".join(unknown),
                hint="fix them with --input-shape NAME=d1,d2,... or --dim SYMBOL=N (input_shapes={NAME: (...)} or "
                     "dims={SYMBOL: N} in Python); glow_core.compile(model) compiles per shape fed instead",
            )

    @staticmethod
    def _check_given(vi: onnx.ValueInfoProto, shape: tuple[int, ...]) -> None:
        """The shape given for an input (--input-shape, input_shapes=) against its declared rank and fixed dims."""
        tt = vi.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
            raise ImportShapeError(
                f"input '{vi.name}' has rank {len(tt.shape.dim)} but the shape given for it (--input-shape, "
                f"input_shapes=) is {list(shape)}"
            )
        for d, want in zip(tt.shape.dim if tt.HasField("shape") else [], shape):
            if _fixed(d) and d.dim_value != want:
                raise ImportShapeError(
                    f"input '{vi.name}' has fixed dimension {d.dim_value} where the shape given for it "
                    f"(--input-shape, input_shapes=) has {want}"
                )

    def tensor_input(self, name: str, elem: Any, shape: tuple[int, ...]) -> Value:
        """A model input (or a flattened element of one): a placeholder, or a constant when bound."""
        self.budget.check_tensor(shape, elem.itemsize, f"input '{name}'", "input")
        if name in self.bind:
            given = np.asarray(self.bind[name])
            arr = np.asarray(given.astype(elem.dtype, copy=False), order="C")
            with np.errstate(all="ignore"):
                exact = given.dtype == arr.dtype or np.array_equal(
                    arr.astype(given.dtype), given, equal_nan=given.dtype.kind in "fc")
            if not exact:  # e.g. int64 axes [-1] bound to an input declared bool: True would be axis 1
                raise InputError(f"the value bound to input '{name}' ({given.dtype}) does not convert "
                                 f"exactly to its declared type {elem.value}",
                                 hint=f"pass a {elem.value} array, or fix the input's declaration")
            if tuple(arr.shape) != tuple(shape):
                raise ImportShapeError(f"bound value of input '{name}' has shape {list(arr.shape)}, expected {list(shape)}")
            return self.fn.add_constant(arr, name)
        return self.fn.add_input(name, TensorType(elem, shape))

    def _import_node(self, node: onnx.NodeProto) -> None:
        dom = "" if node.domain in DEFAULT_DOMAINS else node.domain
        rule = import_rules()[(dom, node.op_type)]
        opset = self.opsets.get(node.domain, self.opsets.get("", 0)) if dom else max(
            self.opsets.get("", 0), self.opsets.get("ai.onnx", 0))
        ctx = NodeContext(self, node, opset)
        refs = [a.name for a in node.attribute if a.ref_attr_name]
        if refs:  # every rule, also those that read node.attribute directly
            raise ModelError(f"{ctx.where()}: attribute(s) {refs} refer to a function's attribute "
                             "(ref_attr_name), which only a function body may do",
                             hint="the model file is corrupt")
        check_node_types(node, opset, dom, [self.values.get(n) if n else None for n in node.input], ctx.where())
        try:
            results = list(rule.fn(ctx))
        except GlowTypeError as e:
            msg = str(e)
            raise GlowTypeError(msg if "ONNX node" in msg else f"{ctx.where()}: {msg}", hint=e.hint) from None
        except (GlowError, DynamicValueError):
            raise
        except ValueError as e:
            if "array is too big" in str(e) or "Maximum allowed size exceeded" in str(e):  # numpy's size refusal
                raise budget.BudgetError(f"{ctx.where()}: a tensor it computes is too large to allocate ({e})",
                                         hint="fix the node's attributes or constant operands") from None
            raise UnsupportedError(f"{ctx.where()}: cannot import: {type(e).__name__}: {e}") from e
        except (TypeError, IndexError, KeyError) as e:
            raise UnsupportedError(f"{ctx.where()}: cannot import: {type(e).__name__}: {e}") from e
        except ArithmeticError as e:  # OverflowError, ZeroDivisionError: an extreme attribute or constant
            raise ModelError(f"{ctx.where()}: an attribute or constant operand is out of range "
                             f"({type(e).__name__}: {e})", hint="fix the node's attributes in the model") from None
        except MemoryError:
            raise budget.BudgetError(f"{ctx.where()}: out of memory importing it",
                                     hint=f"lower {budget.ENV_TOTAL} below the memory this machine has") from None
        check_result_types(node, opset, dom, results, ctx.where())
        outs = list(node.output)
        if len(results) < len([o for o in outs if o]):
            raise UnsupportedError(f"{ctx.where()}: only {len(results)} of its {len(outs)} outputs are supported")
        for name, v in zip(outs, results):
            if name == "":
                continue
            if v is None:
                raise UnsupportedError(f"{ctx.where()}: output '{name}' is not supported")
            self.values[name] = v


def import_model(
    model: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    bind: Mapping[str, np.ndarray] | None = None,
    weights: Mapping[str, np.ndarray] | None = None,
) -> Function:
    """Import an ONNX model into a verified graph function (``weights``: initializers already read, by name)."""
    proto, _ = load_model(model)
    return OnnxImporter(proto, input_shapes, bind, weights=weights).run()


def import_split(
    proto: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    bind: Mapping[str, np.ndarray] | None = None,
    checked: bool = False,
    weights: Mapping[str, np.ndarray] | None = None,
) -> tuple[Function, Split | None]:
    """Import up to the first control-flow node that must run at run time (docs/control-flow.md).

    Returns the function of the nodes before it and where it stopped (None: the whole graph).
    ``checked``: ``proto`` is made of parts of a model the onnx checker accepted (a subgraph, the
    rest of a graph), whose outputs need not declare types: the checker is not run again. ``weights``: the
    initializers of a model stripped of them, by name.
    """
    imp = OnnxImporter(proto, input_shapes, bind, split=True, checked=checked, weights=weights)
    fn = imp.run()
    return fn, imp.split

