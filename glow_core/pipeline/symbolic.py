"""Compile once for symbolic dims: one network that runs every size of the free symbols up to their bounds.

The function is prepared (import, optimize, lower, fuse) twice through the one pipeline: at a *probe* (distinct
primes for the free symbols) and at the *bounds*. The two must be the same graph up to sizes; each dim of each
value then has the size expression (``glow_core.ir.symbolic.derive``) that gives its size at both, and the
bound function, annotated with them (``TensorType.sym``), is what the backend compiles: laid out at the
bounds, each run filling the leading corner of each buffer. Constants may differ only as prefixes of the bound
ones (a position table sliced to the sequence), attributes only where the node keeps the layout (Reshape's
shape, Slice's sizes). Every node must be safe on padded layouts (``symrules.py``) or have a symbolic kernel on
the backend. Anything else is a :class:`SymbolicRefused`: the caller compiles a specialization per shape.

:class:`SymbolicPlan` says which symbols stay free, which are fixed at a value (sizes 0 and 1, the batch: a
leading axis) and which follow others (``total_sequence = past_sequence + sequence``, found from the feeds
when the probe with every symbol independent does not import).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glow_core.errors import GlowError
from glow_core.importer.symbols import DimBound, ModelSymbols
from glow_core.ir.graph import Constant, Function, Node, NodeOutput, Placeholder, Value
from glow_core.ir.symbolic import MAX_OFFSET, SymExpr, derive
from glow_core.ir.defs.symbolic import SYMBOLIC_VALUE_KINDS
from glow_core.pipeline.symrules import needs_symbolic_kernel
from glow_core.reference.symbolic_sizes import is_global_pool

#: the bounds a free symbol is tried at when the dims give it no maximum, largest first (odd: a size the model
#: has itself, such as 512 positions, could let the optimizer fold at the bound what it keeps at the probe);
#: a smaller one is tried when the model does not import at a larger (a table of 64 positions: 63)
DEFAULT_BOUNDS = (511, 255, 127, 63, 31, 15, 7, 3)
DEFAULT_BOUND = DEFAULT_BOUNDS[0]
#: the most elements a constant computed from the sizes may have (it becomes a SymbolicValue node)
SYMBOLIC_VALUE_MAX = 16
#: kinds whose attributes may name a symbolic size (the node keeps the layout: symrules checks how)
SYMBOLIC_ATTR_KINDS = frozenset({"Reshape", "Slice", "Resize"})


class SymbolicRefused(GlowError):
    """The model cannot be compiled for symbolic dims this way (the message says why); ``final``: a node kind
    rules the model out, whatever the plan."""

    def __init__(self, message: str, *, final: bool = False, stepped: bool = False) -> None:
        super().__init__(message)
        self.final = final
        #: final for every plan of the same free symbols and step (a size a larger step may make a polynomial)
        self.stepped = stepped


#: the multiples a free symbol may be planned in, after 1 (image sizes through strided convolutions and pools:
#: ``floor((H - 1) / 2) + 1`` is no polynomial of H, but ``16*h`` is one of h = H / 32 when H is a multiple of 32)
STEPS = (2, 4, 8, 16, 32)
#: node kinds whose results' sizes divide their inputs' (in a function with one, a size that is no polynomial of
#: the symbols rules out every bound of that step: a larger step may serve)
STRIDING_KINDS = frozenset({"Conv", "FusedConv", "MaxPool", "AvgPool", "ConvTranspose", "Resize", "Upsample",
                            "LpPool", "ChannelwiseQuantizedConv", "SpaceToDepth"})


@dataclass(frozen=True)
class SymbolicPlan:
    """Which symbols a symbolic compile keeps free (with their bounds), fixes, or derives from others; a free
    symbol with a step ``m`` (``steps``) takes only multiples of ``m``, and the compiled function's dims are
    polynomials of its quotient ``symbol/m`` (:meth:`quotients`)."""

    free: tuple[tuple[str, int], ...]  # (symbol, bound)
    fixed: tuple[tuple[str, int], ...] = ()
    derived: tuple[tuple[str, SymExpr], ...] = ()
    lows: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    steps: tuple[tuple[str, int], ...] = ()  # (symbol, multiple > 1)

    def env(self, free: Mapping[str, int]) -> dict[str, int]:
        """Every symbol's value when the free ones have the values ``free``."""
        env = {**dict(self.fixed), **{s: int(free[s]) for s, _ in self.free}}
        for s, e in self.derived:
            env[s] = e.evaluate(env)
        return env

    def quotients(self, env: Mapping[str, int]) -> dict[str, int]:
        """``env`` with each stepped symbol ``s`` (step ``m``) replaced by ``s/m``, its size divided by ``m``: the
        symbols the compiled function's dims name."""
        steps = dict(self.steps)
        return {(f"{s}/{steps[s]}" if s in steps else s): (v // steps[s] if s in steps else v) for s, v in env.items()}

    def accepts(self, env: Mapping[str, int]) -> bool:
        """Can a network of this plan run sizes ``env``?"""
        if any(env.get(s) != v for s, v in self.fixed):
            return False
        if any(not 1 <= env.get(s, 0) <= b for s, b in self.free):
            return False
        if any(env.get(s, 0) % m for s, m in self.steps):
            return False
        return all(env.get(s) == e.evaluate(env) for s, e in self.derived)

    def describe(self) -> str:
        steps = dict(self.steps)
        parts = [f"{s}<={b}" + (f" (multiple of {steps[s]})" if s in steps else "") for s, b in self.free] + \
            [f"{s}={v}" for s, v in self.fixed] + [f"{s}={e}" for s, e in self.derived]
        return ", ".join(parts)


def _axes_of(symbols: ModelSymbols) -> dict[str, list[tuple[str, int]]]:
    """Each open symbol (a named one, or ``input:axis`` for an anonymous dim) -> the (input, axis) it sizes."""
    out: dict[str, list[tuple[str, int]]] = {}
    for name, inp in symbols.inputs.items():
        for k, d in enumerate(inp.dims or ()):
            if d.size is None and not isinstance(symbols.dims.get(d.symbol or ""), int):
                out.setdefault(d.symbol or f"{name}:{k}", []).append((name, k))
    return out


def feed_env(symbols: ModelSymbols, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """The open symbols' sizes in ``shapes`` (a symbol fed two sizes keeps the first)."""
    env: dict[str, int] = {}
    for sym, axes in _axes_of(symbols).items():
        for name, k in axes:
            if name in shapes and len(shapes[name]) > k:
                env.setdefault(sym, int(shapes[name][k]))
    return env


def _follows(t: str, others: list[str], env: Mapping[str, int]) -> SymExpr | None:
    """``t``'s size in ``env`` as another symbol's plus a small constant, or as the sum of two others."""
    for a in others:
        d = env[t] - env[a]
        if 0 <= d <= MAX_OFFSET:
            return SymExpr.of({(a,): 1, (): d})
    for a, b in itertools.combinations(others, 2):
        if env[t] == env[a] + env[b]:
            return SymExpr.of({(a,): 1, (b,): 1})
    return None


def _relations(env: Mapping[str, int], free: list[str]) -> dict[str, SymExpr]:
    """The symbols that follow others in ``env`` (``_follows``); of two equal ones the later follows the
    earlier, and a symbol another follows is not itself derived."""
    out: dict[str, SymExpr] = {}
    for i, t in enumerate(free):
        others = [s for j, s in enumerate(free) if s != t and s not in out and (j < i or env[s] != env[t])]
        rel = _follows(t, others, env)
        if rel is not None:
            out[t] = rel
    return out


def _leading(axes: list[tuple[str, int]]) -> bool:
    """A symbol only on leading axes (a batch)."""
    return all(k == 0 for _, k in axes)


def default_env(symbols: ModelSymbols) -> dict[str, int]:
    """Sizes to plan a compile for before any feed: 1 for a symbol only on leading axes (a batch), 2 for the
    others (free, bounded by the dims or :data:`DEFAULT_BOUND`); 1 for all (nothing free: no compile before a
    feed) when a symbol is an image's height or width (its plan's step, :func:`plan_steps`, depends on the sizes
    fed: the first run compiles)."""
    axes = _axes_of(symbols)
    image = any(_spatial(a, symbols) for a in axes.values())
    return {s: 1 if image or _leading(a) else 2 for s, a in axes.items()}


def large_bound(largest: int) -> int:
    """The bound to plan sizes past :data:`DEFAULT_BOUND` at: the least ``2**k - 1`` that holds ``largest`` (a
    cache of 513 keys runs at 1023, which a model of 1024 positions imports at; 1024 keys at 2047). A
    generation loop that outgrows its plan thus compiles once per doubling, not once per step."""
    return (1 << max(int(largest), 1).bit_length()) - 1


def make_plan(symbols: ModelSymbols, env: Mapping[str, int], *, relate: bool = False,
              bound: int = DEFAULT_BOUND, step: int = 1, headroom: bool = True) -> SymbolicPlan:
    """The plan for feeds of sizes ``env``: sizes 0 and 1 and leading-axis symbols fixed, the rest free (with
    ``relate``, those that follow others derived), each free one bounded by the dims' maximum or ``bound`` (or,
    with ``headroom``, twice its size when larger), in multiples of ``step`` (or of the dims' ``multiple_of``)."""
    axes = _axes_of(symbols)
    fixed: dict[str, int] = {}
    free: list[str] = []
    for sym, size in env.items():
        if size <= 1 or _leading(axes.get(sym, [])):
            fixed[sym] = size
        else:
            free.append(sym)
    derived = _relations(env, free) if relate else {}
    bounds: list[tuple[str, int]] = []
    lows: list[tuple[str, int]] = []
    steps: list[tuple[str, int]] = []
    for s in free:
        if s in derived:
            continue
        want = symbols.dims.get(s)
        cap = want.max if isinstance(want, DimBound) else None
        m = want.multiple_of if isinstance(want, DimBound) and want.multiple_of > 1 else step
        top = cap if cap is not None else max(bound, 2 * env[s] - 1 if headroom else env[s])
        bounds.append((s, top // m * m))
        low = max(1, want.min if isinstance(want, DimBound) else 1)
        lows.append((s, -(-low // m)))
        if m > 1:
            steps.append((s, m))
    return SymbolicPlan(tuple(bounds), tuple(sorted(fixed.items())), tuple(sorted(derived.items())), tuple(lows),
                        tuple(steps))


def _spatial(axes: list[tuple[str, int]], symbols: ModelSymbols) -> bool:
    """A symbol only on the spatial axes of images (axis 2 on of inputs of rank 3 to 5: N, C, spatial...)."""
    return bool(axes) and all(k >= 2 and 3 <= len(symbols.inputs[n].dims or ()) <= 5 for n, k in axes)


def plan_steps(symbols: ModelSymbols, env: Mapping[str, int]) -> list[int]:
    """The steps to plan the free sizes of ``env`` in, in the order to try them: 1 alone unless every free symbol
    is an image's height or width; then the :data:`STEPS` that divide every free size, the largest first (a
    network of strided convolutions needs a multiple of its total stride: trying 1, 2, 4, ... first would
    prepare the model twice for each smaller step only to refuse it), then 1."""
    axes = _axes_of(symbols)
    free = {s: v for s, v in env.items() if v > 1 and not _leading(axes.get(s, []))}
    if not free or not all(_spatial(axes.get(s, []), symbols) for s in free):
        return [1]
    return [m for m in reversed(STEPS) if all(v % m == 0 for v in free.values())] + [1]


def _primes(count: int, low: int, high: int, taken: set[int] | frozenset[int]) -> list[int] | None:
    """``count`` distinct odd primes in [low, high), largest first and not in ``taken``."""
    out: list[int] = []
    for n in range(high - 1, max(low, 3) - 1, -1):
        if n % 2 and all(n % q for q in range(3, int(n ** 0.5) + 1, 2)) and n not in taken:
            out.append(n)
            if len(out) == count:
                return out
    return None


def probe_env(plan: SymbolicPlan, taken: frozenset[int] = frozenset()) -> dict[str, int]:
    """Free-symbol sizes for the probe: distinct primes below the bounds (and about half of them), none of them
    in ``taken``; a stepped symbol's size is its step times such a prime."""
    lows = dict(plan.lows)
    steps = dict(plan.steps)
    out: dict[str, int] = {}
    for s, bound in plan.free:
        m = steps.get(s, 1)
        top = bound // m
        used = taken | set(out.values()) | {top}
        pick = _primes(1, max(lows.get(s, 1), 2), max(top // 2 + 1, 3), used) or \
            _primes(1, max(lows.get(s, 1), 2), top, used)
        if not pick:
            raise SymbolicRefused(f"symbol '{s}' has no probe size below its bound {bound}")
        out[s] = pick[0]
    return {s: v * steps.get(s, 1) for s, v in out.items()}


def _compare_attrs(a: Node, b: Node, envs: tuple[dict[str, int], dict[str, int]]) -> None:
    for key, va in a.attrs.items():
        vb = b.attrs.get(key)
        if _same(va, vb) or (key == "kernel_shape" and is_global_pool(a) and is_global_pool(b)):
            continue
        ints_a, ints_b = np.atleast_1d(np.asarray(va)), np.atleast_1d(np.asarray(vb))
        ok = a.kind.name in SYMBOLIC_ATTR_KINDS and ints_a.dtype.kind == ints_b.dtype.kind == "i" and \
            ints_a.shape == ints_b.shape and all(derive([int(x), int(y)], list(envs)) is not None
                                                 for x, y in zip(ints_a.tolist(), ints_b.tolist()))
        if not ok:
            raise SymbolicRefused(f"{b.where()}: attribute '{key}' depends on the symbols ({va!r} vs {vb!r})")


def _same(a: Any, b: Any) -> bool:
    """Equal attribute values (arrays element by element; NaN equals NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind in "fc"))
    return bool(a == b) or (a != a and b != b)


def _value_exprs(pa: np.ndarray, pb: np.ndarray, envs: tuple[dict[str, int], dict[str, int]]) -> list[str] | None:
    """Each element's expression when every element of a small constant is a polynomial of the symbols (a
    size computed from the sizes, such as a mean's divisor), else None."""
    if pa.size > SYMBOLIC_VALUE_MAX or pa.dtype.kind not in "iuf":
        return None
    exprs: list[str] = []
    for x, y in zip(pa.ravel().tolist(), pb.ravel().tolist()):
        if x != int(x) or y != int(y):
            return None
        d = derive([int(x), int(y)], list(envs))
        if d is None:
            return None
        exprs.append(str(d))
    return exprs


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory (both imports read one weight: no need
    to read its bytes, which for a mapped model file would bring every page in)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides and \
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


#: elements compared at a time (bounds the temporaries a comparison of two large constants makes)
_COMPARE_BLOCK = 1 << 20


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.array_equal`` (NaN equal to NaN) block by block: bitwise equal blocks need no more, the others are
    compared by value."""
    fa, fb = a.reshape(-1), b.reshape(-1)
    nan = a.dtype.kind in "fc"
    for k in range(0, fa.size, _COMPARE_BLOCK):
        xa, xb = fa[k:k + _COMPARE_BLOCK], fb[k:k + _COMPARE_BLOCK]
        if xa.tobytes() != xb.tobytes() and not np.array_equal(xa, xb, equal_nan=nan):
            return False
    return True


def _compare_constants(a: Constant, b: Constant, envs: tuple[dict[str, int], dict[str, int]],
                       computed: list[tuple[Constant, list[str]]]) -> None:
    pa, pb = np.asarray(a.payload), np.asarray(b.payload)
    if pa.shape == pb.shape:
        if _same_array(pa, pb) or pa.dtype == pb.dtype and _equal(pa, pb):
            return
        exprs = _value_exprs(pa, pb, envs) if b.type.elem in SYMBOLIC_VALUE_KINDS else None
        if exprs is None:
            raise SymbolicRefused(f"constant '{b.name}' has values that depend on the symbols")
        computed.append((b, exprs))
        return
    if pa.ndim != pb.ndim or any(x > y for x, y in zip(pa.shape, pb.shape)):
        raise SymbolicRefused(f"constant '{b.name}' changes shape with the symbols")
    corner = pb[tuple(slice(0, n) for n in pa.shape)]
    if not np.array_equal(corner, pa, equal_nan=pa.dtype.kind in "fc"):
        raise SymbolicRefused(f"constant '{b.name}' is not a corner of its bound-size version")


def _computed_at_run_time(fn: Function, computed: list[tuple[Constant, list[str]]]) -> None:
    """Replace each constant computed from the sizes by a SymbolicValue of its expressions."""
    for c, exprs in computed:
        attrs = {"exprs": exprs, "values": [float(v) for v in np.asarray(c.payload).ravel().tolist()],
                 "shape": list(c.type.shape), "to": c.type.elem}
        with fn.inserting_before(fn.nodes[0]):
            node = fn.create("SymbolicValue", [], attrs, name=f"{c.name}.sizes")
        fn.replace_all_uses_with(c, node.outputs[0])
    if computed:
        fn.erase_unused_constants()


def _pair_nodes(va: Value, vb: Value, envs: tuple[dict[str, int], dict[str, int]],
                stack: list[Pair], computed: list[tuple[Constant, list[str]]]) -> None:
    if type(va) is not type(vb) or va.type.elem != vb.type.elem or va.type.rank != vb.type.rank:
        raise SymbolicRefused(f"value '{vb.name}' differs in kind or type between the probe and the bounds")
    if isinstance(va, NodeOutput) and isinstance(vb, NodeOutput):
        na, nb = va.node, vb.node
        if na.kind is not nb.kind or va.index != vb.index or len(na.inputs) != len(nb.inputs):
            raise SymbolicRefused(f"{nb.where()}: the graph at the bounds differs from the probe's")
        _compare_attrs(na, nb, envs)
        if len(na.outputs) != len(nb.outputs):
            raise SymbolicRefused(f"{nb.where()}: the number of results differs")
        stack.extend((x, y, None) for x, y in zip(na.outputs, nb.outputs))  # (results no output reads get dims too)
        for k, (x, y) in enumerate(zip(na.inputs, nb.inputs)):
            if (x is None) != (y is None):
                raise SymbolicRefused(f"{nb.where()}: an optional operand differs")
            if x is not None and y is not None:
                stack.append((x, y, (nb, k)))
    elif isinstance(va, Constant) and isinstance(vb, Constant):
        _compare_constants(va, vb, envs, computed)
    elif isinstance(va, Placeholder) and va.name != vb.name:
        raise SymbolicRefused(f"input '{vb.name}' pairs with '{va.name}'")


#: a value of the probe's graph, its twin at the bounds, and the use (node, operand) the twin was reached by
Pair = tuple[Value, Value, "tuple[Node, int] | None"]


def _unshare(fb: Function, c: Constant, use: tuple[Node, int]) -> Constant:
    """A copy of ``c`` for one use: equal bounds of two symbols can make two constants of the probe's graph (the
    index tables of a resize along the height and the width) one at the bounds, which each needs its dims."""
    clone = fb.add_constant(c.payload, fb.unique_name(c.name), c.type)
    use[0].set_input(use[1], clone)
    return clone


def annotate(fa: Function, fb: Function, env_a: dict[str, int], env_b: dict[str, int]) -> int:
    """Give every value of ``fb`` (the bound function) its symbolic dims, from its twin in ``fa`` (the probe's);
    returns how many values have some. Raises :class:`SymbolicRefused` where the two differ otherwise."""
    outs_a, outs_b = dict(fa.outputs), dict(fb.outputs)
    if list(outs_a) != list(outs_b):
        raise SymbolicRefused("the outputs differ between the probe and the bounds")
    stack: list[Pair] = [(outs_a[n], outs_b[n], None) for n in outs_b] + \
        [(x, y, None) for x, y in zip(fa.inputs, fb.inputs)]
    seen: dict[int, Value] = {}
    envs = (env_a, env_b)
    computed: list[tuple[Constant, list[str]]] = []
    count = 0
    while stack:
        va, vb, use = stack.pop()
        if id(vb) in seen and seen[id(vb)] is not va and isinstance(vb, Constant) and use is not None:
            vb = _unshare(fb, vb, use)  # one constant at the bounds, two at the probe (equal bounds, CSE)
        if id(vb) in seen:
            if seen[id(vb)] is not va:
                raise SymbolicRefused(f"value '{vb.name}' pairs with two values of the probe's graph")
            continue
        seen[id(vb)] = va
        _pair_nodes(va, vb, envs, stack, computed)
        sym: list[SymExpr | None] = []
        for da, db in zip(va.type.shape, vb.type.shape):
            d = derive([da, db], [env_a, env_b])
            if d is None or (isinstance(d, SymExpr) and not d.monotone()):
                striding = any(n.kind.name in STRIDING_KINDS for n in fb.nodes)
                raise SymbolicRefused(f"value '{vb.name}': a size ({da} at the probe, {db} at the bounds) is no "
                                      "growing polynomial of the symbols", stepped=striding)
            sym.append(d if isinstance(d, SymExpr) else None)
        if any(e is not None for e in sym):
            vb.type = vb.type.with_sym(tuple(sym))
            count += 1
    _computed_at_run_time(fb, computed)
    return count + len(computed)


def check_nodes(fn: Function, symbolic_kinds: frozenset[str]) -> None:
    """Every node is safe on padded layouts or has a symbolic kernel (``symrules.py``)."""
    for node in fn.nodes:
        why = needs_symbolic_kernel(node)
        if why is not None and node.kind.name not in symbolic_kinds:
            raise SymbolicRefused(f"{node.where()}: {why}, and the backend has no symbolic kernel for "
                                  f"{node.kind.name}", final=True)


#: (input shapes) -> the function prepared for the backend at those shapes
Prepare = Callable[[dict[str, tuple[int, ...]]], Function]


def shapes_at(symbols: ModelSymbols, env: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Every input's shape when the open symbols have the sizes ``env`` (the dims fix the others)."""
    axes = _axes_of(symbols)
    where = {(n, k): s for s, pairs in axes.items() for n, k in pairs}
    out: dict[str, tuple[int, ...]] = {}
    for name, inp in symbols.inputs.items():
        if inp.dims is None:
            continue
        dims = []
        for k, d in enumerate(inp.dims):
            sym = where.get((name, k))
            fixed = d.size if d.size is not None else symbols.dims.get(d.symbol or "")
            dims.append(int(env[sym]) if sym is not None else int(fixed))  # type: ignore[arg-type]
        out[name] = tuple(dims)
    return out


def prepare_symbolic(symbols: ModelSymbols, plan: SymbolicPlan, prepare: Prepare,
                     symbolic_kinds: frozenset[str]) -> Function:
    """The bound function of ``plan``, annotated with its symbolic dims and checked (module doc)."""
    probe = plan.env(probe_env(plan))
    bound = plan.env({s: b for s, b in plan.free})
    try:
        fa = prepare(shapes_at(symbols, probe))
        fb = prepare(shapes_at(symbols, bound))
    except SymbolicRefused:
        raise
    except GlowError as e:
        raise SymbolicRefused(f"the model does not import at the probe or bound sizes ({e})") from None
    if annotate(fa, fb, plan.quotients(probe), plan.quotients(bound)) == 0:
        raise SymbolicRefused("no value has a symbolic size")
    check_nodes(fb, symbolic_kinds)
    return fb


__all__ = ["default_env", "DEFAULT_BOUND", "SymbolicPlan", "SymbolicRefused", "annotate", "check_nodes",
           "feed_env", "large_bound", "make_plan", "plan_steps", "prepare_symbolic", "probe_env", "shapes_at",
           "SymbolicCompiles"]


class SymbolicCompiles:
    """The symbolic compiles of one model: the plans compiled (most recent first) and those refused."""

    def __init__(self, symbols: ModelSymbols, compile_plan: Callable[[SymbolicPlan], Any]) -> None:
        self.symbols = symbols
        self.compile = compile_plan
        self.plans: list[SymbolicPlan] = []
        self.refused: dict[SymbolicPlan, str] = {}
        #: sets of free symbols a node kind ruled out (no plan freeing them is tried again) -> why
        self.disabled: dict[frozenset[str], str] = {}

    def candidates(self, env: Mapping[str, int], *, eager: bool = False) -> Iterator[SymbolicPlan]:
        """Plans that can run sizes ``env``: the compiled ones first, then new ones to try (none once disabled;
        ``eager``: sizes made up before any feed, so no relation between symbols is read from them), in the
        steps of :func:`plan_steps`. Lazily: a run that a compiled plan serves makes no new plan."""
        known = [p for p in self.plans if p.accepts(env)]
        yield from known
        if not env:
            return
        relations = (False,) if eager else (False, True)
        seen = set(known)
        largest = max(env.values())
        # past the default bounds, one bound that holds the sizes, without doubling them (``large_bound``)
        bounds = [(b, True) for b in DEFAULT_BOUNDS if b >= largest] or [(large_bound(largest), False)]
        for m in plan_steps(self.symbols, env):
            for b, headroom in bounds:
                for relate in relations:
                    p = make_plan(self.symbols, env, relate=relate and m == 1, bound=b, step=m, headroom=headroom)
                    if p not in seen and p not in self.refused and p.free and p.accepts(env) and \
                            self.free_set(p) not in self.disabled:
                        seen.add(p)
                        yield p

    @staticmethod
    def free_set(plan: SymbolicPlan) -> frozenset[str]:
        """The key of a plan's refusals that rule out others: its free symbols, each with its step."""
        return SymbolicCompiles._key(plan, dict(plan.steps))

    @staticmethod
    def _key(plan: SymbolicPlan, steps: Mapping[str, int]) -> frozenset[str]:
        return frozenset(f"{s}*{steps.get(s, 1)}" for s, _ in plan.free)

    def refuse(self, plan: SymbolicPlan, error: SymbolicRefused) -> None:
        """Record a refusal; a final one rules out the plan's free symbols at every step, a stepped one at its
        step."""
        self.refused[plan] = str(error)
        if error.final:
            for m in (1, *STEPS):
                self.disabled[self._key(plan, {s: m for s, _ in plan.free})] = str(error)
        elif error.stepped:
            self.disabled[self.free_set(plan)] = str(error)

    def compiled(self, plan: SymbolicPlan) -> None:
        if plan in self.plans:
            self.plans.remove(plan)
        self.plans.insert(0, plan)
