"""The planner on the PlainBackend (numpy slot vectors): every einsum form, every mix of encrypted and
plaintext operands, random expressions from hypothesis, checked exactly against numpy.einsum (and the
naive loop einsum). Integer-valued inputs make float64 results exact, so equality is exact."""
import string

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crypto.errors import KeyMissingError
from tensor_ops import PlainBackend, einsum, encrypt
from tensor_ops.plan import plan
from tests.reference.naive_einsum import naive_einsum
from tests.tensor_ops.helpers import encryption_patterns, small_ints

FORMS = [
    ("ij->ji", [(8, 16)]),
    ("ij->", [(3, 5)]),
    ("ij->i", [(3, 5)]),
    ("ii", [(5, 5)]),
    ("ii->i", [(5, 5)]),
    ("iij->ji", [(3, 3, 4)]),
    ("ij,jk->ik", [(8, 8), (8, 8)]),
    ("ij,jk->ik", [(3, 5), (5, 7)]),
    ("ij,kj->ik", [(3, 5), (7, 5)]),
    ("ij,jk", [(9, 2), (2, 9)]),
    ("bij,bjk->bik", [(4, 8, 8), (4, 8, 8)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 4, 8), (2, 2, 4, 8)]),
    ("i,i->", [(1024,), (1024,)]),
    ("ik,k->i", [(64, 64), (64,)]),
    ("k,ik->i", [(7,), (5, 7)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,ij->ij", [(1, 4), (3, 4)]),
    ("ij,jk->ik", [(3, 4), (1, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("chw,oc->ohw", [(3, 4, 4), (5, 3)]),
    ("i,i,i->i", [(6,), (6,), (6,)]),
]


def _run(expr, arrays, enc, slots):
    be = PlainBackend(slots)
    ops = [encrypt(be, a) if e else a for a, e in zip(arrays, enc)]
    res = einsum(expr, *ops)
    return res.decrypt() if hasattr(res, "decrypt") else res


@pytest.mark.parametrize("expr,shapes", FORMS, ids=[f"{f[0]}-{len(f[1])}-{f[1][0]}" for f in FORMS])
@pytest.mark.parametrize("slots", [2048, 64])
def test_forms_every_operand_mix_exact(expr, shapes, slots):
    rng = np.random.default_rng(1)
    arrays = [small_ints(rng, s) for s in shapes]
    want = np.einsum(expr, *arrays)
    for enc in encryption_patterns(len(shapes)):
        got = _run(expr, arrays, enc, slots)
        assert got.shape == want.shape, enc
        np.testing.assert_array_equal(got, want, err_msg=f"{expr} encrypted={enc} slots={slots}")


@st.composite
def einsum_cases(draw):
    """1-3 operands, up to 4 axes each, index sizes 1-9 (with size-1 broadcasting), repeated indices,
    implicit or explicit output, sometimes an ellipsis."""
    n_ops = draw(st.integers(1, 3))
    pool = string.ascii_lowercase[:draw(st.integers(1, 5))]
    sizes = {c: draw(st.integers(1, 9)) for c in pool}
    terms, shapes = [], []
    for _ in range(n_ops):
        term = "".join(draw(st.lists(st.sampled_from(pool), min_size=0, max_size=4)))
        shape = []
        for c in term:
            first = term.index(c)
            shape.append(shape[first] if first < len(shape) else
                         (1 if draw(st.integers(0, 5)) == 0 else sizes[c]))
        terms.append(term)
        shapes.append(tuple(shape))
    used = sorted(set("".join(terms)))
    if np.prod([sizes[c] for c in used]) > 3000:  # keep the plain simulation quick
        sizes = {c: min(s, 3) for c, s in sizes.items()}
        shapes = [tuple(min(d, 3) for d in s) for s in shapes]
    ellipsis = draw(st.booleans()) and all(len(t) >= 2 for t in terms) and n_ops >= 1
    if ellipsis:  # replace each operand's first axis by '...' (they then broadcast together)
        first = [s[0] for s in shapes]
        if len({d for d in first if d != 1}) <= 1 and all(t[0] not in t[1:] for t in terms):
            terms = ["..." + t[1:] for t in terms]
        else:
            ellipsis = False
    if draw(st.booleans()):
        expr = ",".join(terms)
    else:
        letters = sorted(set("".join(t.replace("...", "") for t in terms)))
        out = "".join(draw(st.permutations(letters))[:draw(st.integers(0, len(letters)))])
        expr = ",".join(terms) + "->" + ("..." if ellipsis else "") + out
    enc = draw(st.lists(st.booleans(), min_size=n_ops, max_size=n_ops).filter(any))
    slots = draw(st.sampled_from([64, 256, 2048]))
    return expr, shapes, enc, slots


@given(einsum_cases(), st.integers(0, 2**32 - 1))
def test_random_expressions_exact_on_plain_backend(case, seed):
    expr, shapes, enc, slots = case
    rng = np.random.default_rng(seed)
    arrays = [small_ints(rng, s) for s in shapes]
    want = np.einsum(expr, *arrays)
    got = _run(expr, arrays, enc, slots)
    np.testing.assert_array_equal(got, want, err_msg=f"{expr} {shapes} encrypted={enc} slots={slots}")


@pytest.mark.parametrize("expr,shapes", [("ij,jk->ik", [(3, 4), (4, 2)]), ("ii->i", [(3, 3)]),
                                         ("ij,jk->ik", [(3, 4), (1, 2)]), ("i,j,k->kji", [(2,), (3,), (2,)])])
def test_numpy_agrees_with_naive_loop_reference(expr, shapes):
    rng = np.random.default_rng(2)
    arrays = [small_ints(rng, s) for s in shapes]
    got = _run(expr, arrays, [True] * len(shapes), 64)
    np.testing.assert_array_equal(got, naive_einsum(expr, *arrays))


def test_plan_rotations_are_exactly_the_keys_needed():
    p = plan("ij,jk->ik", (8, 8), (8, 8), slots=2048)
    rng = np.random.default_rng(3)
    a, b = small_ints(rng, (8, 8)), small_ints(rng, (8, 8))
    be = PlainBackend(2048, rotations=p.rotations())
    np.testing.assert_array_equal(p.simulate(a, b, backend=be), a @ b)
    missing = PlainBackend(2048, rotations=p.rotations()[1:])
    with pytest.raises(KeyMissingError, match="Galois key"):
        p.simulate(a, b, backend=missing)


def test_transpose_and_private_sums_use_no_rotation_or_level():
    p = plan("ij->ji", (8, 16), slots=2048)
    assert p.rotations() == [] and p.depth() == 0 and p.cost()["rotations"] == 0


def test_tiling_never_aborts():
    p = plan("ij,jk->ik", (64, 64), (64, 64), slots=2048, encrypted=(True, False))
    assert p.cost()["ciphertexts"] == 2 and p.cost()["output_ciphertexts"] > 1
    rng = np.random.default_rng(4)
    a, b = small_ints(rng, (64, 64)), small_ints(rng, (64, 64))
    np.testing.assert_array_equal(p.simulate(a, b), a @ b)


@pytest.mark.parametrize("expr,shapes,enc", [
    ("ij,jk->ik", [(8, 8), (8, 8)], (True, True)),
    ("ij,jk->ik", [(8, 8), (8, 8)], (False, True)),
    ("ij,jk->ik", [(32, 32), (32, 32)], (True, True)),  # tiled: operands packed per tile, with replicas
    ("ij,jk->ik", [(64, 64), (64, 64)], (True, False)),  # diagonal method, client-packed copies
    ("bij,bjk->bik", [(4, 16, 16), (4, 16, 16)], (True, True)),
    ("bhqd,bhkd->bhqk", [(2, 2, 4, 8), (2, 2, 4, 8)], (True, True)),
    ("ik,k->i", [(64, 64), (64,)], (False, True)),
    ("chw,oc->ohw", [(3, 8, 8), (4, 3)], (True, False)),
])
def test_client_side_packing_is_cheaper_and_exact(expr, shapes, enc):
    default = plan(expr, *shapes, slots=8192, encrypted=enc)
    auto = plan(expr, *shapes, slots=8192, encrypted=enc, layouts="auto")
    assert auto.cost()["rotations"] < default.cost()["rotations"]
    assert any(lay is not None and lay.replicas for lay in auto.input_layouts)
    rng = np.random.default_rng(8)
    arrays = [small_ints(rng, s) for s in shapes]
    np.testing.assert_array_equal(PlainBackend(8192).run(auto, *arrays), np.einsum(expr, *arrays))
    # the encrypted tensors carry the plan's layouts, and einsum follows them
    be = PlainBackend(8192)
    ops = [encrypt(be, a, layout=lay) if e else a for a, e, lay in zip(arrays, enc, auto.input_layouts)]
    np.testing.assert_array_equal(einsum(expr, *ops).decrypt(), np.einsum(expr, *arrays))


def test_explain_lists_steps_strategy_and_counts():
    p = plan("ik,k->i", (256, 256), (256,), slots=8192, encrypted=(False, True))
    text = p.explain()
    assert "diagonal" in text and "over" in text  # the strategy chosen and the alternative's estimate
    assert "MatVecDiagonal" in text and "Rescale" in text and "depth 1" in text
    assert p.cost()["hoisted_rotations"] > 0
    kinds = {type(s).__name__ for s in plan("ij,jk->ik", (8, 8), (8, 8), slots=2048).steps}
    assert {"Input", "Mask", "Replicate", "Multiply", "Rescale", "RotateSum"} <= kinds


def test_plain_backend_adopts_plan_slots_and_rejects_a_mismatch():
    p = plan("ij,jk->ik", (3, 4), (4, 5), slots=64)
    rng = np.random.default_rng(9)
    a, b = small_ints(rng, (3, 4)), small_ints(rng, (4, 5))
    np.testing.assert_array_equal(PlainBackend().run(p, a, b), a @ b)
    with pytest.raises(ValueError, match="slots"):
        PlainBackend(128).run(p, a, b)


@pytest.mark.parametrize("expr,shapes,enc,slots", [
    ("ik,k->i", [(256, 256), (256,)], (False, True), 8192),
    ("bk,kj->bj", [(3, 40), (40, 24)], (True, False), 1024),
    ("k,jk->j", [(24,), (40, 24)], (True, False), 256),
    ("ij,jk->ik", [(64, 64), (64, 64)], (True, False), 8192),
    ("bij,jk->bik", [(2, 64, 64), (64, 64)], (True, False), 8192),  # batch tiled over 2 ciphertexts
    ("bij,jk->bik", [(3, 20, 24), (24, 16)], (True, False), 256),
])
def test_diagonal_method_chosen_when_cheaper_and_exact(expr, shapes, enc, slots):
    """A plaintext matrix on an encrypted batch of vectors goes by diagonals (the cyclic method after a move, or
    the block generalized diagonals in place, whichever the cost model prices lower), not replicate-and-sum."""
    p = plan(expr, *shapes, slots=slots, encrypted=enc)
    assert any(type(s).__name__ in ("MatVecDiagonal", "BlockDiagonal") for s in p.steps), p.explain()
    assert "diagonal" in p.notes[0].split(" over ")[0] and "over" in p.notes[0]
    rng = np.random.default_rng(10)
    arrays = [small_ints(rng, s) for s in shapes]
    np.testing.assert_array_equal(p.simulate(*arrays), np.einsum(expr, *arrays))


def test_radix4_rotate_and_add_when_keys_are_free():
    from tensor_ops.plan import CostModel

    p = plan("i,i->", (64,), (64,), slots=256, costs=CostModel(hoisted_rotation=0.5, key=0.0))
    assert p.cost()["hoisted_rotations"] == 9 and p.cost()["rotations"] == 9  # 3 radix-4 stages
    rng = np.random.default_rng(12)
    a, b = small_ints(rng, (64,)), small_ints(rng, (64,))
    assert p.simulate(a, b) == a @ b
    m = small_ints(rng, (8, 64))
    q = plan("k,ik->i", (64,), (8, 64), slots=1024, encrypted=(True, False), costs=CostModel(key=0.0))
    np.testing.assert_array_equal(q.simulate(a, m), m @ a)
