"""Import rule of TfIdfVectorizer (integer pools; string pools are refused: glow has no string tensors)."""

from __future__ import annotations

from glow_core.errors import ModelError
from glow_core.importer.context import NodeContext, import_rule
from glow_core.ir.graph import Value
from glow_core.ir.types import ElemKind

#: most pool entries and output columns accepted (attributes of an untrusted model)
MAX_POOL = 1 << 20


def _pool_grams(ctx: NodeContext, pool: list[int], counts: list[int], lo: int, hi: int) -> dict[tuple[int, ...], int]:
    """n-gram -> its index in the pool (ids run over every length; a repeated n-gram keeps its last id)."""
    found: dict[tuple[int, ...], int] = {}
    gram_id = 0
    for i, start in enumerate(counts):
        length = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        if not 0 <= start <= end <= len(pool) or (end - start) % length:
            raise ModelError(f"{ctx.where()}: ngram_counts {counts} do not cut the pool of {len(pool)} into "
                             f"whole {length}-grams at entry {i}")
        for j in range(start, end, length):
            if lo <= length <= hi:
                found.pop(tuple(pool[j:j + length]), None)
                found[tuple(pool[j:j + length])] = gram_id
            gram_id += 1
    return found


@import_rule("TfIdfVectorizer")
def _tfidf(ctx: NodeContext) -> list[Value]:
    ctx.check_attrs(["max_gram_length", "max_skip_count", "min_gram_length", "mode", "ngram_counts",
                     "ngram_indexes", "pool_int64s", "pool_strings", "weights"])
    if ctx.has_attr("pool_strings"):
        raise ctx.unsupported("pool_strings: string tensors are not supported")
    x = ctx.req(0)
    if x.type.rank not in (1, 2):
        raise ModelError(f"{ctx.where()}: input X is {x.type}; TfIdfVectorizer takes shape [C] or [N, C]",
                         hint="give the tokens as a 1-D or 2-D tensor")
    lo, hi = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    skip = int(ctx.attr("max_skip_count"))
    pool = [int(v) for v in ctx.attr("pool_int64s", [])]
    counts = [int(v) for v in ctx.attr("ngram_counts", [])]
    indexes = [int(v) for v in ctx.attr("ngram_indexes", [])]
    weights = [float(v) for v in ctx.attr("weights", [])]
    mode = str(ctx.attr("mode"))
    if len(pool) > MAX_POOL or len(indexes) > MAX_POOL or not indexes or min(indexes) < 0:
        raise ModelError(f"{ctx.where()}: need 1 to {MAX_POOL} non-negative ngram_indexes and at most {MAX_POOL} "
                         "pool entries")
    if not 1 <= lo <= hi or skip < 0:
        raise ModelError(f"{ctx.where()}: need 1 <= min_gram_length ({lo}) <= max_gram_length ({hi}) and "
                         f"max_skip_count ({skip}) >= 0")
    skip = min(skip, x.shape[-1])  # no n-gram of 2 or more tokens fits a larger skip: the same result
    out_size = max(indexes) + 1
    if out_size > MAX_POOL:
        raise ModelError(f"{ctx.where()}: output size {out_size} is over {MAX_POOL}")
    ctx.importer.budget.check_tensor(x.shape[:-1] + (out_size,), 4, ctx.where(), "result")
    grams = _pool_grams(ctx, pool, counts, lo, hi)
    if any(g >= len(indexes) for g in grams.values()):
        raise ModelError(f"{ctx.where()}: ngram_indexes ({len(indexes)}) must give a column for every n-gram")
    ctx.reserve((len(grams), out_size), ElemKind.INT64, "n-gram column map")
    attrs = {"grams": [v for g in grams for v in g], "gram_lengths": [len(g) for g in grams],
             "gram_columns": [indexes[i] for i in grams.values()], "max_skip": skip, "out_size": out_size,
             "mode": mode, "weights": weights}
    return ctx.emit("TfIdfVectorizer", [x], attrs)
