"""Kernels of the cpu backend on functions compiled for symbolic dims (issue 28).

Each test compiles one node once at the bound with some axes symbolic (``TensorType.sym``), then runs it at
several sizes (1, the bound, sizes that are no multiple of the vector width). Before every checked run the
same executable runs once at the bound with NaN-filled inputs, so every buffer's padding holds NaN: a kernel
that lets a padding entry into a valid result gives NaN (or a wrong value) there. Each run is compared with
numpy at the actual size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.errors import UnsupportedError
from glow_core.ir.graph import Function
from glow_core.ir.types import TensorType
from glow_core.ir.symbolic import SymExpr
from glow_core.pipeline import compile_options
from glow_core.plugin_host import get_backend
from glow_tools.testing import one_node_function, prepare_for
from tests.transformer_models import attention_model

S = SymExpr.symbol("s")
T = SymExpr.symbol("t")
Sym = tuple[Any, ...]


def compile_symbolic(kind: str, operands: Sequence[np.ndarray], attrs: dict[str, Any], in_syms: Sequence[Sym | None],
                     out_sym: Sym, consts: Sequence[int] = (), threads: int | None = None) -> Any:
    """One ``kind`` node compiled once at the bound shapes of ``operands``, input ``i`` with the symbolic axes
    ``in_syms[i]``, every node result with ``out_sym`` (a lowered node's results all share its shape)."""
    return compile_function(one_node_function(kind, list(operands), attrs, consts=consts), in_syms, out_sym, threads)


def compile_function(fn: Function, in_syms: Sequence[Sym | None], out_sym: Sym, threads: int | None = None) -> Any:
    """:func:`compile_symbolic` of a function whose inputs are ``in0``, ``in1``, ..."""
    be = get_backend("cpu")
    prepare_for(fn, be)
    for v in fn.inputs:
        sym = in_syms[int(v.name[2:])]
        if sym is not None:
            v.type = v.type.with_sym(sym)
    for n in fn.nodes:
        for v in n.outputs:
            v.type = v.type.with_sym(out_sym)
    return be.compile(fn, compile_options(threads=threads))


def check_sizes(exe: Any, names: Sequence[str], bound: Sequence[np.ndarray], make: Callable[[int], list[np.ndarray]],
                want: Callable[[list[np.ndarray]], np.ndarray], sizes: Sequence[int], rtol: float = 2e-5,
                atol: float = 2e-5) -> None:
    """For each size: a poisoning run (NaN inputs at the bound), then the inputs ``make(size)`` compared with
    ``want(inputs)``."""
    for n in sizes:
        poison = {k: np.full(a.shape, np.nan, dtype=a.dtype) for k, a in zip(names, bound)}
        exe.execute(poison)
        ins = make(n)
        out = list(exe.execute(dict(zip(names, ins))).values())[0]
        ref = want(ins)
        assert out.shape == ref.shape, (n, out.shape, ref.shape)
        assert not np.isnan(out).any(), f"size {n}: NaN from the padding"
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=f"size {n}")


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# -- FusedAttention -------------------------------------------------------------------------------------------

def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attention(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: float) -> np.ndarray:
    s = (q.astype(np.float64) @ kt) * scale
    if mask is not None:
        s = s + mask
    return (_softmax(s) @ v).astype(np.float32)


@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_attention_symbolic_keys_decode(with_mask: bool, threads: int) -> None:
    """GPT-2 decode: one query row, the keys (past + 1) symbolic; only valid keys enter softmax and P @ V."""
    rng = np.random.default_rng(1)
    H, D, N = 3, 24, 70
    bound = [_rand(rng, 1, H, 1, D), _rand(rng, 1, H, D, N), _rand(rng, 1, H, N, D)]
    syms: list[Sym | None] = [None, (None, None, None, S), (None, None, S, None)]
    if with_mask:
        bound.append(_rand(rng, 1, 1, 1, N))
        syms.append((None, None, None, S))
    exe = compile_symbolic("FusedAttention", bound, {"scale": 0.125}, syms, (None,) * 4, threads=threads)
    names = [f"in{i}" for i in range(len(bound))]

    def make(n: int) -> list[np.ndarray]:
        return [bound[0], _rand(rng, 1, H, D, n), _rand(rng, 1, H, n, D)] + \
            ([_rand(rng, 1, 1, 1, n)] if with_mask else [])

    def want(ins: list[np.ndarray]) -> np.ndarray:
        return _attention(ins[0], ins[1], ins[2], ins[3] if with_mask else None, 0.125)

    check_sizes(exe, names, bound, make, want, [1, 5, 16, 17, 33, 64, 69, 70])


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_symbolic_sequence_bert(threads: int) -> None:
    """BERT: queries and keys both the sequence; a [B, 1, 1, S] mask with -inf entries (fully masked columns)."""
    rng = np.random.default_rng(2)
    B, H, D, N = 2, 2, 16, 37
    bound = [_rand(rng, B, H, N, D), _rand(rng, B, H, D, N), _rand(rng, B, H, N, D), _rand(rng, B, 1, 1, N)]
    syms: list[Sym | None] = [(None, None, S, None), (None, None, None, S), (None, None, S, None),
                              (None, None, None, S)]
    exe = compile_symbolic("FusedAttention", bound, {"scale": 4.0, "scale_op": "div"}, syms,
                           (None, None, S, None), threads=threads)

    def make(n: int) -> list[np.ndarray]:
        mask = np.where(rng.random((B, 1, 1, n)) < 0.3, -np.inf, 0.0).astype(np.float32)
        mask[..., 0] = 0.0
        return [_rand(rng, B, H, n, D), _rand(rng, B, H, D, n), _rand(rng, B, H, n, D), mask]

    check_sizes(exe, ["in0", "in1", "in2", "in3"], bound, make,
                lambda i: _attention(i[0], i[1], i[2], i[3], 0.25), [1, 2, 3, 5, 16, 17, 36, 37])


def test_attention_symbolic_head_size_unsupported() -> None:
    rng = np.random.default_rng(3)
    bound = [_rand(rng, 1, 4, 8), _rand(rng, 1, 8, 4), _rand(rng, 1, 4, 8)]
    with pytest.raises(UnsupportedError):
        compile_symbolic("FusedAttention", bound, {}, [(None, None, S), (None, S, None), None], (None, None, None))


# -- FusedLayerNorm -------------------------------------------------------------------------------------------

def _layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return ((x - m) / np.sqrt(var + eps) * g + b).astype(np.float32)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lead", [(1,), (3,)])
def test_layernorm_symbolic_rows(lead: tuple[int, ...], threads: int) -> None:
    rng = np.random.default_rng(4)
    N, H = 300, 45
    x, g, bias = _rand(rng, *lead, N, H), _rand(rng, H), _rand(rng, H)
    sym = (None,) * len(lead) + (S, None)
    exe = compile_symbolic("FusedLayerNorm", [x, g, bias], {"epsilon": 1e-5}, [sym, None, None], sym,
                           consts=(1, 2), threads=threads)
    check_sizes(exe, ["in0"], [x], lambda n: [_rand(rng, *lead, n, H)],
                lambda i: _layernorm(i[0], g, bias, 1e-5), [1, 7, 16, 299, 300], rtol=1e-4, atol=1e-4)


def test_layernorm_two_symbolic_leading_axes() -> None:
    """Rows over [s, 2, t]: the valid rows are no prefix; each maps to its place in the bound layout."""
    rng = np.random.default_rng(20)
    x, g, bias = _rand(rng, 9, 2, 11, 40), _rand(rng, 40), _rand(rng, 40)
    sym = (S, None, T, None)
    exe = compile_symbolic("FusedLayerNorm", [x, g, bias], {"epsilon": 1e-5}, [sym, None, None], sym, consts=(1, 2))
    for s_, t_ in [(1, 1), (9, 11), (4, 7), (8, 1), (1, 10)]:
        exe.execute({"in0": np.full(x.shape, np.nan, np.float32)})
        a = _rand(rng, s_, 2, t_, 40)
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_allclose(out, _layernorm(a, g, bias, 1e-5), rtol=1e-4, atol=1e-4, err_msg=f"{s_}, {t_}")


def test_layernorm_symbolic_normalized_axis_unsupported() -> None:
    rng = np.random.default_rng(5)
    x, g = _rand(rng, 4, 20), _rand(rng, 20)
    with pytest.raises(UnsupportedError):
        compile_symbolic("FusedLayerNorm", [x, g], {"epsilon": 1e-5}, [(None, S), None], (None, S), consts=(1,))


# -- MatMul / FusedMatMul -----------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("N", [100, 64, 1])
def test_matmul_symbolic_rows_constant_weight(N: int, threads: int) -> None:
    """A linear layer [1, S, K] @ W: only the M panels covering the valid rows are computed (N = 1: the
    matrix x vector path computes every row)."""
    rng = np.random.default_rng(6)
    K, M = 48, 53
    a, w = _rand(rng, 1, M, K), _rand(rng, K, N)
    exe = compile_symbolic("MatMul", [a, w], {}, [(None, S, None), None], (None, S, None), consts=(1,),
                           threads=threads)
    check_sizes(exe, ["in0"], [a], lambda n: [_rand(rng, 1, n, K)], lambda i: i[0] @ w,
                [1, 5, 6, 7, 12, 13, 47, 52, 53], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_symbolic_scores_times_values(threads: int) -> None:
    """P [B, H, S, T] @ V [B, H, T, D]: M = S and K = T symbolic (two symbols)."""
    rng = np.random.default_rng(7)
    B, H, M, K, D = 1, 3, 21, 37, 40
    p, v = _rand(rng, B, H, M, K), _rand(rng, B, H, K, D)
    exe = compile_symbolic("MatMul", [p, v], {}, [(None, None, S, T), (None, None, T, None)],
                           (None, None, S, None), threads=threads)
    for m, k in [(1, 1), (21, 37), (5, 17), (13, 2), (20, 36)]:
        exe.execute({"in0": np.full(p.shape, np.nan, np.float32), "in1": np.full(v.shape, np.nan, np.float32)})
        pa, va = _rand(rng, B, H, m, k), _rand(rng, B, H, k, D)
        out = exe.execute({"in0": pa, "in1": va})["out0"]
        np.testing.assert_allclose(out, pa @ va, rtol=1e-4, atol=1e-4, err_msg=f"{m}x{k}")


@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_symbolic_queries_times_keys(threads: int) -> None:
    """Q [B, H, S, D] @ KT [B, H, D, T]: M = S symbolic, N = T symbolic."""
    rng = np.random.default_rng(8)
    q, kt = _rand(rng, 2, 2, 30, 16), _rand(rng, 2, 2, 16, 45)
    exe = compile_symbolic("MatMul", [q, kt], {}, [(None, None, S, None), (None, None, None, T)],
                           (None, None, S, T), threads=threads)
    for m, n in [(1, 1), (30, 45), (7, 17), (29, 3)]:
        exe.execute({"in0": np.full(q.shape, np.nan, np.float32), "in1": np.full(kt.shape, np.nan, np.float32)})
        qa, ka = _rand(rng, 2, 2, m, 16), _rand(rng, 2, 2, 16, n)
        out = exe.execute({"in0": qa, "in1": ka})["out0"]
        assert not np.isnan(out).any()
        np.testing.assert_allclose(out, qa @ ka, rtol=1e-4, atol=1e-4, err_msg=f"{m}x{n}")


@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_symbolic_n_computes_only_the_valid_tiles(threads: int) -> None:
    """A symbolic N (a decode step's scores over the keys so far): only the N tiles covering the run's columns
    are computed, and of the last one only the vectors covering them. The columns past those keep what the
    run before wrote there; a kernel computing the whole bound (or the whole last tile) would overwrite them
    with products of the new queries."""
    rng = np.random.default_rng(11)
    q, kt = _rand(rng, 1, 3, 1, 16), _rand(rng, 1, 3, 16, 300)
    exe = compile_symbolic("MatMul", [q, kt], {}, [None, (None, None, None, T)], (None, None, None, T),
                           threads=threads)
    exe.execute({"in0": q, "in1": kt})
    (buf,) = [buf for _region, _name, _dtype, _shape, buf in exe._out_plan]
    for n in (5, 40, 1, 100):
        before = buf.copy()
        qa, ka = _rand(rng, 1, 3, 1, 16), _rand(rng, 1, 3, 16, n)
        out = exe.execute({"in0": qa, "in1": ka})["out0"]
        np.testing.assert_allclose(out, qa @ ka, rtol=1e-4, atol=1e-4, err_msg=f"N={n}")
        # a vector is at most 16 lanes: the columns past the run's last vector are never this run's
        edge = -(-n // 16) * 16
        np.testing.assert_array_equal(buf[..., edge:], before[..., edge:], err_msg=f"N={n}: padding recomputed")


@pytest.mark.parametrize("N", [20, 1])
def test_matmul_symbolic_long_k_blocks(N: int) -> None:
    """K past one K block (1024 rows): the blocks after the run's K are skipped, the last valid one finishes."""
    rng = np.random.default_rng(9)
    a, b = _rand(rng, 9, 1100), _rand(rng, 1100, N)
    exe = compile_symbolic("MatMul", [a, b], {}, [(None, S), (S, None)], (None, None), threads=2)
    for k in [1, 500, 1024, 1025, 1030, 1100]:
        exe.execute({"in0": np.full(a.shape, np.nan, np.float32), "in1": np.full(b.shape, np.nan, np.float32)})
        aa, ba = _rand(rng, 9, k), _rand(rng, k, N)
        out = exe.execute({"in0": aa, "in1": ba})["out0"]
        np.testing.assert_allclose(out, aa @ ba, rtol=1e-4, atol=1e-3, err_msg=f"K={k}")


def test_matmul_symbolic_k_with_constant_unsupported() -> None:
    rng = np.random.default_rng(10)
    a, w = _rand(rng, 4, 8), _rand(rng, 8, 5)
    with pytest.raises(UnsupportedError):
        compile_symbolic("MatMul", [a, w], {}, [(None, S), None], (None, None), consts=(1,))


# -- Softmax, reductions --------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,sym", [((2, 3, 45), (None, None, S)), ((1, 40, 45), (None, T, S)),
                                       ((150, 70), (T, S)), ((2, 30, 45), (None, T, S)),
                                       ((3, 20, 7, 33), (None, T, None, S))])
def test_softmax_symbolic_row(shape: tuple[int, ...], sym: Sym, threads: int) -> None:
    rng = np.random.default_rng(11)
    x = _rand(rng, *shape)
    exe = compile_symbolic("Softmax", [x], {"axes": [len(shape) - 1]}, [sym], sym, threads=threads)
    for sizes in [{"s": 1, "t": 1}, {"s": 16, "t": 3}, {"s": 17, "t": 39}, {"s": shape[-1], "t": shape[-2]},
                  {"s": 31, "t": 2}]:
        exe.execute({"in0": np.full(shape, np.nan, np.float32)})
        actual = tuple(d if e is None else min(d, sizes[str(e)]) for d, e in zip(shape, sym))
        a = _rand(rng, *actual) * 3
        out = exe.execute({"in0": a})["out0"]
        assert not np.isnan(out).any(), sizes
        np.testing.assert_allclose(out, _softmax(a.astype(np.float64)), rtol=1e-5, atol=1e-6, err_msg=str(sizes))


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("shape,sym,axes", [
    ((2, 37, 40), (None, S, None), [1]),     # a kept innermost axis: vectors of outputs
    ((3, 4, 45), (None, None, S), [2]),      # rows of the last axis
    ((3, 45, 4), (None, S, None), [1, 2]),   # a symbolic axis beside a fixed one
    ((33, 5), (S, None), [0, 1]),            # everything
])
def test_reduce_symbolic_axis(kind: str, shape: tuple[int, ...], sym: Sym, axes: list[int]) -> None:
    rng = np.random.default_rng(12)
    x = _rand(rng, *shape)
    ref = {"ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min, "ReduceProd": np.prod}[kind]
    exe = compile_symbolic(kind, [x], {"axes": axes, "keepdims": True}, [sym], (None,) * len(shape))
    bound = shape[sym.index(S)]
    for n in [1, 2, 16, 17, bound - 1, bound]:
        exe.execute({"in0": np.full(shape, np.nan, np.float32)})
        a = rng.uniform(0.8, 1.2, tuple(n if e is not None else d for d, e in zip(shape, sym))).astype(np.float32)
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_allclose(out, ref(a, axis=tuple(axes), keepdims=True), rtol=1e-5, err_msg=f"size {n}")


@pytest.mark.parametrize("kind", ["ArgMax", "ArgMin"])
def test_argmax_symbolic_axis(kind: str) -> None:
    rng = np.random.default_rng(13)
    x = _rand(rng, 4, 30)
    exe = compile_symbolic(kind, [x], {"axis": 1, "keepdims": True}, [(None, S)], (None, None))
    for n in [1, 2, 17, 29, 30]:
        poison = np.full(x.shape, 1e30 if kind == "ArgMax" else -1e30, np.float32)
        exe.execute({"in0": poison})
        a = _rand(rng, 4, n)
        out = exe.execute({"in0": a})["out0"]
        want = (np.argmax if kind == "ArgMax" else np.argmin)(a, axis=1).reshape(4, 1)
        np.testing.assert_array_equal(out, want, err_msg=f"size {n}")


# -- Concat ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("inner", [64, 3])
def test_concat_kv_cache(inner: int, threads: int) -> None:
    """GPT-2's KV cache: past [1, H, s, D] and new [1, H, 1, D] along axis 2 into [1, H, s + 1, D]: the new
    entries land at the run-time offset s."""
    rng = np.random.default_rng(14)
    H, P = 12, 40
    past, new = _rand(rng, 1, H, P, inner), _rand(rng, 1, H, 1, inner)
    plus1 = SymExpr.of({("s",): 1, (): 1})
    exe = compile_symbolic("Concat", [past, new], {"axis": 2}, [(None, None, S, None), None],
                           (None, None, plus1, None), threads=threads)
    check_sizes(exe, ["in0", "in1"], [past, new], lambda n: [_rand(rng, 1, H, n, inner), _rand(rng, 1, H, 1, inner)],
                lambda i: np.concatenate(i, axis=2), [0, 1, 2, 17, 39, 40], rtol=0, atol=0)


def test_concat_two_symbolic_operands() -> None:
    rng = np.random.default_rng(15)
    a, b, c = _rand(rng, 30, 5), _rand(rng, 2, 5), _rand(rng, 20, 5)
    total = SymExpr.of({("s",): 1, ("t",): 1, (): 2})
    exe = compile_symbolic("Concat", [a, b, c], {"axis": 0}, [(S, None), None, (T, None)], (total, None))
    for n, m in [(1, 1), (30, 20), (7, 19), (29, 1)]:
        exe.execute({"in0": np.full(a.shape, np.nan, np.float32), "in1": b,
                     "in2": np.full(c.shape, np.nan, np.float32)})
        x, y = _rand(rng, n, 5), _rand(rng, m, 5)
        out = exe.execute({"in0": x, "in1": b, "in2": y})["out0"]
        np.testing.assert_array_equal(out, np.concatenate([x, b, y]), err_msg=f"{n}, {m}")


# -- element-wise chains, Gather ----------------------------------------------------------------------------

def _chain(x: np.ndarray, bias: np.ndarray) -> Function:
    """tanh(x + bias) * x: a chain the code generator fuses into one loop."""
    fn = Function("main")
    xi = fn.add_input("in0", TensorType.of(x))
    c = fn.add_constant(bias, "bias")
    t = fn.create("Tanh", [fn.create("Add", [xi, c], {}, name="add").result], {}, name="tanh").result
    fn.set_output("out0", fn.create("Mul", [t, xi], {}, name="mul").result)
    return fn


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,sym", [((1, 300, 50), (None, S, None)), ((1, 7, 3), (None, S, None)),
                                       ((3, 40, 50), (None, S, None)), ((1, 2, 300), (None, None, S)),
                                       ((500,), (S,)), ((1, 12, 1, 70), (None, None, None, S)),
                                       ((2, 40, 3, 40), (None, S, None, S))])
def test_elementwise_chain_symbolic(shape: tuple[int, ...], sym: Sym, threads: int) -> None:
    rng = np.random.default_rng(16)
    x, bias = _rand(rng, *shape), _rand(rng, shape[-1] if sym[-1] is None else 1)
    exe = compile_function(_chain(x, bias), [sym], sym, threads=threads)
    bound = shape[sym.index(S)]
    for n in sorted({k for k in (1, 2, 5, 16, 17, bound - 1, bound) if 1 <= k <= bound}):
        exe.execute({"in0": np.full(shape, np.nan, np.float32)})
        a = _rand(rng, *tuple(n if e is not None else d for d, e in zip(shape, sym)))
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_allclose(out, np.tanh(a + bias) * a, rtol=1e-5, atol=1e-6, err_msg=f"size {n}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("ids_shape,sym", [((1, 300), (None, S)), ((3, 20), (None, S))])
def test_gather_embedding_symbolic_ids(ids_shape: tuple[int, ...], sym: Sym, threads: int) -> None:
    rng = np.random.default_rng(17)
    table = _rand(rng, 100, 48)
    ids = rng.integers(-100, 100, ids_shape).astype(np.int64)
    exe = compile_symbolic("Gather", [table, ids], {"axis": 0}, [None, sym], sym + (None,), consts=(0,),
                           threads=threads)
    for n in [1, 2, 17, ids_shape[1] - 1, ids_shape[1]]:
        exe.execute({"in1": ids})
        i = rng.integers(-100, 100, (ids_shape[0], n)).astype(np.int64)
        out = exe.execute({"in1": i})["out0"]
        np.testing.assert_array_equal(out, table[i], err_msg=f"size {n}")


@pytest.mark.parametrize("inner", [24, 1])
def test_gather_last_token_of_symbolic_axis(inner: int) -> None:
    """Gather index -1 along a symbolic axis (the last token of a prompt): the run's last entry, not the
    bound's; index 0 and 1 too."""
    rng = np.random.default_rng(18)
    x = _rand(rng, 2, 40, inner)
    idx = np.array([-1, 0, 1], dtype=np.int64)
    exe = compile_symbolic("Gather", [x, idx], {"axis": 1}, [(None, S, None), None], (None, None, None),
                           consts=(1,))
    for n in [2, 3, 17, 39, 40]:
        exe.execute({"in0": np.full(x.shape, np.nan, np.float32)})
        a = _rand(rng, 2, n, inner)
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_array_equal(out, a[:, idx], err_msg=f"size {n}")


def test_reduce_mean_over_a_symbolic_axis_divides_by_the_runs_count() -> None:
    """ReduceMean lowers to ReduceSum and a division by the count, a size the symbolic compile turns into a
    SymbolicValue evaluated at each run (glow_core/pipeline/symbolic.py): one compile, the mean of each size."""
    import onnx
    from onnx import TensorProto, helper

    import glow_core

    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)
    g = helper.make_graph([node], "mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "s", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 8])])
    net = glow_core.compile(helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)]), "cpu")
    rng = np.random.default_rng(19)
    for n in [40, 1, 17]:
        a = _rand(rng, 2, n, 8)
        np.testing.assert_allclose(net.run({"x": a})["y"], a.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6,
                                   err_msg=f"size {n}")
    assert net.specializations_compiled == 1


# -- Transpose ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,sym,perm", [
    ((1, 40, 12, 64), (None, S, None, None), (0, 2, 1, 3)),   # heads split: [1, s, 12, 64] -> [1, 12, s, 64]
    ((1, 12, 40, 64), (None, None, S, None), (0, 2, 1, 3)),   # and merged back
    ((2, 40, 3, 5), (None, S, None, T), (2, 1, 0, 3)),        # a symbolic last axis too
    ((1, 12, 40, 16), (None, None, S, None), (0, 1, 3, 2)),   # keys transposed: tiles
    ((3, 40, 35), (None, S, T), (2, 0, 1)),                   # tiles, symbolic axes on both sides
    ((40, 2, 35), (S, None, T), (1, 2, 0)),
])
def test_transpose_symbolic(shape: tuple[int, ...], sym: Sym, perm: tuple[int, ...], threads: int) -> None:
    rng = np.random.default_rng(21)
    x = _rand(rng, *shape)
    out_sym = tuple(sym[p] for p in perm)
    exe = compile_symbolic("Transpose", [x], {"perm": list(perm)}, [sym], out_sym, threads=threads)
    for sizes in [{"s": 1, "t": 1}, {"s": 40, "t": 5}, {"s": 17, "t": 2}, {"s": 3, "t": 4}]:
        exe.execute({"in0": np.full(shape, np.nan, np.float32)})
        a = _rand(rng, *tuple(d if e is None else sizes[str(e)] for d, e in zip(shape, sym)))
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_array_equal(out, a.transpose(perm), err_msg=str(sizes))


# -- Slice ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,sym,starts,sizes,steps", [
    ((1, 40, 96), (None, S, None), (0, 0, 32), (1, 40, 32), (1, 1, 1)),        # GPT-2's key cut from the QKV rows
    ((2, 40, 3, 24), (None, S, None, None), (1, 0, 1, 4), (1, 40, 2, 16), (1, 1, 1, 1)),
    ((40, 6, 35), (S, None, T), (0, 1, 0), (40, 3, 35), (1, 2, 1)),            # a symbolic last axis, a step
    ((40, 24), (S, None), (0, 23), (40, 12), (1, -2)),                       # the last axis reversed: whole bound
])
def test_slice_symbolic(shape: tuple[int, ...], sym: Sym, starts: tuple[int, ...], sizes: tuple[int, ...],
                        steps: tuple[int, ...], threads: int) -> None:
    """Only the rows that hold data are copied (a poisoned bound run first: padding never reaches a result)."""
    rng = np.random.default_rng(22)
    x = _rand(rng, *shape)
    exe = compile_symbolic("Slice", [x], {"starts": list(starts), "sizes": list(sizes), "steps": list(steps)},
                           [sym], sym, threads=threads)
    for sizes_ in [{"s": 1, "t": 1}, {"s": 40, "t": 35}, {"s": 17, "t": 2}, {"s": 3, "t": 30}]:
        exe.execute({"in0": np.full(shape, np.nan, np.float32)})
        a = _rand(rng, *tuple(d if e is None else sizes_[str(e)] for d, e in zip(shape, sym)))
        # (a symbolic axis is read whole from 0 in these cases; a fixed one at starts + i * steps)
        index = np.ix_(*[np.arange(a.shape[k]) if e is not None else starts[k] + steps[k] * np.arange(sizes[k])
                         for k, e in enumerate(sym)])
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_array_equal(out, a[index], err_msg=str(sizes_))


def test_elementwise_broadcast_operand_rows() -> None:
    """[3, s, 8] + [3, 1, 1]: the second operand is one value per row (loaded once per valid row)."""
    rng = np.random.default_rng(22)
    x, y = _rand(rng, 3, 30, 8), _rand(rng, 3, 1, 1)
    exe = compile_symbolic("Add", [x, y], {}, [(None, S, None), None], (None, S, None))
    for n in [1, 2, 17, 29, 30]:
        exe.execute({"in0": np.full(x.shape, np.nan, np.float32), "in1": y})
        a, c = _rand(rng, 3, n, 8), _rand(rng, 3, 1, 1)
        np.testing.assert_array_equal(exe.execute({"in0": a, "in1": c})["out0"], a + c, err_msg=f"size {n}")


# -- end to end: glow_core.compile of models with symbolic dims ---------------------------------------------

def _vi(name: str, dims: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, dims)


def test_end_to_end_decode_step_with_kv_cache() -> None:
    """A GPT-2-like decode step: the KV cache concatenated at the run-time offset past, attention over past + 1
    keys; one network for every past length (the largest first: smaller runs see stale padding)."""
    H, D = 2, 16
    nodes = [helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
             helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2),
             helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]),
             helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "present_v"], ["y"])]
    g = helper.make_graph(nodes, "g", [_vi("q", [1, H, 1, D]), _vi("k", [1, H, 1, D]), _vi("v", [1, H, 1, D]),
                                       _vi("past_k", [1, H, "past", D]), _vi("past_v", [1, H, "past", D])],
                          [_vi("y", [1, H, 1, D]), _vi("present_k", [1, H, "total", D]),
                           _vi("present_v", [1, H, "total", D])],
                          [numpy_helper.from_array(np.array(0.25, np.float32), "scale")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    net = glow_core.compile(model, "cpu")
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(23)
    for past in (100, 5, 1, 17, 64, 3):
        f = {n: _rand(rng, 1, H, 1, D) for n in ("q", "k", "v")}
        f["past_k"], f["past_v"] = _rand(rng, 1, H, past, D), _rand(rng, 1, H, past, D)
        got = net.run(f)
        for name, want in zip(("y", "present_k", "present_v"), ref.run(None, f)):
            np.testing.assert_allclose(np.asarray(got[name]), want, rtol=1e-5, atol=1e-6, err_msg=f"{name} {past}")


@pytest.mark.parametrize("variant", ["", "shared"])
def test_end_to_end_attention_over_a_sequence(variant: str) -> None:
    """BERT-like attention, fused (FusedAttention) or not ("shared": the scores are an output too, so
    MatMul, Softmax and MatMul over the symbolic sequence stay separate)."""
    model = attention_model(1, 2, 8, 8, 16, 16, mask_shape=(1, 1, 1, 8), variant=variant)
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        for a in ([3] if vi.name == "mask" else [2, 3] if vi.name == "s2" else [2]):
            dims[a].ClearField("dim_value")
            dims[a].dim_param = "seq"
    net = glow_core.compile(model, "cpu")
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(24)
    for s in (100, 5, 1, 17, 64, 3):
        f = {n: _rand(rng, 1, 2, s, 16) for n in ("q", "k", "v")}
        f["mask"] = np.where(rng.random((1, 1, 1, s)) < 0.2, -np.inf, 0).astype(np.float32)
        f["mask"][..., 0] = 0
        got, want = net.run(f), ref.run(None, f)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6, err_msg=f"seq {s}")
        if variant == "shared":
            np.testing.assert_allclose(got["s2"], want[1], rtol=1e-5, atol=1e-6, err_msg=f"scores, seq {s}")


def test_end_to_end_last_token() -> None:
    """Gather index -1 along the symbolic sequence: the run's last token."""
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=1), helper.make_node("Relu", ["g"], ["y"])]
    g = helper.make_graph(nodes, "g", [_vi("x", [1, "seq", 24])], [_vi("y", [1, 24])],
                          [numpy_helper.from_array(np.array(-1, np.int64), "idx")])
    net = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "cpu")
    rng = np.random.default_rng(25)
    for s in (100, 5, 1, 17):
        x = _rand(rng, 1, s, 24)
        np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x[:, -1], 0), err_msg=f"seq {s}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,sym,axes", [((1, 300, 40), (None, S, None), [2]), ((300, 3, 20), (S, None, None), [1]),
                                            ((2, 300, 40), (None, S, None), [2])])
def test_reduce_over_a_fixed_axis_with_symbolic_rows(shape: tuple[int, ...], sym: Sym, axes: list[int],
                                                    threads: int) -> None:
    """A lowered LayerNorm's ReduceSum over the (fixed) hidden axis: only the output rows that hold data when
    they are a prefix of the output (both loop shapes), every row otherwise."""
    rng = np.random.default_rng(26)
    x = _rand(rng, *shape)
    out_sym = tuple(None if k in axes else e for k, e in enumerate(sym))
    exe = compile_symbolic("ReduceSum", [x], {"axes": axes, "keepdims": True}, [sym], out_sym, threads=threads)
    bound = shape[sym.index(S)]
    for n in [1, 2, 17, bound - 1, bound]:
        exe.execute({"in0": np.full(shape, np.nan, np.float32)})
        a = _rand(rng, *tuple(n if e is not None else d for d, e in zip(shape, sym)))
        out = exe.execute({"in0": a})["out0"]
        np.testing.assert_allclose(out, a.sum(axis=tuple(axes), keepdims=True), rtol=1e-5, atol=1e-5, err_msg=f"{n}")


@pytest.mark.parametrize("threads", [1, 2])
def test_gather_constant_table_symbolic_rows(threads: int) -> None:
    """A Resize-like Gather of a constant table along the last axis of [1, s, 30]: the table kernel over the
    valid rows."""
    rng = np.random.default_rng(27)
    x = _rand(rng, 1, 300, 30)
    table = (np.arange(60) // 2).astype(np.int64)
    exe = compile_symbolic("Gather", [x, table], {"axis": 2}, [(None, S, None), None], (None, S, None), consts=(1,),
                           threads=threads)
    check_sizes(exe, ["in0"], [x], lambda n: [_rand(rng, 1, n, 30)], lambda i: i[0][..., table], [1, 2, 17, 299, 300],
                rtol=0, atol=0)


# -- symbolic batch axes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("N", [40, 100])
def test_matmul_symbolic_batch_and_rows(N: int, threads: int) -> None:
    """[b, s, K] @ W: only the batch problems (a prefix) and the rows that hold data."""
    rng = np.random.default_rng(28)
    a, w = _rand(rng, 5, 23, 32), _rand(rng, 32, N)
    exe = compile_symbolic("MatMul", [a, w], {}, [(T, S, None), None], (T, S, None), consts=(1,), threads=threads)
    for bt, s in [(1, 1), (5, 23), (2, 7), (4, 1), (3, 22)]:
        exe.execute({"in0": np.full(a.shape, np.nan, np.float32)})
        x = _rand(rng, bt, s, 32)
        np.testing.assert_allclose(exe.execute({"in0": x})["out0"], x @ w, rtol=1e-4, atol=1e-4, err_msg=f"{bt}x{s}")


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_symbolic_batch(threads: int) -> None:
    rng = np.random.default_rng(29)
    B, H, M, D, N = 4, 2, 21, 16, 21
    bound = [_rand(rng, B, H, M, D), _rand(rng, B, H, D, N), _rand(rng, B, H, N, D)]
    syms: list[Sym | None] = [(T, None, S, None), (T, None, None, S), (T, None, S, None)]
    exe = compile_symbolic("FusedAttention", bound, {"scale": 0.25}, syms, (T, None, S, None), threads=threads)
    for bt, s in [(1, 1), (4, 21), (2, 5), (3, 9)]:
        exe.execute({f"in{i}": np.full(o.shape, np.nan, np.float32) for i, o in enumerate(bound)})
        f = [_rand(rng, bt, H, s, D), _rand(rng, bt, H, D, s), _rand(rng, bt, H, s, D)]
        out = exe.execute({f"in{i}": x for i, x in enumerate(f)})["out0"]
        np.testing.assert_allclose(out, _attention(*f, None, 0.25), rtol=1e-5, atol=1e-5, err_msg=f"{bt}x{s}")
