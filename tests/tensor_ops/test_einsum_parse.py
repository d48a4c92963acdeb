"""tensor_ops.parse against numpy.einsum's rules: output shape, implicit output, ellipsis, errors."""
import numpy as np
import pytest

from crypto.errors import ShapeError
from tensor_ops.parse import EinsumSyntaxError, broadcast_shapes, parse

FORMS = [
    ("ij->ji", [(2, 3)]),
    ("ij", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("iij->ij", [(3, 3, 2)]),
    ("ij->", [(2, 3)]),
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("i,j->ij", [(2,), (3,)]),
    ("i,i", [(4,), (4,)]),
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("...ij,...jk", [(5, 2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (4, 3, 4)]),
    ("i...->...", [(2, 3, 4)]),
    ("...", [(2, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ij,jk->ik", [(2, 3), (1, 4)]),
    ("Ab,bA", [(2, 3), (3, 2)]),
    (" i j -> j i ", [(2, 3)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
]


@pytest.mark.parametrize("expr,shapes", FORMS, ids=[f[0] for f in FORMS])
def test_output_shape_and_values_match_numpy(expr, shapes):
    rng = np.random.default_rng(0)
    ops = [rng.normal(size=s) for s in shapes]
    spec = parse(expr, *shapes)
    want = np.einsum(expr, *ops)
    assert spec.output_shape == want.shape
    np.testing.assert_allclose(np.einsum(spec.expression(), *ops), want, rtol=1e-12, atol=1e-12)


def test_implicit_output_is_sorted_singletons():
    assert parse("ba,cb", (2, 3), (4, 2)).output == "ac"
    assert parse("ii", (3, 3)).output == ""


def test_contracted_indices():
    assert parse("ij,jk->ik", (2, 3), (3, 4)).contracted == "j"


BAD_SYNTAX = [
    ("ij->k", [(2, 3)], "'k'"),
    ("ij->ii", [(2, 3)], "more than once"),
    ("i1", [(2, 3)], "'1'"),
    ("i.j", [(2, 3)], "'.'"),
    ("i->j->k", [(2,)], "->"),
    ("ij,jk", [(2, 3)], "2 operand term"),
    ("...i->i", [(2, 3)], "'...'"),
]


@pytest.mark.parametrize("expr,shapes,needle", BAD_SYNTAX, ids=[b[0] for b in BAD_SYNTAX])
def test_malformed_expressions_raise(expr, shapes, needle):
    with pytest.raises(EinsumSyntaxError, match=None) as info:
        parse(expr, *shapes)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


BAD_SHAPES = [
    ("ij,jk->ik", [(2, 3), (4, 5)], ["operand 1", "'j'", "4", "3"]),
    ("ijk", [(2, 3)], ["operand 0", "3 axes", "(2, 3)"]),
    ("ii", [(2, 3)], ["operand 0", "'i'", "2", "3"]),
    ("...i,...i", [(2, 3), (4, 3)], ["ellipsis", "2", "4"]),
    ("i", [(0,)], ["operand 0", "size 0"]),
]


@pytest.mark.parametrize("expr,shapes,needles", BAD_SHAPES, ids=[b[0] for b in BAD_SHAPES])
def test_mismatched_shapes_name_operand_axis_and_sizes(expr, shapes, needles):
    with pytest.raises(ShapeError) as info:
        parse(expr, *shapes)
    for needle in needles:
        assert needle in str(info.value)


def test_non_string_expression():
    with pytest.raises(EinsumSyntaxError, match="expr"):
        parse(3, (2,))


def test_broadcast_shapes_like_numpy():
    assert broadcast_shapes((2, 1), (3,)) == np.broadcast_shapes((2, 1), (3,))
    with pytest.raises(ShapeError, match="axis -1"):
        broadcast_shapes((2, 3), (4,))
