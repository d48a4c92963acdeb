"""The einsum planner's public surface: any ``np.einsum`` on CipherTensors agrees with numpy (issue 4).

Stated error bound: max |decrypted − numpy| ≤ 1e-6 · max(1, max |numpy result|) at TOY parameters
(50-bit scale) for inputs in [−1, 1].
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensor_ops
from crypto import CKKSContext, CKKSParameters, CKKSParametersLiteral
from crypto.errors import HEError, LevelError
from tensor_ops import CipherTensor, PlainBackend, SlotLayout

REL_BOUND = 1e-6

FORMS = [
    ("ij->ji", [(5, 7)]),                                  # transpose
    ("ijk->kij", [(2, 3, 4)]),                             # permutation
    ("ij->i", [(6, 5)]),                                   # sum over an axis
    ("ij->", [(4, 9)]),                                    # total sum
    ("ii->", [(5, 5)]),                                    # trace
    ("ii->i", [(6, 6)]),                                   # diagonal
    ("i,j->ij", [(3,), (5,)]),                             # outer product
    ("ij,jk->ik", [(6, 5), (5, 3)]),                       # matmul
    ("bij,bjk->bik", [(3, 4, 2), (3, 2, 5)]),              # batched matmul
    ("ij,jk,kl->il", [(3, 4), (4, 2), (2, 3)]),            # three operands
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 3)]),        # ellipsis
    ("ij,ij->ij", [(1, 5), (4, 5)]),                       # size-1 broadcasting
    ("ij,jk", [(3, 4), (4, 2)]),                           # implicit output
    ("ba,ca", [(3, 4), (2, 4)]),                           # implicit output, alphabetical order
    ("i,i", [(9,), (9,)]),                                 # implicit dot product
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),     # attention scores
]
MIXES = {1: [(True,)], 2: [(True, True), (True, False), (False, True)],
         3: [(True, True, True), (False, True, False)]}


def cases():
    for expr, shapes in FORMS:
        for enc in MIXES[len(shapes)]:
            yield expr, shapes, enc


@pytest.fixture(scope="module")
def params():
    return CKKSParameters.preset("TOY")


@pytest.fixture(scope="module")
def ctx(params):
    rotations = set()
    for expr, shapes, enc in cases():
        rotations |= set(tensor_ops.plan(expr, *shapes, params=params, encrypted=enc).rotations())
    return CKKSContext.keygen(params, rotations=sorted(rotations), seed=3)


def check(got, want):
    got = np.asarray(got)
    assert got.shape == np.shape(want)
    scale = max(1.0, float(np.max(np.abs(want)))) if np.size(want) else 1.0
    assert float(np.max(np.abs(got - want), initial=0.0)) <= REL_BOUND * scale


def arrays_for(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s) for s in shapes]


# ------------------------------------------------------------------ every form, every operand mix
@pytest.mark.parametrize("expr,shapes,enc", list(cases()), ids=[f"{e}-{''.join('EP'[not x] for x in m)}"
                                                                for e, _, m in cases()])
def test_einsum_matches_numpy(ctx, expr, shapes, enc):
    arrays = arrays_for(shapes)
    ops = [tensor_ops.encrypt(ctx, a) if e else a for a, e in zip(arrays, enc)]
    out = tensor_ops.einsum(expr, *ops)
    assert isinstance(out, CipherTensor)
    want = np.einsum(expr, *arrays)
    assert out.shape == want.shape
    check(out.decrypt(ctx), want)
    for o, a in zip(ops, arrays):      # inputs are not mutated
        if isinstance(o, CipherTensor):
            check(o.decrypt(ctx), a)


def test_all_plain_operands_give_numpy():
    a, b = arrays_for([(3, 4), (4, 2)])
    out = tensor_ops.einsum("ij,jk->ik", a, b)
    assert isinstance(out, np.ndarray) and np.allclose(out, a @ b)


# ------------------------------------------------------------------ CipherTensor surface
def test_cipher_tensor_operators(ctx):
    a, b = arrays_for([(4, 3), (4, 3)], seed=1)
    row = np.linspace(-1, 1, 3)
    A, B = tensor_ops.encrypt(ctx, a), tensor_ops.encrypt(ctx, b)
    assert A.shape == (4, 3) and isinstance(A.level, int) and A.level == ctx.params.max_level
    check((A + B).decrypt(ctx), a + b)
    check((A - B).decrypt(ctx), a - b)
    check((A * B).decrypt(ctx), a * b)
    check((A + row).decrypt(ctx), a + row)        # broadcasting like numpy
    check((row - A).decrypt(ctx), row - a)
    check((A * 2.5).decrypt(ctx), a * 2.5)
    check((0.5 * A).decrypt(ctx), 0.5 * a)
    check((3 - A).decrypt(ctx), 3 - a)
    check((b * A).decrypt(ctx), a * b)
    check(A.sum(0).decrypt(ctx), a.sum(0))
    check(A.sum(axis=1).decrypt(ctx), a.sum(1))
    check(A.T.decrypt(ctx), a.T)
    check(A.transpose((1, 0)).decrypt(ctx), a.T)
    check((A.T @ B).decrypt(ctx), a.T @ b)
    check((A @ b.T).decrypt(ctx), a @ b.T)
    check((a.T @ B).decrypt(ctx), a.T @ b)


def test_cipher_tensor_is_immutable(ctx):
    A = tensor_ops.encrypt(ctx, np.ones((2, 2)))
    with pytest.raises(Exception):
        A.layout = None
    with pytest.raises(Exception):
        A[0] = 1
    assert isinstance(A.layout, SlotLayout)


def test_numpy_functions_and_iteration(ctx):
    (a,) = arrays_for([(3, 4)], seed=15)
    A = tensor_ops.encrypt(ctx, a)
    check(np.sum(A, axis=0).decrypt(ctx), a.sum(0))
    check(np.transpose(A).decrypt(ctx), a.T)
    rows = [row.decrypt(ctx) for row in A]
    assert len(rows) == 3
    check(np.array(rows), a)
    check((A / 4).decrypt(ctx), a / 4)


def test_cipher_tensor_3d_sum_and_transpose(ctx):
    (a,) = arrays_for([(2, 3, 4)], seed=2)
    A = tensor_ops.encrypt(ctx, a)
    check(A.transpose((2, 0, 1)).decrypt(ctx), a.transpose(2, 0, 1))
    check(A.sum(axis=2).decrypt(ctx), a.sum(2))


# ------------------------------------------------------------------ plans
def test_plan_surface(params):
    p = tensor_ops.plan("ij,jk->ik", (8, 8), (8, 8), params=params, encrypted=(True, False))
    text = p.explain()
    assert isinstance(text, str) and "ij,jk->ik" in text
    assert str(p)
    rots = p.rotations()
    assert all(isinstance(k, int) for k in rots) and len(set(rots)) == len(rots)
    assert isinstance(p.depth(), int) and 1 <= p.depth() <= params.max_level
    cost = p.cost()
    for key in ("rotations", "multiplies", "ciphertexts"):
        assert isinstance(cost[key], int) and cost[key] >= 0
    assert cost["ciphertexts"] >= 1


def test_plan_call_styles(params):
    want = tensor_ops.plan("ij,jk->ik", (3, 4), (4, 5), params=params)
    for p in (tensor_ops.plan("ij,jk->ik", [(3, 4), (4, 5)], params=params),
              tensor_ops.plan("ij,jk->ik", np.ones((3, 4)), np.ones((4, 5)), params="TOY"),
              tensor_ops.plan("ij,jk->ik", (3, 4), (4, 5), params=params, encrypted=[1, 1])):
        assert (p.rotations(), p.depth(), p.cost()) == (want.rotations(), want.depth(), want.cost())
    with pytest.raises(HEError):
        tensor_ops.plan("ij,jk->ik", (3, 4), (4, 5), params=42)


def test_keys_from_the_plan_are_enough(params):
    a, b = arrays_for([(6, 6), (6, 6)], seed=4)
    p = tensor_ops.plan("ij,jk->ik", a.shape, b.shape, params=params)
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=5)
    out = tensor_ops.einsum("ij,jk->ik", tensor_ops.encrypt(ctx, a), tensor_ops.encrypt(ctx, b))
    check(out.decrypt(ctx), a @ b)
    # and without the keys the library says which rotation is missing (never a crash)
    bare = CKKSContext.keygen(params, seed=5)
    if p.rotations():
        with pytest.raises(HEError, match="rotat"):
            tensor_ops.einsum("ij,jk->ik", tensor_ops.encrypt(bare, a), tensor_ops.encrypt(bare, b))


def test_keys_must_follow_the_plan_or_be_a_power_of_two_set(params):
    a, b = arrays_for([(6, 5), (5, 4)], seed=12)
    p = tensor_ops.plan("ij,jk->ik", a.shape, b.shape, params=params)
    short = PlainBackend(params.slots, rotations=p.rotations()[1:])
    with pytest.raises(HEError, match=str(p.rotations()[0])):
        p.simulate(a, b, backend=short)
    powers = [1 << i for i in range(params.slots.bit_length() - 1)]
    assert np.allclose(p.simulate(a, b, backend=PlainBackend(params.slots, rotations=powers)), a @ b)
    ctx = CKKSContext.keygen(params, rotations=powers + [-k for k in powers], seed=13)
    A, B = tensor_ops.encrypt(ctx, a), tensor_ops.encrypt(ctx, b)
    check((A @ B).decrypt(ctx), a @ b)
    check(A.sum(axis=0).decrypt(ctx), a.sum(0))


def test_numpy_call_styles(ctx):
    a, b = arrays_for([(6, 5), (5, 3)], seed=14)
    A = tensor_ops.encrypt(ctx, a)
    check(tensor_ops.einsum(A, [0, 1], b, [1, 2], [0, 2]).decrypt(ctx), a @ b)
    check(tensor_ops.einsum(A, [0, 1], b, [1, 2]).decrypt(ctx), a @ b)
    check(tensor_ops.einsum("ij,jk->ik", A, b, optimize=True).decrypt(ctx), a @ b)
    check(tensor_ops.einsum(" ij , jk -> ik ", A, b).decrypt(ctx), a @ b)


def test_matrix_vector_strategy_is_chosen_and_explained():
    p = tensor_ops.plan("ij,j->i", (64, 64), (64,), params=CKKSParameters.preset("N14"), encrypted=(False, True))
    text = p.explain().lower()
    assert "diagonal" in text or "bsgs" in text or "baby" in text
    assert p.cost()["rotations"] < 64 + 64


def test_plain_backend_runs_the_same_plan_without_keys(params):
    a, b = arrays_for([(5, 7), (7, 3)], seed=6)
    p = tensor_ops.plan("ij,jk->ik", a.shape, b.shape, params=params)
    assert np.allclose(p.simulate(a, b), a @ b, rtol=1e-12, atol=1e-12)
    steps = []
    p.simulate(a, b, on_step=lambda step, value: steps.append(step))
    assert len(steps) >= 1
    for backend in (PlainBackend(params.slots), PlainBackend()):
        A, B = tensor_ops.encrypt(backend, a), tensor_ops.encrypt(backend, b)
        assert np.allclose(tensor_ops.einsum("ij,jk->ik", A, B).decrypt(), a @ b, rtol=1e-12, atol=1e-12)
        assert np.allclose((A @ b).decrypt(), a @ b, rtol=1e-12, atol=1e-12)
    assert np.allclose(p.execute(PlainBackend(), a, b), a @ b, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ tiling and level management
def test_tiling_tensors_larger_than_the_slots(ctx):
    slots = ctx.params.slots
    (a,) = arrays_for([(3, slots // 2 + 5)], seed=7)         # 1.5x the slots: several ciphertexts
    A = tensor_ops.encrypt(ctx, a)
    assert len(A.ciphertexts) >= 2
    check(A.decrypt(ctx), a)
    check((A + a).decrypt(ctx), 2 * a)
    check((A * 0.5).decrypt(ctx), 0.5 * a)
    check(A.T.decrypt(ctx), a.T)


def test_tiled_matmul(params):
    a, b = arrays_for([(64, 48), (48, 8)], seed=8)             # 3072 elements > 2048 slots
    p = tensor_ops.plan("ij,jk->ik", a.shape, b.shape, params=params, encrypted=(True, False))
    assert p.cost()["ciphertexts"] >= 2
    assert np.allclose(p.simulate(a, b), a @ b)
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=9)
    out = tensor_ops.einsum("ij,jk->ik", tensor_ops.encrypt(ctx, a), b)
    check(out.decrypt(ctx), a @ b)


@pytest.fixture(scope="module")
def shallow():
    lit = CKKSParametersLiteral(log_n=10, log_q=[[30, 30], [25, 26]], log_p=[30, 30, 30], log_scale=50,
                                insecure=True)
    return CKKSParameters.from_literal(lit)


def test_too_deep_plan_refused_before_encryption(shallow):
    shapes = [(4,), (4,), (4,), (4,)]
    with pytest.raises(LevelError) as info:
        tensor_ops.plan("i,i,i,i->i", *shapes, params=shallow)
    message = str(info.value)
    assert str(shallow.max_level) in message and "depth" in message


def test_too_deep_einsum_refused_before_work(shallow):
    ctx = CKKSContext.keygen(shallow, seed=1)
    ops = [tensor_ops.encrypt(ctx, np.full(4, 0.5)) for _ in range(4)]
    with pytest.raises(LevelError, match="depth"):
        tensor_ops.einsum("i,i,i,i->i", *ops)
    low = tensor_ops.encrypt(ctx, np.full(4, 0.5), level=0)
    with pytest.raises(LevelError):
        low * low


# ------------------------------------------------------------------ bad input
def test_bad_einsum_input_raises_library_errors(ctx):
    A = tensor_ops.encrypt(ctx, np.ones((3, 4)))
    bad = [lambda: tensor_ops.einsum("ij,jk->ik", A, np.ones((5, 2))),     # size mismatch
           lambda: tensor_ops.einsum("ij,jk->ik", A),                       # too few operands
           lambda: tensor_ops.einsum("ij->iz", A),                          # unknown output index
           lambda: tensor_ops.einsum("ij->ii", A),                          # repeated output index
           lambda: tensor_ops.einsum("ijk->i", A),                          # too many indices
           lambda: tensor_ops.einsum("i$->i", A),                           # invalid character
           lambda: tensor_ops.einsum(3, A),
           lambda: A + np.ones((5, 5)),                                      # not broadcastable
           lambda: A @ np.ones((5, 2)),
           lambda: A.sum(axis=2),
           lambda: A.transpose((0, 0)),
           lambda: tensor_ops.encrypt(ctx, np.array(["a", "b"])),
           lambda: tensor_ops.encrypt(ctx, [[1, 2], [3]]),
           lambda: A + "x",
           lambda: A * None,
           lambda: A / 0,
           lambda: A / A,
           lambda: A.sum(1.5),
           lambda: A.sum((0, 0)),
           lambda: A.transpose(1.5),
           lambda: tensor_ops.plan("ij,jk->ik", (3, 4), (4, 2), params=ctx.params, encrypted=(True,))]
    for make in bad:
        with pytest.raises(HEError):
            make()


def test_mixing_tensors_of_different_keys_refused(ctx, params):
    other = CKKSContext.keygen(params, seed=11)
    A, B = tensor_ops.encrypt(ctx, np.ones(4)), tensor_ops.encrypt(other, np.ones(4))
    with pytest.raises(HEError):
        A + B
    with pytest.raises(HEError):
        A.decrypt(other)


# ------------------------------------------------------------------ random expressions
LETTERS = "abcde"


@st.composite
def expressions(draw, max_size=9, max_axes=4, max_operands=3):
    sizes = {c: draw(st.integers(1, max_size)) for c in LETTERS}
    terms = []
    for _ in range(draw(st.integers(1, max_operands))):
        terms.append("".join(draw(st.lists(st.sampled_from(LETTERS), min_size=0, max_size=max_axes))))
    used = sorted(set("".join(terms)))
    if draw(st.booleans()):
        expr = ",".join(terms)
    else:
        out = draw(st.permutations(used)) if used else []
        expr = ",".join(terms) + "->" + "".join(out[:draw(st.integers(0, len(out)))])
    shapes = [tuple(1 if draw(st.integers(0, 5)) == 0 else sizes[c] for c in t) for t in terms]
    # a repeated index within one term must have one size; size-1 broadcasting across terms is allowed
    shapes = [tuple(sizes[c] if t.count(c) > 1 else s for c, s in zip(t, shp)) for t, shp in zip(terms, shapes)]
    return expr, shapes


@given(expressions(), st.integers(0, 2**16), st.sampled_from([16, 64, 2048]), st.data())
def test_random_expressions_plain_backend_exact(case, seed, slots, data):
    """Small integers: every sum is exact in float64, so the plain backend must equal numpy exactly
    (16 and 64 slots force tiling over several "ciphertexts")."""
    expr, shapes = case
    enc = tuple(data.draw(st.lists(st.booleans(), min_size=len(shapes), max_size=len(shapes)).filter(any)))
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-5, 6, s).astype(float) for s in shapes]
    want = np.einsum(expr, *arrays)
    p = tensor_ops.plan(expr, *shapes, slots=slots, encrypted=enc)
    got = p.simulate(*arrays)
    assert np.shape(got) == want.shape and np.array_equal(got, want)
    backend = PlainBackend(slots)
    ops = [tensor_ops.encrypt(backend, a) if e else a for a, e in zip(arrays, enc)]
    assert np.array_equal(tensor_ops.einsum(expr, *ops).decrypt(), want)


@settings(max_examples=6)
@given(expressions(max_size=4, max_axes=3), st.integers(0, 2**16), st.data())
def test_random_expressions_encrypted(ctx, case, seed, data):
    expr, shapes = case
    enc = tuple(data.draw(st.lists(st.booleans(), min_size=len(shapes), max_size=len(shapes))
                          .filter(any)))
    arrays = arrays_for(shapes, seed)
    p = tensor_ops.plan(expr, *shapes, params=ctx.params, encrypted=enc)
    keyed = ctx.with_rotations(p.rotations())
    ops = [tensor_ops.encrypt(keyed, a) if e else a for a, e in zip(arrays, enc)]
    check(tensor_ops.einsum(expr, *ops).decrypt(keyed), np.einsum(expr, *arrays))
