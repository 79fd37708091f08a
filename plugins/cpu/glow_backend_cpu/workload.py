"""How much work a kernel is, estimated at compile time: which kernels are worth a second thread.

Handing a kernel to the worker threads costs a barrier on each side: a few
microseconds on an idle machine, and a whole scheduler time slice when a worker
has been descheduled because another process is busy. A kernel whose own run
time is below that cost runs on the calling thread alone ("solo"): the code
generator calls it with ``tid = 0, nthreads = 1`` on thread 0 only, and puts no
barrier between consecutive solo kernels (one thread is ordered with itself).
A function whose kernels are all solo never wakes a worker at all.

The estimate is a single-thread time in nanoseconds from the LIR instruction's
shapes: FLOPs for the kinds :data:`~glow_backend_cpu.profiling.FLOP_RULES`
counts (convolutions, matrix products), window taps for pooling, and elements
read plus written for everything else, with transcendental kinds weighted up.
The rates are round figures for one AVX2 core; only the order of magnitude
matters, since the threshold (:data:`DEFAULT_SOLO_NS`) is set well away from
kernels that gain from a second thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from glow_backend_cpu.profiling import FLOP_RULES

#: kernels estimated below this many nanoseconds on one thread run on the calling thread only
DEFAULT_SOLO_NS = 20_000
#: overrides the default (``0``: every kernel runs on every thread, as tests of the partitioning do)
SOLO_ENV = "GLOW_CPU_SOLO_NS"

NS_PER_FLOP = 1 / 24.0
NS_PER_ELEMENT = 0.3
NS_PER_TRANSCENDENTAL = 2.0
#: a call of a kernel (argument set-up, loop entry) even when it has no work
NS_PER_CALL = 50.0

TRANSCENDENTAL = frozenset({
    "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
    "Asinh", "Acosh", "Atanh", "Softmax", "LogSoftmax", "Gelu", "Softplus", "Softsign", "Elu", "Selu", "Mish",
    "HardSwish", "Div", "Sqrt", "Reciprocal",
})


def _size(op: Any) -> int:
    v = getattr(op, "value", None)
    return math.prod(v.type.shape) if v is not None else 0


def _pool(ins: Any) -> float:
    kernel = ins.attrs.get("kernel_shape") or ins.attrs.get("kernel") or ()
    taps = math.prod(int(k) for k in kernel) if kernel else 1
    return sum(_size(o) for o in ins.outs) * taps * NS_PER_ELEMENT


#: LIR kind -> estimated ns, for kinds neither FLOP-counted nor plain element-wise
NS_RULES: Mapping[str, Callable[[Any], float]] = {"MaxPool": _pool, "AvgPool": _pool}


def instr_ns(ins: Any) -> float:
    """Estimated single-thread nanoseconds of one LIR instruction."""
    flops = FLOP_RULES.get(ins.kind)
    if flops is not None:
        return float(flops(ins)) * NS_PER_FLOP
    rule = NS_RULES.get(ins.kind)
    if rule is not None:
        return float(rule(ins))
    elems = sum(_size(op) for op in ins.ins if op is not None) + sum(_size(op) for op in ins.outs)
    per = NS_PER_TRANSCENDENTAL if ins.kind in TRANSCENDENTAL else NS_PER_ELEMENT
    return elems * per


def kernel_ns(instrs: Sequence[Any]) -> float:
    """Estimated single-thread nanoseconds of one kernel (an instruction or a fused chain)."""
    return NS_PER_CALL + sum(instr_ns(i) for i in instrs)


def _directions(ins: Any) -> int:
    w = ins.ins[1].value if len(ins.ins) > 1 and ins.ins[1] is not None else None
    return int(w.type.shape[0]) if w is not None else 1


#: LIR kind -> how many threads its emitter can keep busy (a recurrent layer: one per direction)
THREAD_LIMITS: Mapping[str, Callable[[Any], int]] = {"GRU": _directions, "LSTM": _directions}


def is_solo(instrs: Sequence[Any], solo_ns: float) -> bool:
    """Should this kernel run on the calling thread only? (Too little work, or work one thread must do.)"""
    if solo_ns <= 0:
        return False
    if all(ins.kind in THREAD_LIMITS and THREAD_LIMITS[ins.kind](ins) <= 1 for ins in instrs):
        return True
    return kernel_ns(instrs) < solo_ns


__all__ = ["DEFAULT_SOLO_NS", "SOLO_ENV", "instr_ns", "is_solo", "kernel_ns"]
