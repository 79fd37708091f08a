"""The control-flow nodes run on the host, one function per ONNX op (``HOST_OPS``).

Each reads its operands from the environment (values by ONNX name), runs subgraphs as compiled
programs of the stage (:meth:`Stage.subprogram`) and writes its outputs back. Semantics follow the
ONNX operator specification (If 1-21, Loop 1-21, Scan 8 and 9-21).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np
import onnx

from glow_core import budget
from glow_core.errors import ExecutionError, InputError, ModelError, UnsupportedError
from glow_core.importer.context import ONNX_ELEMS

if TYPE_CHECKING:
    from glow_core.controlflow.program import Program, Stage

Env = dict[str, np.ndarray]
#: environment variable bounding the iterations of one Loop or Scan (default :data:`DEFAULT_MAX_ITERATIONS`)
MAX_ITERATIONS_ENV = "GLOW_MAX_LOOP_ITERATIONS"
DEFAULT_MAX_ITERATIONS = 100_000
#: environment variable bounding the loop bodies one outermost Loop or Scan runs, nested loops' included
MAX_TOTAL_ITERATIONS_ENV = "GLOW_MAX_TOTAL_ITERATIONS"
DEFAULT_MAX_TOTAL_ITERATIONS = 1_000_000
#: environment variable bounding the compiles of one Loop or Scan body during one run of the loop
MAX_LOOP_COMPILES_ENV = "GLOW_MAX_LOOP_COMPILES"
DEFAULT_MAX_LOOP_COMPILES = 256
#: the bodies run so far under the outermost loop running in this context (None: no loop is running)
_BODIES: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("glow_loop_bodies", default=None)


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _node_attrs(stage: Stage, node: onnx.NodeProto) -> dict[str, object]:
    """``node``'s attributes: the stage's copy, read once, when it is the stage's node."""
    return stage.node_attrs if node is stage.node else _attrs(node)


def _where(node: onnx.NodeProto) -> str:
    return f"ONNX node '{node.name or node.output[0]}' ({node.op_type})"


def _scalar(a: np.ndarray, node: onnx.NodeProto, what: str) -> np.generic:
    a = np.asarray(a)
    if a.size != 1:
        raise InputError(f"{_where(node)}: {what} has {a.size} elements at run time; it must have exactly one")
    return a.reshape(-1)[0]


def _feeds(prog: Program, env: Env, formal: dict[str, np.ndarray]) -> Env:
    feeds = dict(formal)
    for n in prog.input_names:
        if n not in feeds:
            feeds[n] = env[n]
    return feeds


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise InputError(f"{name}={raw!r} is not an integer") from None


def max_iterations() -> int:
    return _int_env(MAX_ITERATIONS_ENV, DEFAULT_MAX_ITERATIONS)


def max_total_iterations() -> int:
    return _int_env(MAX_TOTAL_ITERATIONS_ENV, DEFAULT_MAX_TOTAL_ITERATIONS)


def max_loop_compiles() -> int:
    return _int_env(MAX_LOOP_COMPILES_ENV, DEFAULT_MAX_LOOP_COMPILES)


class _Compiles:
    """The compiles of a loop's body during one run of the loop: bounded, since a body whose shapes follow a
    value that changes every iteration (the iteration number feeding a Slice) compiles every iteration."""

    def __init__(self, prog: Program, node: onnx.NodeProto) -> None:
        self.prog, self.node = prog, node
        self.start, self.limit = prog.compiled.compiled, max_loop_compiles()

    def check(self) -> None:
        made = self.prog.compiled.compiled - self.start
        if made > self.limit:
            bound = ", ".join(f"'{n}'" for n in sorted(self.prog.compiled.bound())) or "values"
            raise ExecutionError(f"{_where(self.node)}: its body was compiled {made} times in this run: the "
                                 f"value(s) of {bound} decide its shapes and change from iteration to iteration",
                                 hint=f"set {MAX_LOOP_COMPILES_ENV} to allow more")


@contextlib.contextmanager
def _bodies_counted() -> Iterator[list[int]]:
    """The count of loop bodies run under the outermost loop: a new one for an outermost loop, the running
    one for a nested loop (a body runs its nested loops in the same context)."""
    counter = _BODIES.get()
    if counter is not None:
        yield counter
        return
    token = _BODIES.set([0])
    try:
        yield _BODIES.get()  # type: ignore[misc]
    finally:
        _BODIES.reset(token)


def _one_more_body(counter: list[int], node: onnx.NodeProto) -> None:
    counter[0] += 1
    limit = max_total_iterations()
    if counter[0] > limit:
        raise ExecutionError(f"{_where(node)}: the loops around and within it ran {limit} loop bodies in all, the "
                             f"limit {MAX_TOTAL_ITERATIONS_ENV} sets (nested loops multiply)",
                             hint=f"set {MAX_TOTAL_ITERATIONS_ENV} to allow more")


def _budget_of(prog: Program) -> budget.Budget:
    """The budget the program was compiled under (else the one in force)."""
    return getattr(prog.target, "budget", None) or budget.current()


class _Accumulation:
    """The bytes a loop's scan outputs hold, charged against the budget's total as they grow, and checked
    for the whole loop as soon as its length and one step's size are known."""

    def __init__(self, node: onnx.NodeProto, limits: budget.Budget) -> None:
        self.node, self.limits, self.total = node, limits, 0
        self.shapes: list[tuple[int, ...]] | None = None
        self.steps = 0

    def add(self, parts: Sequence[np.ndarray]) -> None:
        """One iteration's scan values: charged (with the copy stacking them will make), and of the first
        iteration's shapes (values of another shape cannot be stacked: the loop ends there, not after its
        last iteration)."""
        shapes = [np.shape(p) for p in parts]
        if self.shapes is None:
            self.shapes = shapes
        for j, (first, now) in enumerate(zip(self.shapes, shapes)):
            if first != now:
                raise ExecutionError(f"{_where(self.node)}: scan output {j} has different shapes in different "
                                     f"iterations ({list(first)} in the first, {list(now)} in iteration "
                                     f"{self.steps}); they cannot be stacked", hint="the model is invalid for these inputs")
        self.steps += 1
        self.total += 2 * sum(int(np.asarray(p).nbytes) for p in parts)
        self.limits.check_total(self.total, _where(self.node), "the scan outputs accumulated so far (and their "
                                                               "stacked copies)")

    def expect(self, steps: int, parts: Sequence[np.ndarray]) -> None:
        """The loop will run ``steps`` iterations of values like ``parts``: each stacked output within one
        tensor's limit, all of them (and the values kept to stack them) within the total."""
        where = _where(self.node)
        total = 0
        for j, p in enumerate(parts):
            p = np.asarray(p)
            total += 2 * self.limits.check_tensor((steps,) + p.shape, p.itemsize, where, f"scan output {j}")
        if total > self.limits.total_bytes:
            step = sum(int(np.asarray(p).nbytes) for p in parts)
            self.limits.check_total(total, where, f"its scan outputs ({steps} iterations of "
                                                  f"{budget.format_bytes(step)}, stacked)")


def run_if(stage: Stage, node: onnx.NodeProto, env: Env) -> None:
    cond = bool(_scalar(env[node.input[0]], node, "the condition"))
    attr = "then_branch" if cond else "else_branch"
    graph = _node_attrs(stage, node)[attr]
    assert isinstance(graph, onnx.GraphProto)
    if len(graph.output) != len(node.output):
        raise ModelError(f"{_where(node)}: {attr} has {len(graph.output)} outputs, the node {len(node.output)}")
    prog = stage.subprogram(attr, graph)
    outs = prog.run(_feeds(prog, env, {}))
    for name, o in zip(node.output, graph.output):
        if name:
            env[name] = outs[o.name]


def _stack(parts: list[np.ndarray], node: onnx.NodeProto, what: str) -> np.ndarray:
    if not all(isinstance(p, np.ndarray) for p in parts):
        raise ModelError(f"{_where(node)}: {what} is a sequence or optional value; scan outputs must be tensors")
    # (every step has the first one's shape: _Accumulation.add checked each as it came)
    budget.current().check_tensor((len(parts),) + parts[0].shape, parts[0].itemsize, _where(node), what)
    return np.stack(parts)


def _empty_scan(graph: onnx.GraphProto, index: int, node: onnx.NodeProto,
                first: Callable[[], tuple[Program, Env]] | None = None) -> np.ndarray:
    """A scan output of a loop that ran zero times: ``[0, *shape of one iteration's value]``.

    The shape is the body's declaration when static; else the body is compiled (not run) for the
    values the first iteration would have had, and the shape its function computes is used
    (as onnxruntime does; ``onnx.reference`` fails on such a loop).
    """
    vi = graph.output[index]
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]
    if tt.elem_type in ONNX_ELEMS and tt.HasField("shape") and None not in dims:
        return np.zeros([0] + dims, dtype=ONNX_ELEMS[tt.elem_type].dtype)
    if first is not None:
        prog, feeds = first()
        stage = prog.stage_for(feeds)
        if stage.split is None and stage.net is not None:
            types = dict(stage.net.function.outputs)
            if vi.name in types:
                t = types[vi.name].type
                return np.zeros((0,) + tuple(t.shape), dtype=t.dtype)
    raise UnsupportedError(f"{_where(node)}: the loop ran zero times and the shape of scan output '{vi.name}' "
                           "is neither declared nor computable without running the body")


def run_loop(stage: Stage, node: onnx.NodeProto, env: Env) -> None:
    body = _node_attrs(stage, node)["body"]
    assert isinstance(body, onnx.GraphProto)
    ins = list(node.input) + [""] * (2 - len(node.input))
    trip = int(_scalar(env[ins[0]], node, "the trip count M")) if ins[0] else None
    keep = bool(_scalar(env[ins[1]], node, "the condition")) if ins[1] else True
    carried = [env[n] for n in ins[2:]]
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried  # check_loop made sure the body fits the node
    limit = max_iterations()
    prog = stage.subprogram("body", body)
    scans: list[list[np.ndarray]] = [[] for _ in range(n_scan)]
    held = _Accumulation(node, _budget_of(prog))
    compiles = _Compiles(prog, node)
    i = 0
    with _bodies_counted() as bodies:
        while keep and (trip is None or i < trip):
            if i >= limit:
                raise ExecutionError(f"{_where(node)}: the loop did not end after {limit} iterations",
                                     hint=f"set {MAX_ITERATIONS_ENV} to allow more")
            _one_more_body(bodies, node)
            formal = {body.input[0].name: np.array(i, dtype=np.int64), body.input[1].name: np.array(keep)}
            formal.update({vi.name: v for vi, v in zip(body.input[2:], carried)})
            outs = prog.run(_feeds(prog, env, formal))
            compiles.check()
            if ins[1]:  # without a condition operand the body's condition output is ignored
                keep = bool(_scalar(outs[body.output[0].name], node, "the body's condition output"))
            carried = [outs[o.name] for o in body.output[1:1 + n_carried]]
            step = [outs[o.name] for o in body.output[1 + n_carried:]]
            if i == 0 and trip is not None and not ins[1] and step:  # it runs trip times: check them all now
                held.expect(trip, step)
            held.add(step)
            for j, v in enumerate(step):
                scans[j].append(v)
            i += 1

    def first() -> tuple[Program, Env]:
        formal = {body.input[0].name: np.array(0, dtype=np.int64), body.input[1].name: np.array(True)}
        formal.update({vi.name: env[n] for vi, n in zip(body.input[2:], ins[2:])})
        return prog, _feeds(prog, env, formal)

    results = carried + [_stack(s, node, f"scan output {j}") if s else _empty_scan(body, 1 + n_carried + j, node, first)
                         for j, s in enumerate(scans)]
    for name, v in zip(node.output, results):
        if name:
            env[name] = v


def _axis(axis: int, rank: int, node: onnx.NodeProto, what: str) -> int:
    if not -rank <= axis < rank:
        raise ModelError(f"{_where(node)}: {what} axis {axis} is out of range for rank {rank}")
    return axis % rank


def scan_loop(prog: Program, env: Env, body: onnx.GraphProto, node: onnx.NodeProto, states: list[np.ndarray],
              inputs: list[np.ndarray], attrs: dict[str, object], length: int | None = None
              ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Scan ``inputs`` (Scan 9+ semantics); returns the final states and the stacked scan outputs."""
    n_in = len(inputs)
    in_axes = [_axis(int(a), x.ndim, node, "scan input") for a, x in
               zip(attrs.get("scan_input_axes") or [0] * n_in, inputs)]
    in_dirs = list(attrs.get("scan_input_directions") or [0] * n_in)
    lengths = {x.shape[a] for x, a in zip(inputs, in_axes)}
    if len(lengths) != 1:
        raise InputError(f"{_where(node)}: the scan inputs have different lengths {sorted(lengths)}")
    total = lengths.pop()
    steps = total if length is None else min(length, total)
    limit = max_iterations()
    if steps > limit:
        raise ExecutionError(f"{_where(node)}: the scan would run {steps} iterations, over "
                             f"{MAX_ITERATIONS_ENV} ({limit})", hint=f"set {MAX_ITERATIONS_ENV} to allow more")
    n_out = len(body.output) - len(states)
    outs_per: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    held = _Accumulation(node, _budget_of(prog))
    compiles = _Compiles(prog, node)
    with _bodies_counted() as bodies:
        for t in range(steps):
            _one_more_body(bodies, node)
            formal = {vi.name: s for vi, s in zip(body.input, states)}
            for vi, x, a, d in zip(body.input[len(states):], inputs, in_axes, in_dirs):
                formal[vi.name] = np.take(x, t if not d else steps - 1 - t, axis=a)
            outs = prog.run(_feeds(prog, env, formal))
            compiles.check()
            states = [outs[o.name] for o in body.output[:len(states)]]
            step = [outs[o.name] for o in body.output[len(states):]]
            if t == 0 and step:
                held.expect(steps, step)
            held.add(step)
            for j, v in enumerate(step):
                outs_per[j].append(v)
    out_axes = list(attrs.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(attrs.get("scan_output_directions") or [0] * n_out)
    stacked = []
    for j, parts in enumerate(outs_per):
        if not parts:
            stacked.append(_empty_scan(body, len(states) + j, node))
            continue
        y = _stack(parts[::-1] if out_dirs[j] else parts, node, f"scan output {j}")
        stacked.append(np.moveaxis(y, 0, _axis(int(out_axes[j]), y.ndim, node, "scan output")))
    return states, stacked


def run_scan(stage: Stage, node: onnx.NodeProto, env: Env) -> None:
    attrs = _node_attrs(stage, node)
    body = attrs["body"]
    assert isinstance(body, onnx.GraphProto)
    n_scan = int(attrs["num_scan_inputs"])  # type: ignore[call-overload]
    prog = stage.subprogram("body", body)
    if stage.opset_of(node) >= 9:
        values = [env[n] for n in node.input]
        n_states = len(values) - n_scan
        states, scans = scan_loop(prog, env, body, node, values[:n_states], values[n_states:], attrs)
    else:
        states, scans = _scan8(prog, env, body, node, attrs, n_scan)
    for name, v in zip(node.output, states + scans):
        if name:
            env[name] = v


def _scan8_batch(node: onnx.NodeProto, lens: np.ndarray | None, values: list[np.ndarray], n_scan: int) -> int:
    """Scan 8's batch size: every operand's axis 0, one sequence length in [0, sequence axis] per batch entry."""
    if any(np.ndim(v) < 1 for v in values):
        raise InputError(f"{_where(node)}: every state and scan input of Scan 8 needs a batch axis 0; got shapes "
                         f"{[list(np.shape(v)) for v in values]}")
    batches = {np.shape(v)[0] for v in values}
    if len(batches) != 1:
        raise InputError(f"{_where(node)}: the states and scan inputs have different batch sizes {sorted(batches)}")
    batch = batches.pop()
    if lens is None:
        return int(batch)
    lens = np.asarray(lens)
    if lens.size != batch or lens.dtype.kind not in "iu":
        raise InputError(f"{_where(node)}: sequence_lens is {lens.dtype}{list(lens.shape)}; it must hold one integer "
                         f"per batch entry ({batch})")
    longest = min(np.shape(v)[1] if np.ndim(v) > 1 else 0 for v in values[len(values) - n_scan:])
    if lens.size and (lens.min() < 0 or lens.max() > longest):
        raise InputError(f"{_where(node)}: sequence_lens {lens.reshape(-1).tolist()} must be in [0, {longest}] "
                         "(the length of the scan inputs' sequence axis 1)")
    return int(batch)


def _scan8(prog: Program, env: Env, body: onnx.GraphProto, node: onnx.NodeProto, attrs: dict[str, object],
           n_scan: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Scan 8: a batch axis 0 in front of every operand, the sequence axis 1, optional sequence lengths."""
    lens = env[node.input[0]] if node.input[0] else None
    values = [env[n] for n in node.input[1:]]
    n_states = len(values) - n_scan
    batch = _scan8_batch(node, lens, values, n_scan)
    nine = {"scan_input_directions": attrs.get("directions") or [0] * n_scan}
    per_batch = []
    for b in range(batch):
        length = int(lens.reshape(-1)[b]) if lens is not None else None
        per_batch.append(scan_loop(prog, env, body, node, [v[b] for v in values[:n_states]],
                                   [v[b] for v in values[n_states:]], nine, length))
    states = [np.stack([pb[0][i] for pb in per_batch]) for i in range(n_states)]
    n_out = len(body.output) - n_states
    scans = []
    for j in range(n_out):
        parts = [pb[1][j] for pb in per_batch]
        longest = max(p.shape[0] for p in parts)  # shorter sequences are padded with zeros
        padded = [np.concatenate([p, np.zeros((longest - p.shape[0],) + p.shape[1:], p.dtype)]) for p in parts]
        scans.append(np.stack(padded))
    return states, scans


# -- checking a node's structure before anything is allocated for it ------------------------------------
def _required(node: onnx.NodeProto, first: int, what: str) -> None:
    """Inputs from ``first`` on are required: an empty name (an omitted optional input) is refused."""
    for i, name in enumerate(node.input):
        if i >= first and not name:
            raise ModelError(f"{_where(node)}: input {i} has an empty name, which marks an omitted optional input, "
                             f"but {what} is required", hint="name the value this input takes")


def _body(node: onnx.NodeProto, attrs: dict[str, object], attr: str) -> onnx.GraphProto:
    graph = attrs.get(attr)
    if not isinstance(graph, onnx.GraphProto):
        raise ModelError(f"{_where(node)}: the graph attribute '{attr}' is missing")
    return graph


def check_if(node: onnx.NodeProto, attrs: dict[str, object], opset: int) -> None:
    if len(node.input) != 1 or not node.input[0]:
        raise ModelError(f"{_where(node)}: If takes exactly one input, the condition; got {list(node.input)}")
    for attr in ("then_branch", "else_branch"):
        _body(node, attrs, attr)


def check_loop(node: onnx.NodeProto, attrs: dict[str, object], opset: int) -> None:
    body = _body(node, attrs, "body")
    _required(node, 2, "a loop-carried value")
    n_carried = max(0, len(node.input) - 2)
    if len(body.input) != 2 + n_carried or len(body.output) < 1 + n_carried:
        raise ModelError(f"{_where(node)}: the body takes {len(body.input)} inputs and returns {len(body.output)} "
                         f"outputs for {n_carried} loop-carried value(s); it must take {2 + n_carried} "
                         f"(iteration, condition, the values) and return at least {1 + n_carried}")
    if len(node.output) > len(body.output) - 1:
        raise ModelError(f"{_where(node)}: {len(node.output)} outputs, but the body returns only "
                         f"{len(body.output) - 1} values after its condition")


def _check_lists(node: onnx.NodeProto, attrs: dict[str, object], counts: dict[str, tuple[int, str]]) -> None:
    """Each list attribute present holds one entry per scan input or output; directions are 0 or 1."""
    for name, (n, per) in counts.items():
        v = attrs.get(name)
        if not v:
            continue
        assert isinstance(v, list)
        if len(v) != n:
            raise ModelError(f"{_where(node)}: attribute '{name}' has {len(v)} entries; it needs one per {per} ({n})")
        if "directions" in name and any(int(d) not in (0, 1) for d in v):
            raise ModelError(f"{_where(node)}: attribute '{name}' = {v}: each direction must be 0 or 1")


def check_scan(node: onnx.NodeProto, attrs: dict[str, object], opset: int) -> None:
    """Scan's counts against its actual inputs and body (Scan 8 has an optional sequence_lens first)."""
    body = _body(node, attrs, "body")
    first = 1 if opset < 9 else 0
    operands = len(node.input) - first
    n_scan = attrs.get("num_scan_inputs")
    if not isinstance(n_scan, int) or not 1 <= n_scan <= operands:
        raise ModelError(f"{_where(node)}: num_scan_inputs {n_scan} must be in [1, {operands}] "
                         f"(the node has {operands} state and scan inputs)")
    _required(node, first, "every state and scan input")
    n_states = operands - n_scan
    n_out = len(body.output) - n_states
    if len(body.input) != operands or n_out < 0:
        raise ModelError(f"{_where(node)}: the body takes {len(body.input)} inputs and returns {len(body.output)} "
                         f"outputs; with {n_states} state(s) and {n_scan} scan input(s) it must take {operands} "
                         f"and return at least {n_states}")
    if len(node.output) > len(body.output):
        raise ModelError(f"{_where(node)}: {len(node.output)} outputs, but the body returns {len(body.output)}")
    if opset < 9:
        _check_lists(node, attrs, {"directions": (n_scan, "scan input")})
    else:
        _check_lists(node, attrs, {"scan_input_axes": (n_scan, "scan input"),
                                   "scan_input_directions": (n_scan, "scan input"),
                                   "scan_output_axes": (n_out, "scan output"),
                                   "scan_output_directions": (n_out, "scan output")})


# -- compiling subgraphs ahead of their first run ------------------------------------------------------
def warm_if(stage: Stage, node: onnx.NodeProto, env: Env) -> None:
    for attr in ("then_branch", "else_branch"):
        graph = _node_attrs(stage, node)[attr]
        assert isinstance(graph, onnx.GraphProto)
        prog = stage.subprogram(attr, graph)
        prog.stage_for(_feeds(prog, env, {}))


def warm_loop(stage: Stage, node: onnx.NodeProto, env: Env) -> None:
    body = _node_attrs(stage, node)["body"]
    assert isinstance(body, onnx.GraphProto)
    if len(body.input) != len(node.input):
        return  # an ill-formed loop: running it reports that
    formal = {body.input[0].name: np.array(0, dtype=np.int64), body.input[1].name: np.array(True)}
    formal.update({vi.name: env[n] for vi, n in zip(body.input[2:], node.input[2:])})
    prog = stage.subprogram("body", body)
    prog.stage_for(_feeds(prog, env, formal))


def warm_scan(stage: Stage, node: onnx.NodeProto, env: Env) -> None:
    attrs = _node_attrs(stage, node)
    body = attrs["body"]
    assert isinstance(body, onnx.GraphProto)
    if stage.opset_of(node) < 9 or len(body.input) != len(node.input):
        return
    values = [env[n] for n in node.input]
    n_states = len(values) - int(attrs["num_scan_inputs"])  # type: ignore[call-overload]
    axes = attrs.get("scan_input_axes") or [0] * (len(values) - n_states)
    formal = {vi.name: v for vi, v in zip(body.input, values[:n_states])}
    for vi, x, a in zip(body.input[n_states:], values[n_states:], axes):  # type: ignore[call-overload]
        if x.ndim == 0 or not -x.ndim <= int(a) < x.ndim or x.shape[int(a)] == 0:
            return
        formal[vi.name] = np.take(x, 0, axis=int(a))
    prog = stage.subprogram("body", body)
    prog.stage_for(_feeds(prog, env, formal))


#: compile a control-flow node's subgraphs for the values it will see (zeros of the right types)
WARMERS: dict[str, Callable[["Stage", onnx.NodeProto, Env], None]] = {
    "If": warm_if,
    "Loop": warm_loop,
    "Scan": warm_scan,
}

#: check a control-flow node's inputs, attributes and subgraph signatures (opset given) before it is warmed or run
CHECKS: dict[str, Callable[[onnx.NodeProto, dict[str, object], int], None]] = {
    "If": check_if,
    "Loop": check_loop,
    "Scan": check_scan,
}

HOST_OPS: dict[str, Callable[["Stage", onnx.NodeProto, Env], None]] = {
    "If": run_if,
    "Loop": run_loop,
    "Scan": run_scan,
}
