"""Encrypted einsum at TOY parameters: every form, every mix of encrypted and plaintext operands,
against numpy.einsum within the stated bound, plus hypothesis-generated expressions.

Error bound (stated): max |decrypted - numpy| <= 1e-6 * max(1, max |numpy result|)
(TOY: 50-bit scale, so observed errors sit near 1e-10 of the result's magnitude).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import CKKSContext, CKKSParameters, LevelError
from tensor_ops import CipherTensor, einsum, encrypt
from tensor_ops.plan import plan
from tests.tensor_ops.helpers import encryption_patterns
from tests.tensor_ops.test_einsum_plain import einsum_cases

REL_BOUND = 1e-6

FORMS = [
    ("ij,jk->ik", [(8, 8), (8, 8)]),
    ("ij->ji", [(8, 16)]),
    ("ii", [(6, 6)]),
    ("bij,bjk->bik", [(2, 4, 4), (2, 4, 4)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 3, 4)]),
    ("chw,oc->ohw", [(3, 4, 4), (2, 3)]),
    ("i,i->", [(64,), (64,)]),
    ("ik,k->i", [(16, 16), (16,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk,k->i", [(3, 4), (4, 5), (5,)]),
    ("...ij,...jk", [(2, 3, 4), (4, 2)]),
    ("ij,ij->ij", [(1, 4), (3, 4)]),
]


@pytest.fixture(scope="module")
def params():
    return CKKSParameters.preset("TOY")


@pytest.fixture(scope="module")
def ctx(params):
    rots = set()
    for expr, shapes in FORMS:
        for enc in encryption_patterns(len(shapes)):
            rots |= set(plan(expr, *shapes, params=params, encrypted=enc).rotations())
    return CKKSContext.keygen(params, rotations=sorted(rots), seed=7)


def _check(got, want):
    assert got.shape == want.shape
    bound = REL_BOUND * max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    assert float(np.max(np.abs(got - want))) <= bound


@pytest.mark.parametrize("expr,shapes", FORMS, ids=[f[0] for f in FORMS])
def test_forms_encrypted_every_operand_mix(ctx, expr, shapes):
    rng = np.random.default_rng(5)
    arrays = [rng.uniform(-1, 1, size=s) for s in shapes]
    want = np.einsum(expr, *arrays)
    for enc in encryption_patterns(len(shapes)):
        ops = [encrypt(ctx, a) if e else a for a, e in zip(arrays, enc)]
        res = einsum(expr, *ops)
        assert isinstance(res, CipherTensor)
        assert res.level == ctx.params.max_level - plan(expr, *shapes, params=ctx.params, encrypted=enc).depth()
        _check(res.decrypt(ctx), want)


def test_operators_encrypted(ctx):
    rng = np.random.default_rng(6)
    a, b = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, (8, 8))
    A, B = encrypt(ctx, a), encrypt(ctx, b)
    _check((A @ B).decrypt(ctx), a @ b)
    _check((A @ b).decrypt(ctx), a @ b)
    _check((a @ B).decrypt(ctx), a @ b)
    _check(A.T.decrypt(ctx), a.T)
    _check((A + B - 2.0).decrypt(ctx), a + b - 2.0)
    _check((A * 3.0).decrypt(ctx), a * 3.0)
    _check((A * B).decrypt(ctx), a * b)
    _check((-A).decrypt(ctx), -a)
    assert A.shape == (8, 8) and A.level == ctx.params.max_level


def test_too_deep_is_refused_before_any_encryption(params):
    # a chain of encrypted products needs more levels than TOY has (4)
    expr = "i,i,i,i,i,i,i,i,i,i,i,i,i,i,i,i,i->i"
    with pytest.raises(LevelError, match=r"needs depth \d+ but only 4"):
        plan(expr, *[(4,)] * 17, params=params)


def test_too_deep_for_the_operands_level(ctx):
    a = encrypt(ctx, np.ones((4, 4)), level=1)
    with pytest.raises(LevelError, match="depth 2 but only 1"):
        einsum("ij,jk->ik", a, a)


def _random_case_within_bound(params, case, seed):
    expr, shapes, enc, _ = case
    p = plan(expr, *shapes, slots=params.slots, encrypted=enc)
    if p.depth() > params.max_level or len(p.rotations()) > 40 or p.cost()["ciphertexts"] > 2:
        return  # too deep for TOY (refusal tested above) or too slow for a default test
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=seed % 1000)
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, size=s) for s in shapes]
    ops = [encrypt(ctx, a) if e else a for a, e in zip(arrays, enc)]
    _check(einsum(expr, *ops).decrypt(ctx), np.einsum(expr, *arrays))


@settings(max_examples=4, deadline=None)
@given(einsum_cases(), st.integers(0, 2**32 - 1))
def test_random_expressions_encrypted_within_bound(params, case, seed):
    _random_case_within_bound(params, case, seed)


@pytest.mark.slow
@pytest.mark.parametrize("expr,shapes,enc", [
    ("ij,jk->ik", [(8, 8), (8, 8)], (True, True)),
    ("ik,k->i", [(64, 64), (64,)], (False, True)),
    ("bij,bjk->bik", [(4, 8, 8), (4, 8, 8)], (True, False)),
    ("ij,jk->ik", [(32, 32), (32, 32)], (True, True)),
])
@pytest.mark.parametrize("layouts", [None, "auto"])
def test_n14_encrypted_within_bound(expr, shapes, enc, layouts):
    params = CKKSParameters.preset("N14")
    p = plan(expr, *shapes, params=params, encrypted=enc, layouts=layouts)
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=11)
    rng = np.random.default_rng(12)
    arrays = [rng.uniform(-1, 1, size=s) for s in shapes]
    ops = [encrypt(ctx, a, layout=lay) if e else a for a, e, lay in zip(arrays, enc, p.input_layouts)]
    _check(einsum(expr, *ops, plan=p).decrypt(ctx), np.einsum(expr, *arrays))


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(einsum_cases(), st.integers(0, 2**32 - 1))
def test_random_expressions_encrypted_many(params, case, seed):
    _random_case_within_bound(params, case, seed)
