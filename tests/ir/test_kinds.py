"""The node-kind table: declarations, attribute validation, arity, interpretation tables."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import GlowError, GlowTypeError, GlowVerifyError
from glow_core.ir import (
    AttrType,
    Category,
    ElemKind,
    Function,
    KindTable,
    all_kinds,
    attr,
    define_kind,
    get_kind,
    kinds_in,
)
from glow_core.ir.defs.common import broadcast_rule, like_input
from glow_core.ir.graph import infer_types
from glow_core.ir.kinds import _coerce
from tests.ir.irutil import f32


def test_a_kind_is_declared_once() -> None:
    with pytest.raises(GlowError, match="'Add' is declared twice"):
        define_kind("Add", inputs=("LHS", "RHS"), infer=broadcast_rule)
    assert get_kind("Add").inputs[0].name == "LHS"  # the original declaration is untouched


def test_unknown_kind() -> None:
    with pytest.raises(GlowError, match="unknown node kind 'Nope'"):
        get_kind("Nope")


def test_only_the_last_operand_may_be_variadic(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GlowError, match="only the last operand may be variadic"):
        scratch_kinds("TestBadVariadic", inputs=("Xs*", "Y"), infer=like_input(0))
    assert "TestBadVariadic" not in all_kinds()


@pytest.fixture
def scale_kind(scratch_kinds):  # type: ignore[no-untyped-def]
    return scratch_kinds(
        "TestScaleK", inputs=("X",),
        attrs=(attr("alpha", AttrType.FLOAT, 1.0), attr("axes", AttrType.INTS), attr("to", AttrType.ELEM, None),
               attr("names", AttrType.STRINGS, ()), attr("fill", AttrType.TENSOR, None)),
        infer=like_input(0),
    )


def test_attributes_are_normalized(scale_kind) -> None:  # type: ignore[no-untyped-def]
    got = scale_kind.normalize_attrs({"axes": [1, np.int64(2)], "names": [b"a", "b"]}, "here")
    assert got["alpha"] == 1.0 and got["axes"] == (1, 2) and got["names"] == ("a", "b")
    assert got["to"] is None and got["fill"] is None
    assert isinstance(got["axes"], tuple)  # frozen: nodes can be hashed and compared
    t = scale_kind.normalize_attrs({"axes": [], "fill": [1.5]}, "here")["fill"]
    assert isinstance(t, np.ndarray) and not t.flags.writeable


def test_unknown_attribute(scale_kind) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GlowTypeError, match=r"here: TestScaleK has no attribute\(s\) \['beta'\]; it takes"):
        scale_kind.normalize_attrs({"axes": [0], "beta": 1}, "here")


def test_missing_required_attribute(scale_kind) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GlowTypeError, match=r"TestScaleK needs attribute 'axes' \(ints\)"):
        scale_kind.normalize_attrs({}, "here")


@pytest.mark.parametrize("given", [{"alpha": "fast"}, {"alpha": [1.0]}, {"axes": 3}, {"axes": ["a"]},
                                   {"to": "float32"}])
def test_attribute_of_the_wrong_type(scale_kind, given) -> None:  # type: ignore[no-untyped-def]
    attrs = {"axes": [0], **given}
    name = next(iter(given))
    with pytest.raises(GlowTypeError, match=f"attribute '{name}' must be"):
        scale_kind.normalize_attrs(attrs, "here")


def test_create_validates_attributes(scale_kind) -> None:  # type: ignore[no-untyped-def]
    fn = Function()
    x = fn.add_input("x", f32(2))
    with pytest.raises(GlowTypeError, match=r"TestScaleK 'k' \(from ONNX node 'n1'\): TestScaleK needs attribute"):
        fn.create("TestScaleK", [x], {}, name="k", origin="n1")
    node = fn.create("TestScaleK", [x], {"axes": (0,), "to": ElemKind.INT8})
    assert node.attrs["to"] is ElemKind.INT8


def test_arity(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    fixed = get_kind("Add")
    fixed.check_arity(2, "w")
    for n in (0, 1, 3):
        with pytest.raises(GlowTypeError, match=r"w: Add takes operands \(LHS, RHS\), got"):
            fixed.check_arity(n, "w")
    opt = scratch_kinds("TestOpt", inputs=("X", "B?", "C?"), infer=like_input(0))
    for n in (1, 2, 3):
        opt.check_arity(n, "w")
    with pytest.raises(GlowTypeError, match=r"\(X, B\?, C\?\), got 4"):
        opt.check_arity(4, "w")
    var = scratch_kinds("TestVar", inputs=("X", "Rest*"), infer=like_input(0))
    for n in (2, 3, 10):
        var.check_arity(n, "w")
    with pytest.raises(GlowTypeError, match=r"\(X, Rest\*\), got 1"):
        var.check_arity(1, "w")


def test_type_rule_result_count_is_checked(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    spec = scratch_kinds("TestTwoOut", inputs=("X",), outputs=("A", "B"), infer=like_input(0))
    with pytest.raises(GlowVerifyError, match="type rule gave 1 results, kind declares 2"):
        infer_types(spec, [f32(2)], {}, "w")


def test_verifier_runs_after_the_type_rule(scratch_kinds) -> None:  # type: ignore[no-untyped-def]
    def positive_rank(types, attrs, outs):  # type: ignore[no-untyped-def]
        if outs[0].rank == 0:
            raise GlowTypeError("needs rank >= 1")

    scratch_kinds("TestVerified", inputs=("X",), infer=like_input(0), verify=positive_rank)
    fn = Function()
    fn.create("TestVerified", [fn.add_input("v", f32(2))])
    with pytest.raises(GlowTypeError, match="needs rank >= 1"):
        fn.create("TestVerified", [fn.add_input("s", f32())])


def test_categories() -> None:
    add = get_kind("Add")
    assert add.is_(Category.COMMUTATIVE) and add.is_(Category.ELEMENTWISE)
    assert "Add" in kinds_in(Category.BINARY) and "Relu" not in kinds_in(Category.BINARY)
    assert "Relu" in kinds_in(Category.ACTIVATION)


def test_kind_table_validates_registration() -> None:
    table = KindTable("test kernels")

    @table.register("Add", "Relu")
    def kernel(*args):  # type: ignore[no-untyped-def]
        return None

    assert table["Add"] is kernel and table["Relu"] is kernel
    with pytest.raises(GlowError, match="test kernels: kind 'Add' registered twice"):
        table.add("Add", kernel)
    with pytest.raises(GlowError, match="unknown node kind 'NoSuchKind'"):
        table.register("NoSuchKind")(kernel)
    assert set(table) == {"Add", "Relu"}


def test_every_declared_kind_is_well_formed() -> None:
    """A table-wide check of every family's declarations."""
    problems = []
    for name, spec in all_kinds().items():
        if spec.name != name:
            problems.append(f"{name}: registered under another name ({spec.name})")
        if not spec.outputs:
            problems.append(f"{name}: no outputs")
        if set(spec.attr_index) != {a.name for a in spec.attrs} or len(spec.attrs) != len(spec.attr_index):
            problems.append(f"{name}: duplicate or unindexed attributes")
        if not spec.elems:
            problems.append(f"{name}: accepts no element kind")
        for a in spec.attrs:
            if not a.required and a.default is not None:
                try:
                    _coerce(a, a.default, name, name)
                except GlowError as e:
                    problems.append(f"{name}: default of '{a.name}' does not fit its type: {e}")
    assert not problems, "\n".join(problems)
