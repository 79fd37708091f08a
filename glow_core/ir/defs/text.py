"""Text kinds: TfIdfVectorizer over integer tokens.

The importer normalizes ONNX's pool: ``grams`` holds the counted n-grams back
to back (only lengths within [min_gram_length, max_gram_length]; a repeated
n-gram keeps its last entry, as onnx.reference's trie does), ``gram_lengths``
their lengths and ``gram_columns`` the output column of each.
"""

from __future__ import annotations

from glow_core.errors import GlowTypeError
from glow_core.ir.defs.common import Attrs, Types, check_elems, req
from glow_core.ir.kinds import AttrType as A
from glow_core.ir.kinds import attr, define_kind
from glow_core.ir.types import ElemKind, TensorType

TOKEN_KINDS = frozenset({ElemKind.INT32, ElemKind.INT64})
MODES = ("TF", "IDF", "TFIDF")


def _tfidf_rule(types: Types, attrs: Attrs) -> list[TensorType]:
    x = req(types, 0)
    check_elems(x, TOKEN_KINDS, "TfIdfVectorizer input")
    if x.rank not in (1, 2):
        raise GlowTypeError(f"input {x} must be [C] or [B, C]")
    lengths, columns, grams = attrs["gram_lengths"], attrs["gram_columns"], attrs["grams"]
    out = int(attrs["out_size"])
    if len(lengths) != len(columns) or sum(lengths) != len(grams) or any(n < 1 for n in lengths):
        raise GlowTypeError("gram_lengths, gram_columns and grams do not describe the same n-grams")
    if out < 1 or any(not 0 <= c < out for c in columns) or int(attrs["max_skip"]) < 0:
        raise GlowTypeError(f"gram columns must be in [0, {out}) and max_skip >= 0")
    if str(attrs["mode"]) not in MODES or len(attrs["weights"]) not in (0, out):
        raise GlowTypeError(f"mode must be one of {MODES} and weights empty or {out} long")
    return [TensorType(ElemKind.FLOAT32, x.shape[:-1] + (out,))]


define_kind("TfIdfVectorizer", inputs=("Input",),
            attrs=(attr("grams", A.INTS), attr("gram_lengths", A.INTS), attr("gram_columns", A.INTS),
                   attr("max_skip", A.INT), attr("out_size", A.INT), attr("mode", A.STRING),
                   attr("weights", A.FLOATS, ())),
            infer=_tfidf_rule, elems=TOKEN_KINDS | {ElemKind.FLOAT32},
            doc="Per row, how often each n-gram occurs with its tokens 1 + skip apart (skip 0..max_skip; "
                "unigrams once), in its column; TF: the counts; IDF: weight (or 1) where the count is > 0; "
                "TFIDF: weight (or 1) x count.")
