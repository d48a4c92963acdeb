"""Every CKKS operation decrypted and compared with numpy (TOY ring; precision asserted in bits)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext, Ciphertext, Plaintext
from tests.crypto.ckks_helpers import ROTATIONS, bits, context, uniform

FRESH_BITS = 30      # fresh public-key encryption at TOY measures ~34 bits
OP_BITS = 28         # one multiply or rotation at TOY measures ~32 bits


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(1)
    return uniform(rng, 2048), uniform(rng, 2048), uniform(rng, 300, complex_values=True)


def test_round_trip_real_and_complex(ctx, vectors):
    x, _, z = vectors
    got = ctx.decrypt(ctx.encrypt(x))
    assert got.dtype == np.float64 and got.shape == x.shape and bits(x, got) > FRESH_BITS
    got = ctx.decrypt(ctx.encrypt(z))
    assert np.iscomplexobj(got) and got.shape == (300,) and bits(z, got) > FRESH_BITS


def test_public_key_and_secret_key_encryption(ctx, vectors):
    x = vectors[0]
    pub = ctx.public_context()
    assert not pub.has_secret_key
    assert bits(x, ctx.decrypt(pub.encrypt(x))) > FRESH_BITS
    assert bits(x, ctx.decrypt(ctx.encrypt(x, use_secret_key=False))) > FRESH_BITS
    # secret-key encryption has one Gaussian term instead of three: clearly less noise
    assert bits(x, ctx.decrypt(ctx.encrypt(x))) > bits(x, ctx.decrypt(pub.encrypt(x))) + 2


@given(length=st.integers(1, 2048), level=st.integers(0, 4), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_any_length_and_level(ctx, length, level, seed):
    x = uniform(np.random.default_rng(seed), length)
    ct = ctx.encrypt(x, level=level)
    assert ct.level == level and ct.length == length
    got = ctx.decrypt(ct)
    assert got.shape == (length,) and bits(x, got) > FRESH_BITS


def test_add_sub_neg(ctx, vectors):
    x, y, _ = vectors
    ev = ctx.evaluator
    cx, cy = ctx.encrypt(x), ctx.encrypt(y)
    cases = {
        "ct+ct": (ev.add(cx, cy), x + y), "ct-ct": (ev.sub(cx, cy), x - y), "-ct": (ev.neg(cx), -x),
        "ct+pt": (ev.add(cx, ctx.encode(y)), x + y), "ct-pt": (ev.sub(cx, ctx.encode(y)), x - y),
        "ct+arr": (cx + y, x + y), "arr+ct": (y + cx, x + y), "arr-ct": (y - cx, y - x),
        "ct-arr": (cx - y, x - y), "ct+3.5": (cx + 3.5, x + 3.5), "2-ct": (2 - cx, 2 - x),
        "ct+1j": (cx + 0.5j, x + 0.5j), "ct+ct op": (cx + cy, x + y), "-ct op": (-cx, -x),
    }
    for name, (ct, expected) in cases.items():
        assert ct.level == cx.level and ct.scale == cx.scale, name
        assert bits(expected, ctx.decrypt(ct)) > FRESH_BITS - 1, name


def test_inputs_are_not_mutated(ctx, vectors):
    x, y, _ = vectors
    cx = ctx.encrypt(x)
    before = [p.data.copy() for p in cx.parts]
    ev = ctx.evaluator
    for op in (lambda: ev.add(cx, cx), lambda: ev.mul_rescale(cx, cx), lambda: ev.rotate(cx, 1),
               lambda: ev.rescale(ev.mul(cx, y)), lambda: ev.conjugate(cx), lambda: ev.drop_level(cx, 2)):
        op()
    assert all(np.array_equal(a, p.data) for a, p in zip(before, cx.parts))
    assert all(not p.data.flags.writeable for p in cx.parts)


def test_ct_times_ct(ctx, vectors):
    x, y, _ = vectors
    ev = ctx.evaluator
    cx, cy = ctx.encrypt(x), ctx.encrypt(y)
    product = ev.mul(cx, cy)
    assert product.level == cx.level and product.scale == cx.scale * cy.scale
    assert bits(x * y, ctx.decrypt(product)) > OP_BITS
    rescaled = ev.rescale(product)
    top = np.prod([float(q) for q in ctx.params.q_levels[cx.level]])
    assert rescaled.level == cx.level - 1 and rescaled.scale == product.scale / top
    assert bits(x * y, ctx.decrypt(rescaled)) > OP_BITS
    fused = ev.mul_rescale(cx, cy)
    assert fused.level == rescaled.level and fused.scale == rescaled.scale
    assert bits(x * y, ctx.decrypt(fused)) > OP_BITS
    assert bits(x * x, ctx.decrypt(cx * cx)) > OP_BITS


def test_ct_times_plaintext_array_scalar(ctx, vectors):
    x, y, z = vectors
    ev = ctx.evaluator
    cx = ctx.encrypt(x)
    cases = {
        "pt": (ev.rescale(ev.mul(cx, ctx.encode(y))), x * y),
        "array": (cx * y, x * y), "rarray": (y * cx, x * y), "scalar": (cx * -2.75, x * -2.75),
        "int": (3 * cx, 3 * x), "complex scalar": (cx * (0.5 - 0.25j), x * (0.5 - 0.25j)),
        "complex array": (ev.mul_rescale(cx, z), x[:300] * z),
    }
    for name, (ct, expected) in cases.items():
        got = ctx.decrypt(ct)
        assert bits(expected, got[: len(expected)]) > OP_BITS, name
    low_scale = ev.rescale(ev.mul(cx, ctx.encode(y, scale=2.0**40)))   # result at scale ~2^40
    assert abs(np.log2(low_scale.scale) - 40) < 0.1 and bits(x * y, ctx.decrypt(low_scale)) > 20
    # vectors and scalars are encoded at the top level's modulus, so a rescale restores the scale exactly
    assert (cx * y).scale == cx.scale and (cx * 2.0).scale == cx.scale


def test_complex_multiply_and_conjugate(ctx, vectors):
    z = vectors[2]
    ev = ctx.evaluator
    cz = ctx.encrypt(z)
    assert bits(z * z, ctx.decrypt(cz * cz)) > OP_BITS
    conj = ev.conjugate(cz)
    assert np.iscomplexobj(ctx.decrypt(conj)) and bits(np.conj(z), ctx.decrypt(conj)) > OP_BITS


@pytest.mark.parametrize("step", ROTATIONS + [0, 2048, -2043])
def test_rotation_matches_numpy_roll(ctx, vectors, step):
    x = vectors[0]
    got = ctx.decrypt(ctx.evaluator.rotate(ctx.encrypt(x), step))
    assert bits(np.roll(x, -step), got) > OP_BITS


def test_short_vector_rotation_is_over_all_slots(ctx):
    x = np.arange(1, 6) / 8
    got = ctx.decrypt(ctx.evaluator.rotate(ctx.encrypt(x), -3))
    padded = np.zeros(ctx.params.slots)
    padded[:5] = x
    assert got.shape == (5,) and bits(np.roll(padded, 3)[:5], got) > OP_BITS


def test_hoisted_rotations_equal_single_rotations(ctx, vectors):
    x = vectors[0]
    ev = ctx.evaluator
    ct = ev.mul_rescale(ctx.encrypt(x), ctx.encrypt(x))
    many = ev.rotate_hoisted(ct, ROTATIONS)
    assert sorted(many) == sorted(ROTATIONS)
    for k, rotated in many.items():
        single = ev.rotate(ct, k)
        assert all(np.array_equal(a.data, b.data) for a, b in zip(rotated.parts, single.parts))
        assert bits(np.roll(x * x, -k), ctx.decrypt(rotated)) > OP_BITS


def test_level_drop_and_explicit_level(ctx, vectors):
    x = vectors[0]
    ev = ctx.evaluator
    ct = ctx.encrypt(x)
    low = ev.drop_level(ct, 3)
    assert low.level == ct.level - 3 and low.scale == ct.scale
    assert ev.to_level(ct, 0).level == 0
    assert bits(x, ctx.decrypt(low)) > FRESH_BITS


def test_automatic_level_and_scale_alignment(ctx, vectors):
    x, y, _ = vectors
    ev = ctx.evaluator
    cx, cy = ctx.encrypt(x), ctx.encrypt(y)
    xy = cx * cy                                  # level 3, scale 2^100 / q_top: not 2^50
    assert xy.scale != cx.scale
    for a, b in ((xy, cy), (cy, xy)):
        total = ev.add(a, b)
        assert total.level == xy.level - 1 or total.level == xy.level
        assert bits(x * y + y, ctx.decrypt(total)) > OP_BITS - 1
    diff = ev.sub(cy, xy)
    assert bits(y - x * y, ctx.decrypt(diff)) > OP_BITS - 1
    product = ev.mul_rescale(xy, cx)              # different levels: the higher one is dropped
    assert product.level == xy.level - 1
    assert bits(x * y * x, ctx.decrypt(product)) > OP_BITS - 2
    # at equal levels with different scales, the smaller-scale one is brought up at the cost of a level
    low = ev.drop_level(cy, 1)
    total = ev.add(xy, low)
    assert total.level == xy.level - 1 and bits(x * y + y, ctx.decrypt(total)) > OP_BITS - 1


def test_seeded_keygen_and_encryption_are_reproducible(vectors):
    x = vectors[0][:16]
    limbs = []
    for _ in range(2):
        ctx = CKKSContext.keygen("TOY", rotations=[1], seed=b"reproducible")
        ct = ctx.evaluator.rotate(ctx.encrypt(x) * ctx.encrypt(x), 1)
        limbs.append([p.data for p in ct.parts])
    assert all(np.array_equal(a, b) for a, b in zip(*limbs))
    other = CKKSContext.keygen("TOY", seed=b"another seed")
    assert not np.array_equal(other.public_key.a.data, ctx.public_key.a.data)


def test_unseeded_keys_differ():
    a, b = CKKSContext.keygen("TOY"), CKKSContext.keygen("TOY")
    assert a.key_id != b.key_id


def test_objects_and_their_metadata(ctx, vectors):
    x = vectors[0][:10]
    ct = ctx.encrypt(x)
    assert isinstance(ct, Ciphertext) and isinstance(ctx.encode(x), Plaintext)
    assert ct.length == 10 and not ct.is_complex and "level=4" in repr(ct)
    assert ctx.rotation_steps == tuple(sorted(ROTATIONS)) and ctx.has_secret_key
    assert ctx.evaluator is ctx.evaluator and "secret" not in repr(ctx.public_context())
    assert bits(x, ctx.decode(ctx.encode(x))) > 40


def test_keygen_on_a_shared_ring(ctx, vectors):
    other = CKKSContext.keygen(ctx.params, rotations=[1], ring=ctx.ring)
    assert other.ring is ctx.ring and other.key_id != ctx.key_id
    x = vectors[0]
    assert bits(x, other.decrypt(other.encrypt(x))) > FRESH_BITS
    from crypto import ContextMismatchError
    with pytest.raises(ContextMismatchError, match="ring"):
        CKKSContext.keygen("N13", ring=ctx.ring)


def test_sparse_ternary_secret():
    lit = {"log_n": 12, "log_q": [[30, 30], [25, 25], [25, 25]], "log_p": [30, 30, 30], "log_scale": 50,
           "dnum": 2, "hamming_weight": 64, "insecure": True}
    ctx = CKKSContext.keygen(lit, rotations=[1], seed=5)
    coeffs = ctx._secret_key.coeffs
    assert np.count_nonzero(coeffs) == 64 and set(np.unique(coeffs)) <= {-1, 0, 1}
    x = np.linspace(-1, 1, 2048)
    ct = ctx.encrypt(x, use_secret_key=False)
    assert bits(x * x, ctx.decrypt(ct * ct)) > OP_BITS
    assert bits(np.roll(x, -1), ctx.decrypt(ctx.evaluator.rotate(ct, 1))) > OP_BITS


def test_uniform_ternary_secret_is_balanced(ctx):
    coeffs = ctx._secret_key.coeffs
    counts = [np.count_nonzero(coeffs == v) for v in (-1, 0, 1)]
    assert all(abs(c - 4096 / 3) < 200 for c in counts)


def test_zero_dimensional_arrays_are_scalars(ctx, vectors):
    x = vectors[0]
    ct = ctx.encrypt(x)
    assert bits(x + 0.25, ctx.decrypt(ct + np.array(0.25))) > FRESH_BITS
    assert bits(x * 3.0, ctx.decrypt(ct * np.float64(3.0))) > OP_BITS


@given(seed=st.integers(0, 2**32 - 1), level_a=st.integers(1, 4), level_b=st.integers(1, 4),
       length=st.integers(1, 2048), magnitude=st.sampled_from([1.0, 8.0, 0.01]))
@settings(max_examples=8)
def test_random_operands_at_random_levels(ctx, seed, level_a, level_b, length, magnitude):
    """add, sub and mul of ciphertexts at any two levels agree with numpy (levels aligned automatically)."""
    rng = np.random.default_rng(seed)
    x, y = magnitude * uniform(rng, length), magnitude * uniform(rng, length)
    ev = ctx.evaluator
    a, b = ctx.encrypt(x, level=level_a), ctx.encrypt(y, level=level_b)
    tolerance = (1 + magnitude) ** 2 * 2.0**-OP_BITS     # absolute noise grows with the values
    for ct, expected in ((ev.add(a, b), x + y), (ev.sub(a, b), x - y), (a * b, x * y), (b * a - a, x * y - x)):
        assert ct.level <= min(level_a, level_b)
        assert np.abs(ctx.decrypt(ct) - expected).max() < tolerance


def test_more_rotation_keys_later(ctx, vectors):
    x = vectors[0]
    more = ctx.with_rotations([2, -9])
    assert set(more.rotation_steps) == set(ctx.rotation_steps) | {2, -9} and more.key_id == ctx.key_id
    ct = ctx.encrypt(x)
    assert bits(np.roll(x, 9), more.decrypt(more.evaluator.rotate(ct, -9))) > OP_BITS
    from crypto import ParameterError
    with pytest.raises(ParameterError, match="secret key"):
        ctx.public_context().with_rotations([2])


# -- fused plaintext sums (baby-step giant-step) -----------------------------------------------------
def test_muladd_rows_matches_its_naive_twin():
    """The fused kernel acc + a·b mod q against Python integers, residues up to q - 1."""
    from crypto._ntt_kernels import muladd_rows
    ring = context("TOY").ring
    idx = (0, 1, 2)
    q, bk, bm = ring._barrett(idx)
    rng = np.random.default_rng(3)
    a, b, acc = (np.array([rng.integers(0, int(qi), 64, dtype=np.int64) for qi in q], dtype=np.uint64)
                 for _ in range(3))
    a[:, 0] = b[:, 0] = acc[:, 0] = q - 1
    want = [[(int(acc[l, c]) + int(a[l, c]) * int(b[l, c])) % int(q[l]) for c in range(64)] for l in range(3)]
    got = acc.copy()
    muladd_rows(got, a, b, q, bk, bm)
    assert got.tolist() == want


def test_mul_plain_sum_equals_the_sum_of_products(ctx):
    """Evaluator.mul_plain_sum (fused, in one accumulator) gives the residues add(mul(...)) gives, and
    bsgs_sum with and without it the same ciphertext; mismatched levels and scales are refused."""
    from crypto.ckks.linear import bsgs_sum
    from crypto.errors import LevelError, ScaleError
    ev, rng = ctx.evaluator, np.random.default_rng(4)
    level = ctx.params.max_level
    cts = [ctx.encrypt(uniform(rng, ctx.params.slots)) for _ in range(3)]
    pts = [ev.encode(uniform(rng, ctx.params.slots), level, 2.0**30) for _ in range(3)]
    fused = ev.mul_plain_sum(zip(cts, pts))
    plain = ev.add(ev.add(ev.mul(cts[0], pts[0]), ev.mul(cts[1], pts[1])), ev.mul(cts[2], pts[2]))
    assert fused.level == plain.level and fused.scale == plain.scale
    for x, y in zip(fused.parts, plain.parts):
        assert np.array_equal(x.data, y.data)
    assert not cts[0].parts[0].data.flags.writeable            # inputs untouched (frozen)

    class Generic:                                             # the evaluator without the fused sum
        def __getattr__(self, name):
            if name == "mul_plain_sum":
                raise AttributeError(name)
            return getattr(ev, name)
    babies = dict(enumerate(cts))
    groups = [(0, [(0, pts[0]), (1, pts[1])]), (1, [(2, pts[2])])]
    a, b = bsgs_sum(ev, babies, groups), bsgs_sum(Generic(), babies, groups)
    for x, y in zip(a.parts, b.parts):
        assert np.array_equal(x.data, y.data)
    with pytest.raises(LevelError):
        ev.mul_plain_sum([(cts[0], pts[0]), (ev.drop_level(cts[1], 1), pts[1])])
    with pytest.raises(ScaleError):
        ev.mul_plain_sum([(cts[0], pts[0]), (cts[1], ev.encode(uniform(rng, ctx.params.slots), level, 2.0**31))])
