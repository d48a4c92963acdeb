"""Sparse-secret encapsulation (crypto/ckks/encapsulation.py): the switch against a plain decryption under
both secrets, the ModRaise bound K = h/2 + 2, bootstraps against numpy, keys through bytes, refusals."""
import numpy as np
import pytest

from crypto import CKKSContext
from crypto.ckks.bootstrap import BootstrapConfig, BootstrapPlan, Bootstrapper
from crypto.ckks.encapsulation import Encapsulator, encapsulation_parameters, k_bound, make_encapsulation_keys
from crypto.errors import KeyMissingError, ParameterError
from crypto.params import CKKSParameters
from crypto.ring import RNSPoly

# N = 2^12 with a DENSE ternary secret (insecure test ring): K = 135 without encapsulation
DENSE = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=8, insecure=True)
WEIGHT, SLOTS = 32, 64
_CACHE: dict = {}


def config(**kw) -> BootstrapConfig:
    return BootstrapConfig(**{"slots": SLOTS, "arcsin": False, "encapsulation": WEIGHT, **kw})


def context() -> CKKSContext:
    if "ctx" not in _CACHE:
        _CACHE["ctx"] = CKKSContext.keygen(CKKSParameters.from_literal(DENSE), seed=5, bootstrap=config())
    return _CACHE["ctx"]


def bits(expected, actual) -> float:
    return float(-np.log2(np.abs(np.asarray(actual) - np.asarray(expected)).max()))


def decrypt_ints(parts, s: RNSPoly) -> list[int]:
    """c0 + c1·s as centred integers (the plain twin of decryption, no decoding)."""
    return (parts[0] + parts[1] * s.keep(parts[0].idx)).to_ints()


def test_the_encapsulation_key_lives_in_a_cited_sparse_set():
    n16 = CKKSParameters.preset("N16")
    small = encapsulation_parameters(n16, 32)
    assert small.security == "128-bit (sparse secret h=32)" and small.log_qp <= 121 and small.max_level == 0
    assert small.q_moduli == n16.q_levels[0] and small.p_moduli[0] in n16.p_moduli
    with pytest.raises(ParameterError, match="encapsulation=16.*not within a cited 128-bit sparse-secret set"):
        encapsulation_parameters(n16, 16)
    with pytest.raises(ParameterError, match="encapsulation=32.*not within a cited"):
        encapsulation_parameters(CKKSParameters.preset("N15"), 32)           # no cited h = 32 set below 2^16
    with pytest.raises(ParameterError, match="encapsulation=32.*not within a cited"):
        BootstrapPlan(CKKSParameters.preset("N15"), BootstrapConfig(encapsulation=32))
    for bad in (True, 0, "32", 2.0):
        with pytest.raises(ParameterError, match="encapsulation="):
            BootstrapConfig(encapsulation=bad)
    assert [k_bound(h) for h in (32, 33, 64)] == [18.0, 18.0, 34.0]


def test_switch_to_sparse_against_plain_decryption():
    """to_sparse(c) decrypts under s' to what c decrypts to under s, mod q_0, within key-switching noise;
    from_sparse brings it back under s."""
    ctx = context()
    p = ctx.params
    rng = np.random.default_rng(1)
    sparse = np.zeros(p.n, dtype=np.int64)
    sparse[rng.choice(p.n, WEIGHT, replace=False)] = rng.choice([-1, 1], WEIGHT)
    keys = make_encapsulation_keys(p, ctx.ring, ctx._sampler, ctx._secret_key, WEIGHT, sparse_coeffs=sparse)
    enc = Encapsulator(p, ctx.ring, keys, ctx.evaluator.switcher)
    ct = ctx.encrypt(rng.uniform(-1, 1, SLOTS), level=0)
    s = ctx._secret_key.poly
    s_sparse = RNSPoly.from_ints(ctx.ring, sparse, tuple(range(len(p.moduli))), is_ntt=True)
    switched = enc.to_sparse(*ct.parts)
    before, after = decrypt_ints(ct.parts, s), decrypt_ints(switched, s_sparse)
    noise = max(abs(int(a) - int(b)) for a, b in zip(after, before))
    assert 0 < noise < 2**16                       # Δ = 2^50: the message is untouched
    assert max(abs(int(b)) for b in before) > 2**40
    back = enc.from_sparse(*switched)
    assert max(abs(int(a) - int(b)) for a, b in zip(decrypt_ints(back, s), before)) < 2**17
    with pytest.raises(ParameterError, match="sparse_coeffs"):
        make_encapsulation_keys(p, ctx.ring, ctx._sampler, ctx._secret_key, WEIGHT, sparse_coeffs=sparse[::-1] * 2)
    with pytest.raises(ParameterError, match="level-0"):
        enc.to_sparse(*ctx.encrypt([1.0], level=1).parts)


def test_mod_raise_under_encapsulation_adds_at_most_h_over_2_multiples_of_q0():
    ctx = context()
    plan = ctx.evaluator.bootstrap_plan()
    assert plan.k_bound == 18
    ct = ctx.encrypt(np.random.default_rng(2).uniform(-1, 1, SLOTS), level=0)
    raised = Bootstrapper(ctx.evaluator, plan).encapsulated_raise(ct)
    s, q0 = ctx._secret_key.poly, ctx.params.modulus_at(0)
    diff = [int(h) - int(lo) for h, lo in zip(decrypt_ints(raised.parts, s), decrypt_ints(ct.parts, s))]
    integers = np.array([round(d / q0) for d in diff])
    residue = np.array([d - i * q0 for d, i in zip(diff, integers)], dtype=np.float64)
    assert np.abs(residue).max() < 2**20          # only the two switches' noise besides q_0·I
    assert 1 <= np.abs(integers).max() < plan.k_bound <= WEIGHT // 2 + 2
    dense = BootstrapPlan(ctx.params, config(encapsulation=None))
    assert dense.k_bound > 100


def test_encapsulated_bootstrap_matches_input_with_more_levels_and_bits():
    ctx = context()
    plan = ctx.evaluator.bootstrap_plan()
    dense = BootstrapPlan(ctx.params, config(encapsulation=None))
    assert plan.levels_left >= dense.levels_left + 2 and plan.precision_bits >= dense.precision_bits + 3
    for seed in (3, 4):
        x = np.random.default_rng(seed).uniform(-1, 1, SLOTS)
        out = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0))
        assert out.level == plan.levels_left
        assert bits(x, ctx.decrypt(out)) >= plan.precision_bits


def test_keys_travel_in_the_context_record_and_are_required():
    ctx = context()
    x = np.random.default_rng(6).uniform(-1, 1, SLOTS)
    server = CKKSContext.from_bytes(ctx.public_context().to_bytes())
    assert server.encapsulation_keys is not None and server.encapsulation_keys.weight == WEIGHT
    out = server.evaluator.bootstrap(ctx.encrypt(x, level=0))
    assert bits(x, ctx.decrypt(out)) >= ctx.evaluator.bootstrap_plan().precision_bits
    bare = CKKSContext(ctx.params, ctx.ring, ctx.public_key, ctx.relin_key, ctx.galois_keys)
    with pytest.raises(KeyMissingError, match="no encapsulation keys"):
        bare.evaluator.bootstrap(ctx.encrypt(x, level=0), config())
    with pytest.raises(KeyMissingError, match="weight-32 encapsulation keys"):
        ctx.evaluator.bootstrap(ctx.encrypt(x, level=0), config(encapsulation=64))


@pytest.mark.slow
def test_keys_travel_in_the_galois_record_and_malformed_meta_is_refused():
    from crypto.errors import SerializationError
    from crypto.key_records import _KeyReader
    ctx = context()
    server = CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.relin_key_bytes(), ctx.galois_keys_bytes())
    assert server.encapsulation_keys.weight == WEIGHT
    x = np.random.default_rng(7).uniform(-1, 1, SLOTS)
    out = server.evaluator.bootstrap(ctx.encrypt(x, level=0), config())     # separate records carry no config
    assert bits(x, ctx.decrypt(out)) >= ctx.evaluator.bootstrap_plan().precision_bits
    reader = _KeyReader(ctx.params, "numpy")
    assert reader.encapsulation_keys({}, None) is None
    for bad in ({"encapsulation": [32]}, {"encapsulation": {"weight": "32"}},
                {"encapsulation": {"weight": 0, "a_seeds": [None, None]}}):
        with pytest.raises(SerializationError):
            reader.encapsulation_keys(bad, None)


def test_auto_encapsulates_where_a_cited_set_exists():
    """encapsulation="auto" (the default): h = 32 for dense-secret 128-bit parameters at N = 2^16, nothing for
    insecure test rings, sparse main secrets or rings without a cited h = 32 set."""
    from crypto.ckks.bootstrap import _encapsulation_weight
    assert BootstrapConfig().encapsulation == "auto"
    assert _encapsulation_weight(CKKSParameters.preset("N16_BOOT"), "auto") == 32
    assert _encapsulation_weight(CKKSParameters.preset("N16"), "auto") == 32
    assert _encapsulation_weight(CKKSParameters.preset("N15"), "auto") is None
    assert _encapsulation_weight(CKKSParameters.from_literal(DENSE), "auto") is None            # insecure
    assert _encapsulation_weight(CKKSParameters.from_literal(DENSE), 64) == 64
    assert _encapsulation_weight(CKKSParameters.preset("N16"), None) is None
    plan = BootstrapPlan(CKKSParameters.preset("N16_BOOT"), BootstrapConfig(arcsin=False))
    assert plan.encapsulation_weight == 32 and plan.k_bound == 18 and plan.levels_left == 8
    assert plan.raise_levels == 0 and plan.noise_bits >= 20
