"""RNS-CKKS through its public surface: encode, encrypt, evaluate, decrypt within the stated bits (issue 2)."""
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crypto import CKKSContext, CKKSParameters, CKKSParametersLiteral
from crypto.errors import HEError
from crypto.modarith import Barrett, mul_shoup, shoup_precompute

BOUNDS = {13: 218, 14: 438, 15: 881, 16: 1747}


def bits(expected, actual) -> float:
    err = float(np.max(np.abs(np.asarray(actual) - np.asarray(expected))))
    return -math.log2(err) if err > 0 else 60.0


@pytest.fixture(scope="module")
def n14():
    return CKKSContext.keygen(CKKSParameters.preset("N14"), rotations=[1, -3, 5])


@pytest.fixture(scope="module")
def toy():
    return CKKSContext.keygen(CKKSParameters.preset("TOY"), rotations=[1, -3, 5, 2], conjugation=True, seed=1)


@pytest.fixture(scope="module")
def toy_other():
    return CKKSContext.keygen(CKKSParameters.preset("TOY"), rotations=[1], seed=2)


def raises_he(match=None):
    return pytest.raises(HEError, match=match)


# ------------------------------------------------------------------ the issue's snippet, verbatim
def test_issue_snippet_at_n14(n14):
    params = n14.params
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, params.slots)
    ct = n14.encrypt(x)
    ev = n14.evaluator
    y = n14.decrypt(ev.rotate(ev.mul(ct, ct), 1))
    assert isinstance(y, np.ndarray) and y.shape == x.shape
    assert bits(np.roll(x * x, -1), y) >= 20
    pub = n14.public_context()
    blob = pub.to_bytes()
    server = CKKSContext.from_bytes(blob)
    ct2 = server.encrypt(x[:10])
    z = server.evaluator.rotate(server.evaluator.mul(ct2, ct), -3)
    assert bits(np.roll((x * np.pad(x[:10], (0, params.slots - 10)))[: params.slots], 3)[:params.slots], n14.decrypt(z)) >= 18
    with raises_he("secret"):
        server.decrypt(ct)


def test_n14_precision_after_one_ct_ct_multiply(n14):
    x = np.random.default_rng(1).uniform(-1, 1, n14.params.slots)
    ev = n14.evaluator
    ct = n14.encrypt(x)
    assert bits(x * x, n14.decrypt(ev.rescale(ev.mul(ct, ct)))) >= 20
    assert bits(x * x, n14.decrypt(ct * ct)) >= 20


@pytest.mark.parametrize("which", ["n14", "toy"])
def test_public_context_bytes_have_no_secret_key(which, request):
    ctx = request.getfixturevalue(which)
    blobs = [ctx.public_context().to_bytes(), ctx.to_bytes(), ctx.public_key_bytes(), ctx.relin_key_bytes(),
             ctx.galois_keys_bytes()]
    sk = ctx.secret_key_bytes()
    # the secret in every encoding we can think of: the explicit record, coefficients as int64 / int8 /
    # residues mod q0, and its NTT form (internal, for this check only) must not occur in public bytes
    secret = ctx._secret_key
    q0 = ctx.params.moduli[0]
    encodings = [sk[-4096:], secret.coeffs.astype("<i8").tobytes()[:4096], secret.coeffs.astype("i1").tobytes(),
                 (secret.coeffs % q0).astype("<u8").tobytes()[:4096],
                 np.asarray(secret.poly.data[0], dtype="<u8").tobytes()[:4096]]
    for blob in blobs:
        for payload in encodings:
            for start in range(0, len(payload) - 64, 512):
                assert payload[start:start + 64] not in blob
    assert not CKKSContext.from_bytes(blobs[0]).has_secret_key
    assert not CKKSContext.from_bytes(blobs[1]).has_secret_key


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("name", ["N13", "N14", "N15", "N16"])
def test_presets_are_128_bit_secure_with_levels(name):
    p = CKKSParameters.preset(name)
    assert p.log_qp <= BOUNDS[p.log_n]
    assert p.max_level >= 2 and p.slots == p.n // 2
    assert all(q < 2**31 and q % (2 * p.n) == 1 for q in p.moduli)


@pytest.mark.parametrize("log_n,bound", [(13, 218), (14, 438)])
def test_insecure_parameters_refused_naming_the_bound(log_n, bound):
    lit = CKKSParametersLiteral(log_n=log_n, log_q=[30] * 20, log_p=[30, 30], log_scale=25)
    with raises_he(str(bound)):
        CKKSParameters.from_literal(lit)


def test_insecure_flag_only_for_tiny_rings():
    tiny = CKKSParametersLiteral(log_n=5, log_q=[30, 28, 28], log_p=[30], log_scale=28, insecure=True)
    p = CKKSParameters.from_literal(tiny)
    ctx = CKKSContext.keygen(p, seed=3)
    x = np.linspace(-1, 1, p.slots)
    assert bits(x, ctx.decrypt(ctx.encrypt(x))) > 10
    with raises_he():
        CKKSParameters.from_literal(CKKSParametersLiteral(log_n=15, log_q=[30] * 40, log_p=[30], log_scale=25,
                                                          insecure=True))


def test_parameters_are_frozen_and_literal_errors_name_the_parameter():
    p = CKKSParameters.preset("N13")
    with pytest.raises(Exception):
        p.log_n = 12
    with raises_he("log_q"):
        CKKSParameters.from_literal(CKKSParametersLiteral(log_n=12, log_q=[70, 30], log_p=[30], log_scale=25,
                                                          insecure=True))
    with raises_he("preset"):
        CKKSParameters.preset("N99")


def test_literal_as_dataclass_dict_or_keywords():
    fields = dict(log_n=11, log_q=[[30, 30], [25, 26]], log_p=[30, 30], log_scale=50, insecure=True)
    want = CKKSParameters.from_literal(CKKSParametersLiteral(**fields))
    assert CKKSParameters.from_literal(fields) == want == CKKSParameters.from_literal(**fields)
    with raises_he("bogus"):
        CKKSParameters.from_literal(dict(fields, bogus=1))
    with raises_he("log_scale"):
        CKKSParameters.from_literal({k: v for k, v in fields.items() if k != "log_scale"})


def test_sparse_ternary_secret_with_hamming_weight():
    lit = CKKSParametersLiteral(log_n=12, log_q=[[30, 30], [25, 26]], log_p=[30, 30], log_scale=50,
                                hamming_weight=64, insecure=True)
    ctx = CKKSContext.keygen(CKKSParameters.from_literal(lit), seed=5)
    x = np.random.default_rng(5).uniform(-1, 1, 100)
    assert bits(x * x, ctx.decrypt(ctx.encrypt(x) * ctx.encrypt(x))) >= 20


# ------------------------------------------------------------------ modular arithmetic
@given(st.integers(2, 2**31 - 1), st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 2**31)), min_size=1,
                                           max_size=20))
def test_barrett_and_shoup_equal_python_mod(q, pairs):
    a = np.array([x % q for x, _ in pairs], dtype=np.uint64)
    b = np.array([y % q for _, y in pairs], dtype=np.uint64)
    want = [int(x) * int(y) % q for x, y in zip(a, b)]
    barrett = Barrett(q)
    assert [int(v) for v in barrett.mul(a, b)] == want
    assert [int(v) for v in barrett.reduce(np.array([2 ** (2 * barrett.k) - 1]))] == [(2 ** (2 * barrett.k) - 1) % q]
    w = int(b[0])
    assert [int(v) for v in mul_shoup(a, np.uint64(w), shoup_precompute(w, q), q)] == [int(x) * w % q for x in a]


def test_barrett_refuses_inputs_outside_its_range():
    with raises_he("2\\^62"):
        Barrett(2**31 - 1).reduce(np.array([2**62], dtype=np.uint64))
    with raises_he("2\\^31"):
        Barrett(2**31 + 1)


# ------------------------------------------------------------------ operations (TOY ring)
def test_real_and_complex_vectors_padded_to_the_callers_length(toy):
    rng = np.random.default_rng(2)
    for size in (1, 7, toy.params.slots):
        x = rng.uniform(-1, 1, size)
        y = toy.decrypt(toy.encrypt(x))
        assert y.shape == (size,) and not np.iscomplexobj(y) and bits(x, y) >= 25
    z = rng.uniform(-1, 1, 10) + 1j * rng.uniform(-1, 1, 10)
    w = toy.decrypt(toy.encrypt(z))
    assert np.iscomplexobj(w) and w.shape == (10,) and bits(z, w) >= 25


def test_operators_with_ciphertexts_arrays_and_scalars(toy):
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-1, 1, 64), rng.uniform(-1, 1, 64)
    a, b = toy.encrypt(x), toy.encrypt(y)
    cases = [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a + y, x + y), (a - y, x - y), (a * y, x * y),
             (a + 0.5, x + 0.5), (a - 2, x - 2), (a * 3, x * 3), (a * -0.25, x * -0.25),
             (y + a, x + y), (y - a, y - x), (y * a, x * y), (2 + a, x + 2), (1 - a, 1 - x), (0.5 * a, 0.5 * x),
             (-a, -x), (a / 4, x / 4), (a / (y + 2), x / (y + 2))]
    for ct, want in cases:
        assert bits(want, toy.decrypt(ct)) >= 18
    for bad in (b, 0, "x", None):
        with raises_he():
            a / bad


def test_evaluator_operations(toy):
    ev = toy.evaluator
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, toy.params.slots)
    y = rng.uniform(-1, 1, toy.params.slots)
    a, b = toy.encrypt(x), toy.encrypt(y)
    assert bits(x + y, toy.decrypt(ev.add(a, b))) >= 25
    assert bits(x - y, toy.decrypt(ev.sub(a, b))) >= 25
    assert bits(x * y, toy.decrypt(ev.rescale(ev.mul(a, b)))) >= 20
    assert bits(x * y, toy.decrypt(ev.rescale(ev.mul(a, y)))) >= 20
    assert bits(x * 1.5, toy.decrypt(ev.mul(a, 1.5))) >= 20
    for k in (1, -3, 5, 2):
        assert bits(np.roll(x, -k), toy.decrypt(ev.rotate(a, k))) >= 20
    neg = getattr(ev, "negate", None) or ev.neg
    assert bits(-x, toy.decrypt(neg(a))) >= 25
    dropped = ev.drop_level(a)
    assert dropped.level == a.level - 1 and bits(x, toy.decrypt(dropped)) >= 25
    pt = toy.encode(y)
    assert bits(y, toy.decode(pt)) >= 30
    assert bits(x * y, toy.decrypt(ev.rescale(ev.mul(a, pt)))) >= 20
    assert bits(x + y, toy.decrypt(ev.add(a, pt))) >= 25
    assert bits(x * y, toy.decrypt(a * pt)) >= 20


def test_hoisted_rotations_match_single_rotations(toy):
    ev = toy.evaluator
    x = np.random.default_rng(5).uniform(-1, 1, toy.params.slots)
    ct = toy.encrypt(x)
    many = ev.rotate_hoisted(ct, [1, -3, 5])
    for k in (1, -3, 5):
        assert bits(np.roll(x, -k), toy.decrypt(many[k])) >= 20


def test_conjugate(toy):
    z = np.random.default_rng(6).uniform(-1, 1, 32) * (1 + 1j)
    assert bits(np.conj(z), toy.decrypt(toy.evaluator.conjugate(toy.encrypt(z)))) >= 20


def test_automatic_level_and_scale_alignment(toy):
    ev = toy.evaluator
    rng = np.random.default_rng(7)
    x, y = rng.uniform(-1, 1, 50), rng.uniform(-1, 1, 50)
    a, b = toy.encrypt(x), toy.encrypt(y)
    low = ev.rescale(ev.mul(a, b))          # one level down, scale ≠ Δ
    assert low.level < a.level
    assert bits(x * y + x, toy.decrypt(low + a)) >= 18
    assert bits(x * y * x, toy.decrypt(low * a)) >= 18
    assert bits(x * y - y, toy.decrypt(ev.sub(low, b))) >= 18


def test_public_key_encryption_and_secret_key_encryption(toy):
    x = np.random.default_rng(8).uniform(-1, 1, 40)
    pub = toy.public_context()
    assert bits(x, toy.decrypt(pub.encrypt(x))) >= 20
    assert bits(x, toy.decrypt(toy.encrypt(x))) >= 20


def test_depth_multiplies_down_through_every_level(toy):
    x = np.random.default_rng(9).uniform(-1, 1, 16)
    ct, want = toy.encrypt(x), x.copy()
    while ct.level > 0:
        ct, want = ct * ct, want * want
    assert ct.level == 0 and bits(want, toy.decrypt(ct)) >= 10


@pytest.mark.parametrize("name", ["N13", pytest.param("N15", marks=pytest.mark.slow),
                                  pytest.param("N16", marks=pytest.mark.slow)])
def test_preset_multiplies_down_through_every_level(name):
    ctx = CKKSContext.keygen(CKKSParameters.preset(name), rotations=[1])
    x = np.random.default_rng(11).uniform(-1, 1, ctx.params.slots)
    ct, want = ctx.encrypt(x), x.copy()
    ev = ctx.evaluator
    assert bits(np.roll(x, -1), ctx.decrypt(ev.rotate(ct, 1))) >= 20
    while ct.level > 0:
        ct, want = ev.rescale(ev.relinearize(ev.mul(ct, ct))), want * want
        assert bits(want, ctx.decrypt(ct)) >= 16
    with raises_he("level"):
        ct * ct


@given(st.lists(st.floats(-1, 1), min_size=1, max_size=64))
def test_encrypt_decrypt_round_trip_property(toy, values):
    x = np.array(values)
    assert bits(x, toy.decrypt(toy.encrypt(x))) >= 25


# ------------------------------------------------------------------ randomness and serialization
def test_seed_only_when_asked():
    p = CKKSParameters.preset("TOY")
    x = np.arange(8) / 8
    s1, s2 = CKKSContext.keygen(p, seed=11), CKKSContext.keygen(p, seed=11)
    assert s1.encrypt(x).to_bytes() == s2.encrypt(x).to_bytes()
    r1, r2 = CKKSContext.keygen(p), CKKSContext.keygen(p)
    assert r1.public_context().to_bytes() != r2.public_context().to_bytes()
    assert r1.encrypt(x).to_bytes() != r1.encrypt(x).to_bytes()


def test_serialization_round_trips(toy):
    x = np.random.default_rng(10).uniform(-1, 1, 20)
    p2 = CKKSParameters.from_bytes(toy.params.to_bytes())
    assert p2 == toy.params
    ct = toy.encrypt(x)
    server = CKKSContext.from_bytes(toy.public_context().to_bytes())
    ct_s = type(ct).from_bytes(ct.to_bytes(), server)
    out = type(ct).from_bytes((ct_s * ct_s).to_bytes(), toy)
    assert bits(x * x, toy.decrypt(out)) >= 20
    rotated = type(ct).from_bytes(server.evaluator.rotate(ct_s, 1).to_bytes(), toy)
    assert bits(np.roll(np.pad(x, (0, toy.params.slots - 20)), -1)[:19], toy.decrypt(rotated)[:19]) >= 20
    full = CKKSContext.from_bytes(toy.to_bytes(include_secret_key=True))
    assert full.has_secret_key and bits(x, full.decrypt(ct)) >= 20


# ------------------------------------------------------------------ bad input
def test_too_many_values_names_the_slot_count(toy):
    with raises_he(str(toy.params.slots)):
        toy.encrypt(np.zeros(toy.params.slots + 1))
    with raises_he():
        toy.encrypt(np.zeros((3, toy.params.slots)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_refused(toy, bad):
    x = np.zeros(8)
    x[3] = bad
    with raises_he():
        toy.encrypt(x)
    ct = toy.encrypt(np.zeros(8))
    with raises_he():
        ct * bad
    with raises_he():
        ct + x


def test_mixing_parameter_sets_or_keys_refused(toy, toy_other, n14):
    a, b = toy.encrypt(np.ones(4)), toy_other.encrypt(np.ones(4))
    with raises_he():
        a + b
    with raises_he():
        toy.evaluator.mul(a, b)
    with raises_he():
        toy.decrypt(b)
    with raises_he():
        n14.evaluator.add(a, a)
    with raises_he():
        type(a).from_bytes(a.to_bytes(), n14)


def test_rotating_without_the_key(toy):
    ct = toy.encrypt(np.ones(4))
    with raises_he("7"):
        toy.evaluator.rotate(ct, 7)
    with raises_he():
        toy.evaluator.rotate(ct, 1.5)


def test_conjugating_without_the_key(toy_other):
    with raises_he("conjugat"):
        toy_other.evaluator.conjugate(toy_other.encrypt(np.ones(4)))


def test_multiplying_past_the_last_level(toy):
    ct = toy.encrypt(np.full(4, 0.5))
    while ct.level > 0:
        ct = ct * ct
    with raises_he("level"):
        ct * ct
    with raises_he("level"):
        toy.evaluator.rescale(ct)


def test_scale_overflow(toy):
    with raises_he("scale"):
        toy.encrypt(np.ones(4), scale=2.0**300)
    with raises_he("scale"):
        toy.encrypt(np.full(4, 1e70))
    big = toy.encrypt(np.ones(4), scale=2.0**200)
    with raises_he("scale"):
        toy.evaluator.mul(big, big)


@pytest.mark.parametrize("cut", [0, 1, 10, 100, -1])
def test_truncated_bytes(toy, cut):
    blob = toy.encrypt(np.ones(4)).to_bytes()
    with raises_he():
        type(toy.encrypt(np.ones(1))).from_bytes(blob[:cut], toy)
    ctx_blob = toy.public_context().to_bytes()
    with raises_he():
        CKKSContext.from_bytes(ctx_blob[:cut] if cut else b"")
    with raises_he():
        CKKSParameters.from_bytes(toy.params.to_bytes()[:cut])


def test_corrupted_bytes(toy):
    blob = bytearray(toy.encrypt(np.ones(4)).to_bytes())
    for pos in (0, 5, len(blob) // 2, len(blob) - 1):
        bad = bytearray(blob)
        bad[pos] ^= 0x41
        with raises_he():
            toy.decrypt(type(toy.encrypt(np.ones(1))).from_bytes(bytes(bad), toy))
    with raises_he():
        CKKSContext.from_bytes("not bytes")


def test_decrypt_without_secret_key_says_so(toy):
    ct = toy.encrypt(np.ones(4))
    for server in (toy.public_context(), CKKSContext.from_bytes(toy.public_context().to_bytes())):
        with raises_he("secret"):
            server.decrypt(ct)


def test_bad_keygen_arguments(toy):
    with raises_he("rotation"):
        CKKSContext.keygen("TOY", rotations=[1.5])
    with raises_he():
        CKKSContext.keygen(42)


def test_nothing_compiled_or_measured_at_import():
    code = ("import crypto, tensor_ops, sys, numba\n"
            "from numba.core.registry import CPUDispatcher\n"
            "mods = [m for n, m in list(sys.modules.items()) if n.startswith(('crypto', 'tensor_ops'))]\n"
            "compiled = [f'{m.__name__}.{k}' for m in mods for k, v in vars(m).items()\n"
            "            if isinstance(v, CPUDispatcher) and v.signatures]\n"
            "print(compiled, 'sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] False"     # no kernel compiled, sympy not even imported
