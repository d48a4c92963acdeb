"""CipherTensor API: operators with numpy broadcasting, sums, transposes, matmul rules, immutability,
and clear errors for bad input (on the plain backend; one TOY context for the key/level checks)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crypto import (CKKSContext, CKKSParameters, ContextMismatchError, KeyMissingError, LevelError,
                    SerializationError, ShapeError)
from tensor_ops import CipherTensor, CKKSBackend, PlainBackend, SlotLayout, einsum, encrypt, plan

BE = PlainBackend(256)


def _ints(shape, seed=0):
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(float)


@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
                                   ((5,), (2, 5))])
def test_elementwise_broadcasting_both_orders(sa, sb):
    a, b = _ints(sa, 1), _ints(sb, 2)
    A, B = encrypt(BE, a), encrypt(BE, b)
    for got, want in [(A + B, a + b), (A - B, a - b), (A * B, a * b), (A + b, a + b), (a - B, a - b),
                      (b * A, b * a), (A - 2, a - 2), (2 - A, 2 - a), (A * 0.5, a * 0.5), (-A, -a),
                      (A / 4, a / 4)]:
        assert isinstance(got, CipherTensor)
        np.testing.assert_array_equal(got.decrypt(), want)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                                   ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 2)), ((3, 4), (2, 4, 5))])
def test_matmul_follows_numpy_rules(sa, sb):
    a, b = _ints(sa, 3), _ints(sb, 4)
    A, B = encrypt(BE, a), encrypt(BE, b)
    for got in (A @ B, A @ b, a @ B):
        np.testing.assert_array_equal(got.decrypt(), a @ b)


def test_sum_transpose_and_chains():
    a = _ints((2, 3, 4), 5)
    A = encrypt(BE, a)
    np.testing.assert_array_equal(A.sum(1).decrypt(), a.sum(1))
    np.testing.assert_array_equal(A.sum((0, 2)).decrypt(), a.sum((0, 2)))
    np.testing.assert_array_equal(A.sum().decrypt(), a.sum())
    np.testing.assert_array_equal(A.sum(-1, keepdims=True).decrypt(), a.sum(-1, keepdims=True))
    np.testing.assert_array_equal(A.transpose(2, 0, 1).decrypt(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(A.transpose((1, 0, 2)).decrypt(), a.transpose(1, 0, 2))
    m = _ints((4, 6), 6)
    M = encrypt(BE, m)
    np.testing.assert_array_equal(M.T.decrypt(), m.T)
    # results of earlier operations (strided, dirty layouts) feed later ones
    C = (M.T @ M) * 2 - M.T @ m + (M.sum(0) * M).T @ M
    np.testing.assert_array_equal(C.decrypt(), (m.T @ m) * 2 - m.T @ m + (m.sum(0) * m).T @ m)
    assert A.shape == (2, 3, 4) and A.ndim == 3 and len(A) == 2 and A.size == 24


def test_operations_never_mutate_inputs():
    a = _ints((3, 3), 7)
    A = encrypt(BE, a)
    before = [c.copy() for c in A.ciphertexts]
    _ = (A @ A, A + 1, A.T, A.sum(0), A * A)
    for c, d in zip(A.ciphertexts, before):
        np.testing.assert_array_equal(c, d)
    with pytest.raises(AttributeError):
        A.layout = None


def test_tiled_tensor_operations():
    a, b = _ints((20, 30), 8), _ints((30, 7), 9)
    A = encrypt(BE, a)
    assert len(A.ciphertexts) > 1
    np.testing.assert_array_equal((A @ b).decrypt(), a @ b)
    np.testing.assert_array_equal((A + a).decrypt(), 2 * a)
    np.testing.assert_array_equal(einsum("ij->j", A).decrypt(), a.sum(0))


def test_scalars_encrypt_and_broadcast():
    s = encrypt(BE, 3.0)
    assert s.shape == () and float(s.decrypt()) == 3.0
    a = _ints((2, 3))
    np.testing.assert_array_equal((encrypt(BE, a) * s).decrypt(), a * 3.0)
    np.testing.assert_array_equal((encrypt(BE, a).sum() + s).decrypt(), a.sum() + 3.0)


def test_plain_only_einsum_returns_numpy():
    a = _ints((2, 3))
    np.testing.assert_array_equal(einsum("ij->ji", a), a.T)


def test_step_by_step_trace_on_plain_backend():
    p = plan("ij,jk->ik", (3, 4), (4, 2), slots=64)
    seen = []
    out = PlainBackend(64).run(p, _ints((3, 4)), _ints((4, 2), 1), on_step=lambda s, v: seen.append((s, v)))
    assert [s for s, _ in seen] == list(p.steps)
    assert all(v.shape == (64,) for _, v in seen)
    np.testing.assert_array_equal(out, _ints((3, 4)) @ _ints((4, 2), 1))


def test_bad_input_errors_are_clear():
    A = encrypt(BE, _ints((3, 4)))
    with pytest.raises(ShapeError, match="do not broadcast"):
        A + np.ones((5,))
    with pytest.raises(ShapeError, match="operand 1"):
        A @ np.ones((5, 2))
    with pytest.raises(ShapeError, match="not numeric"):
        encrypt(BE, np.array(["a"]))
    with pytest.raises(ShapeError, match="layout shape"):
        encrypt(BE, np.ones(3), layout=SlotLayout.compact((4,), 256))
    with pytest.raises(ShapeError, match="permutation"):
        A.transpose(0, 0)
    with pytest.raises(ShapeError, match="permutation"):
        A.transpose(0, 3)
    with pytest.raises(ShapeError, match="axis=5"):
        A.sum(5)
    with pytest.raises(ContextMismatchError):
        A + encrypt(PlainBackend(512), _ints((3, 4)))
    with pytest.raises(ShapeError, match="ctx must be"):
        encrypt(object(), np.ones(2))
    with pytest.raises(ShapeError, match="power of two"):
        plan("i->", (3,), slots=100)
    with pytest.raises(ShapeError, match="params"):
        plan("i->", (3,))


@pytest.fixture(scope="module")
def toy():
    params = CKKSParameters.preset("TOY")
    return CKKSContext.keygen(params, rotations=plan("ij,jk->ik", (4, 4), (4, 4), params=params,
                                                     encrypted=(True, False)).rotations(), seed=3)


def test_missing_rotation_key_is_reported(toy):
    A = encrypt(toy, _ints((4, 4)))
    np.testing.assert_allclose((A @ _ints((4, 4), 1)).decrypt(toy), _ints((4, 4)) @ _ints((4, 4), 1), atol=1e-6)
    with pytest.raises(KeyMissingError, match="rotation"):
        A @ A  # needs keys that were not generated


def test_level_is_tracked_and_exhaustion_refused(toy):
    A = encrypt(toy, _ints((4, 4)) / 4)
    B = A * 0.5
    assert B.level == A.level - 1
    x = A
    for _ in range(toy.params.max_level):
        x = x * x
    assert x.level == 0
    with pytest.raises(LevelError, match="depth 1 but only 0"):
        x * x


def test_plan_argument_errors_name_the_parameter():
    with pytest.raises(ShapeError, match="encrypted has 1 flags for 2 operands"):
        plan("ij,jk->ik", (2, 3), (3, 4), slots=64, encrypted=(True,))
    with pytest.raises(ShapeError, match="layouts="):
        plan("ij->ji", (2, 3), slots=64, layouts="best")
    with pytest.raises(ShapeError, match="operand 0: layout"):
        plan("ij->ji", (2, 3), slots=64, layouts=[SlotLayout.compact((3, 2), 64)])
    with pytest.raises(ShapeError, match="operand 1"):
        plan("ij,jk->ik", (2, 3), (4, 4), slots=64)
    p = plan("ij,jk->ik", (2, 3), (3, 4), slots=64)
    with pytest.raises(ShapeError, match="plan is for"):
        einsum("ij,jk->ik", encrypt(PlainBackend(64), _ints((2, 3))), _ints((3, 5)), plan=p)
    with pytest.raises(ShapeError, match="expects operands encrypted"):
        einsum("ij,jk->ik", encrypt(PlainBackend(64), _ints((2, 3))), _ints((3, 4)), plan=p)


def test_plan_execute_on_both_backends(toy):
    p = plan("ij,jk->ik", (4, 4), (4, 4), params=toy.params, encrypted=(True, False))
    a, b = _ints((4, 4), 1), _ints((4, 4), 2)
    np.testing.assert_array_equal(p.execute(PlainBackend(), a, b), a @ b)
    res = p.execute(CKKSBackend(toy), encrypt(toy, a), b)
    assert isinstance(res, CipherTensor)
    np.testing.assert_allclose(res.decrypt(toy), a @ b, atol=1e-6)


@st.composite
def index_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    key = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "none", "all"]))
        if kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(st.integers(0, n - 1))
            key.append(slice(start, draw(st.integers(start + 1, n)), draw(st.integers(1, 3))))
        elif kind == "none":
            key += [None, slice(None)]
        else:
            key.append(slice(None))
    return shape, tuple(key), draw(st.sampled_from([4, 16, 256]))


@given(index_cases())
def test_indexing_is_free_and_matches_numpy(case):
    shape, key, slots = case
    a = _ints(shape, 11)
    A = encrypt(PlainBackend(slots), a)
    view = A[key]
    np.testing.assert_array_equal(view.decrypt(), a[key])
    # the view is a real operand: it feeds further operations
    np.testing.assert_array_equal((view * 2 + 1).decrypt(), a[key] * 2 + 1)
    np.testing.assert_array_equal(view.sum().decrypt(), a[key].sum())


def test_indexing_errors():
    A = encrypt(BE, _ints((3, 4)))
    with pytest.raises(ShapeError, match="out of bounds"):
        A[3]
    with pytest.raises(ShapeError, match="too many indices"):
        A[0, 0, 0]
    with pytest.raises(ShapeError, match="positive steps"):
        A[::-1]
    with pytest.raises(ShapeError, match="only ints"):
        A[[0, 1]]


def test_plan_accepts_a_shape_list_arrays_and_one_encrypted_flag():
    a, b = _ints((2, 3)), _ints((3, 4))
    p = plan("ij,jk->ik", [(2, 3), (3, 4)], slots=64, encrypted=True)
    q = plan("ij,jk->ik", a, b, slots=64, encrypted=(True, True))
    assert p.rotations() == q.rotations() and p.encrypted == (True, True)
    r = plan("ij->ji", (2, 3), slots=64, encrypted=False)
    assert r.rotations() == [] and r.depth() == 0
    np.testing.assert_array_equal(r.simulate(a), a.T)
    with pytest.raises(ShapeError, match="not a tuple of ints"):
        plan("ij,jk", (2, "a"), (3, 4), slots=64)


def test_bytes_round_trip_through_a_public_server(toy):
    a, b = _ints((4, 4), 3), _ints((4, 4), 4)
    blob = encrypt(toy, a).to_bytes()
    server = CKKSContext.from_bytes(toy.public_context().to_bytes())
    assert not server.has_secret_key
    result = (CipherTensor.from_bytes(blob, server) @ b).to_bytes()  # server side: no secret key
    np.testing.assert_allclose(CipherTensor.from_bytes(result, toy).decrypt(toy), a @ b, atol=1e-6)
    with pytest.raises(SerializationError):
        CipherTensor.from_bytes(blob[:-5], toy)
    with pytest.raises(SerializationError):
        CipherTensor.from_bytes(b"garbage", toy)
    with pytest.raises(SerializationError):
        encrypt(BE, a).to_bytes()
