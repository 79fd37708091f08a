"""Kind-agnostic cleanup passes: DCE, CSE (nodes and constants), constant folding."""

from __future__ import annotations

import hashlib
import math
from typing import Any, Hashable

import numpy as np

from glow_core import budget
from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Constant, Function, Node, Value
from glow_core.ir.interning import intern
from glow_core.passinfra import PassContext, graph_pass
from glow_core.reference import run_kernel

#: fold a node only when its results are no larger than this many elements, or
#: no larger than its constant operands (folding must not blow up the weights)
FOLD_MAX_ELEMENTS = 1 << 20


@graph_pass("dce")
def dead_code_elimination(fn: Function, ctx: PassContext) -> bool:
    """Remove nodes whose results are never used, and constants nobody reads."""
    changed = False
    for node in reversed(list(fn.nodes)):
        if not node.has_users() and not any(fn.is_output(o) for o in node.outputs):
            fn.erase_node(node)
            changed = True
    return bool(fn.erase_unused_constants()) or changed


def _attr_key(v: Any) -> Hashable:
    if isinstance(v, np.ndarray):
        return ("nd", str(v.dtype), v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    return v


#: how many evenly spaced elements of a constant go into its cheap fingerprint
FINGERPRINT_SAMPLES = 64


def _const_fingerprint(c: Constant) -> Hashable:
    """Type plus the payload's first and last elements: equal constants share it, most unequal ones do not. (Both
    ends, not a strided sample: a weight read from a mapped model file then brings in two pages, not all.)"""
    flat = c.payload.reshape(-1)
    return (c.type, flat[:FINGERPRINT_SAMPLES].tobytes(), flat[-FINGERPRINT_SAMPLES:].tobytes())


def _const_key(c: Constant) -> Hashable:
    return (c.type, hashlib.blake2b(c.payload.reshape(-1).view(np.uint8).data, digest_size=16).hexdigest())


#: how many distinct payloads of one fingerprint group are compared byte by byte before the rest are hashed
CSE_COMPARE_REPS = 8


def _same_payload(a: Constant, b: Constant) -> bool:
    return a.type == b.type and np.array_equal(a.payload.reshape(-1).view(np.uint8), b.payload.reshape(-1).view(np.uint8))


def _merge_constants(fn: Function, group: list[Constant]) -> bool:
    """Replace each constant of ``group`` (one fingerprint) equal to an earlier one by that one.

    A comparison runs at memory speed where hashing is an order of magnitude slower, so each constant is
    compared with the first few distinct payloads of its group; beyond those (many distinct constants
    that share a fingerprint) payloads are told apart by a hash, which keeps the work linear.
    """
    reps: list[Constant] = []
    by_hash: dict[Hashable, Constant] = {}
    changed = False
    for c in group:
        kept = next((r for r in reps if _same_payload(r, c)), None)
        if kept is None and len(reps) >= CSE_COMPARE_REPS:
            kept = by_hash.setdefault(_const_key(c), c)
        if kept is None:
            reps.append(c)
        elif kept is not c:
            fn.replace_all_uses_with(c, kept)
            changed = True
    return changed


@graph_pass("cse")
def common_subexpression_elimination(fn: Function, ctx: PassContext) -> bool:
    """Merge duplicate constants (same type and bytes) and duplicate nodes (same kind, attributes, operands)."""
    changed = False
    by_print: dict[Hashable, list[Constant]] = {}
    for c in fn.constants:
        by_print.setdefault(_const_fingerprint(c), []).append(c)
    for group in by_print.values():
        if len(group) > 1:  # a constant with a unique fingerprint has no duplicate: its payload is never read
            changed |= _merge_constants(fn, group)
    if changed:
        fn.erase_unused_constants()
    seen: dict[Hashable, Node] = {}
    for node in list(fn.nodes):
        key = (
            node.kind.name,
            tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items())),
            tuple(id(v) if v is not None else None for v in node.inputs),
        )
        first = seen.setdefault(key, node)
        if first is node:
            continue
        for old, new in zip(node.outputs, first.outputs):
            fn.replace_all_uses_with(old, new)
        fn.erase_node(node)
        changed = True
    return changed


def _nbytes(v: Value) -> int:
    return math.prod(v.type.shape) * v.type.elem.itemsize


def _free_dead(fn: Function, operands: list[Value]) -> int:
    """Drop the operands no node reads any more (and no output is); the bytes freed."""
    dead = {id(c): c for c in operands if isinstance(c, Constant) and not c.users and not fn.is_output(c)}
    if not dead:
        return 0
    fn.constants = [c for c in fn.constants if id(c) not in dead]
    return sum(_nbytes(c) for c in dead.values())


@graph_pass("fold-constants")
def constant_folding(fn: Function, ctx: PassContext) -> bool:
    """Evaluate nodes whose operands are all constants with the reference kernels (``glow_core.reference``);
    each result is charged against the memory budget before it is computed, and operands left dead are
    freed at once."""
    changed = False
    limits = budget.current()
    live = sum(_nbytes(c) for c in fn.constants)
    for node in list(fn.nodes):
        ins = [v for v in node.inputs if v is not None]
        if not all(isinstance(v, Constant) for v in ins):
            continue
        out_size = sum(o.type.size for o in node.outputs)
        if out_size > max(FOLD_MAX_ELEMENTS, sum(v.type.size for v in ins)):
            continue
        where = f"constant folding of {node.where()}"
        added = sum(limits.check_tensor(o.type.shape, o.type.elem.itemsize, where, "folded constant")
                    for o in node.outputs)
        limits.check_total(live + added, where, "the function's constants")
        try:
            results = run_kernel(node.kind.name, node.attrs,
                                 [v.payload if isinstance(v, Constant) else None for v in node.inputs],
                                 [o.type for o in node.outputs], where)
        except UnsupportedError:
            continue
        for o, r in zip(node.outputs, results):
            c = fn.add_constant(intern(np.asarray(r)), o.name, o.type)  # (held once: ir/interning.py)
            fn.replace_all_uses_with(o, c)
        fn.erase_node(node)
        live += added - _free_dead(fn, ins)
        changed = True
    if changed:
        fn.erase_unused_constants()
    return changed
