"""Compact key records: the uniform half of every switching key travels as its 32-byte seed.

Checks the expansion against a word-by-word twin, that keygen's keys are their seeds' expansion, that
records halve and round-trip (whole context and separate key records), that records of the earlier
format (both halves stored) are still read, and that malformed seed records are refused."""
import hashlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext
from crypto.errors import ParameterError, SerializationError
from crypto.keyswitch import uniform_part
from crypto.record import pack, residue_array, unpack
from crypto.sampling import SEED_BYTES, expand_uniform
from tests.crypto.ckks_helpers import context

ROTATIONS = [1, -3, 5]


def _naive_row(seed: bytes, index: int, q: int, n: int) -> list[int]:
    """Twin of one row of expand_uniform: read SHAKE-128 words one at a time, keep w < floor(2^32/q)·q."""
    stream = hashlib.shake_128(b"hezk/uniform-key-part/v1" + seed + index.to_bytes(8, "little")).digest(64 * n + 4096)
    limit, out, pos = (2**32 // q) * q, [], 0
    while len(out) < n:
        w = int.from_bytes(stream[pos: pos + 4], "little")
        pos += 4
        if w < limit:
            out.append(w % q)
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), moduli=st.lists(st.integers(2, 2**31 - 1), min_size=1, max_size=3),
       n=st.integers(1, 300), count=st.integers(1, 2))
def test_expand_uniform_matches_word_by_word_twin(seed, moduli, n, count):
    a = expand_uniform(seed, moduli, n, count)
    assert a.dtype == np.uint32 and a.shape == (count, len(moduli), n)
    for j in range(count):
        for i, q in enumerate(moduli):
            assert a[j, i].tolist() == _naive_row(seed, j * len(moduli) + i, q, n)


def test_expand_uniform_is_uniform_and_seed_dependent():
    q = 3 * 2**29 + 1                 # floor(2^32/q) = 2: a third of the words are rejected
    a = expand_uniform(bytes(32), [q], 60000)[0, 0].astype(np.float64)
    assert a.max() < q and abs(a.mean() / q - 0.5) < 0.01 and abs(np.mean(a < q / 2) - 0.5) < 0.01
    assert not np.array_equal(expand_uniform(bytes(32), [q], 64), expand_uniform(b"\x01" + bytes(31), [q], 64))
    for bad in (bytes(31), "0" * 64, None):
        with pytest.raises(ParameterError, match="seed must be 32 bytes"):
            expand_uniform(bad, [q], 8)
    with pytest.raises(ParameterError, match="modulus"):
        expand_uniform(bytes(32), [2**31 + 11], 8)


@pytest.fixture(scope="module")
def ctx():
    return CKKSContext.keygen("TOY", rotations=ROTATIONS, conjugation=True, seed=11)


def _keys(c):
    return [("relin", c.relin_key)] + sorted(c.galois_keys.keys.items())


def test_keygen_keys_are_their_seeds_expansion(ctx):
    for g, key in _keys(ctx):
        assert isinstance(key.a_seed, bytes) and len(key.a_seed) == SEED_BYTES
        expected = uniform_part(ctx.params, key.a_seed)
        assert np.array_equal(key.a, expected)
    seeds = [key.a_seed for _, key in _keys(ctx)]
    assert len(set(seeds)) == len(seeds)          # a fresh seed per key


def _same_keys(x, y, seeded=True):
    assert [g for g, _ in _keys(x)] == [g for g, _ in _keys(y)]
    for (_, kx), (_, ky) in zip(_keys(x), _keys(y)):
        assert np.array_equal(kx.b, ky.b) and np.array_equal(kx.a, ky.a)
        assert ky.b.dtype == ky.a.dtype == np.uint32
        assert (ky.a_seed == kx.a_seed) if seeded else ky.a_seed is None


def _legacy_context_record(c) -> bytes:
    """A public-context record of the earlier format: both halves of every key, no ``a_seeds``."""
    gk = c.galois_keys
    elements = sorted(gk.keys)
    meta = {"params": c.params.to_dict(), "key_id": c.key_id.hex(), "steps": list(gk.steps),
            "conjugation": gk.conjugation, "galois_elements": elements}
    arrays = [c.public_key.b.data, c.public_key.a.data, c.relin_key.b, c.relin_key.a]
    arrays += [part for g in elements for part in (gk.keys[g].b, gk.keys[g].a)]
    return pack("public_context", c.params.fingerprint, meta, [residue_array(a) for a in arrays])


def test_context_record_stores_seeds_and_halves(ctx):
    blob = ctx.public_context().to_bytes()
    legacy = _legacy_context_record(ctx)
    key_bytes = sum(k.nbytes for _, k in _keys(ctx))
    assert len(legacy) - len(blob) >= key_bytes // 2 - 1000     # every a half replaced by 32 bytes
    _, meta, arrays = unpack(blob, "public_context")
    assert len(meta["a_seeds"]) == 1 + len(ctx.galois_keys.keys) and len(arrays) == 2 + len(meta["a_seeds"])
    back = CKKSContext.from_bytes(blob)
    _same_keys(ctx, back)
    x = np.linspace(-1, 1, ctx.params.slots)
    ct = back.evaluator.rotate(ctx.encrypt(x), 5)             # the expanded (permuted) halves work
    assert np.abs(ctx.decrypt(ct) - np.roll(x, -5)).max() < 1e-5
    full = CKKSContext.from_bytes(ctx.to_bytes(include_secret_key=True))
    _same_keys(ctx, full)
    assert np.array_equal(full._secret_key.coeffs, ctx._secret_key.coeffs)


def test_separate_key_records_store_seeds(ctx):
    back = CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.relin_key_bytes(), ctx.galois_keys_bytes())
    _same_keys(ctx, back)
    relin = ctx.relin_key_bytes()
    assert len(relin) < ctx.relin_key.nbytes // 2 + 4096


def test_legacy_records_are_read_and_rewritten_with_both_halves(ctx):
    back = CKKSContext.from_bytes(_legacy_context_record(ctx))
    _same_keys(ctx, back, seeded=False)
    again = CKKSContext.from_bytes(back.to_bytes())           # no seed: a is stored after b
    _same_keys(back, again, seeded=False)
    assert unpack(back.to_bytes(), "public_context")[1]["a_seeds"] == [None] * (1 + len(ctx.galois_keys.keys))


def _repack(blob, kind, meta_change=None, arrays_change=None):
    fp, meta, arrays = unpack(blob, kind)
    meta = dict(meta)
    if meta_change:
        meta_change(meta)
    arrays = list(arrays)
    if arrays_change:
        arrays_change(arrays)
    return pack(kind, fp, meta, arrays)


def _set_seed(index, value):
    def change(meta):
        meta["a_seeds"] = list(meta["a_seeds"])
        meta["a_seeds"][index] = value
    return change


@pytest.mark.parametrize("change, arrays_change, match", [
    (lambda m: m.update(a_seeds=m["a_seeds"][:-1]), None, "key seeds for"),
    (lambda m: m.update(a_seeds="00" * 32), None, "a_seeds"),
    (_set_seed(0, "zz" * 32), None, "not 32 bytes of hex"),
    (_set_seed(1, "00" * 31), None, "not 32 bytes of hex"),
    (_set_seed(2, 7), None, "not 32 bytes of hex"),
    (_set_seed(0, None), None, "shape|arrays|ends"),             # claims a stored a half that is not there
    (None, lambda a: a.append(np.zeros(3, "<u4")), "left over"),
    (None, lambda a: a.pop(), "ends before|arrays"),
    (lambda m: m.update(galois_elements=m["galois_elements"][:1] * len(m["galois_elements"])), None, "Galois element"),
])
def test_malformed_seed_records_are_refused(ctx, change, arrays_change, match):
    blob = _repack(ctx.public_context().to_bytes(), "public_context", change, arrays_change)
    with pytest.raises(SerializationError, match=match):
        CKKSContext.from_bytes(blob)


def test_malformed_separate_records_are_refused(ctx):
    relin = _repack(ctx.relin_key_bytes(), "relin_key", lambda m: m.update(a_seeds=[]))
    with pytest.raises(SerializationError, match="key seeds for"):
        CKKSContext.from_key_bytes(ctx.public_key_bytes(), relin)
    relin = _repack(ctx.relin_key_bytes(), "relin_key", None, lambda a: a.append(a[0]))
    with pytest.raises(SerializationError, match="left over"):
        CKKSContext.from_key_bytes(ctx.public_key_bytes(), relin)
    galois = _repack(ctx.galois_keys_bytes(), "galois_keys", _set_seed(0, "ab"))
    with pytest.raises(SerializationError, match="not 32 bytes of hex"):
        CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.relin_key_bytes(), galois)


def test_unreduced_key_residues_are_refused(ctx):
    def bump(arrays):
        b = np.array(arrays[2])
        b[0, 0, 0] = ctx.params.moduli[0]
        arrays[2] = b
    with pytest.raises(SerializationError, match="not reduced"):
        CKKSContext.from_bytes(_repack(ctx.public_context().to_bytes(), "public_context", None, bump))


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 4), n=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_key_rows_kernel_matches_big_ints(rows, n, seed):
    from crypto.keyswitch import _key_rows
    rng = np.random.default_rng(seed)
    q = rng.choice([12289, 40961, 2**31 - 1, 1073479681, 3 * 2**29 + 1], rows).astype(np.uint64)
    col = q[:, None].astype(object)
    e, s, s_from = (rng.integers(0, 2**31, (rows, n)).astype(np.uint64) % q[:, None] for _ in range(3))
    a = (rng.integers(0, 2**31, (rows, n)).astype(np.uint64) % q[:, None]).astype(np.uint32)
    gadget = rng.integers(0, 2**31, rows).astype(np.uint64) % q * rng.integers(0, 2, rows).astype(np.uint64)
    out = np.empty((rows, n), dtype=np.uint32)
    _key_rows(e, a, s, gadget, s_from, q, out)
    big = lambda x: x.astype(object)
    expected = (big(e) - big(a) * big(s) + big(gadget)[:, None] * big(s_from)) % col
    assert out.astype(object).tolist() == expected.tolist()


def _centered_small(ring, data, idx, bound):
    from crypto.ring import RNSPoly
    from crypto.rlwe import centered_coefficients
    coeffs = centered_coefficients(RNSPoly(ring, data, idx, True).to_coeff().data, [ring.moduli[i] for i in idx])
    return np.abs(coeffs).max() <= bound


def test_every_key_is_an_rlwe_sample_of_its_gadget(ctx):
    """b_j + a_j·s_to - (P mod q_i)·s_from vanishes up to the Gaussian error (|e| <= 6σ) on every prime:
    relinearization (s_to = s, s_from = s²) and Galois keys in their stored form (s_to = σ_g^-1(s), s_from = s)."""
    import math
    params, ring = ctx.params, ctx.ring
    idx = tuple(range(len(params.moduli)))
    q = ring.q_column(idx)
    s = ctx._secret_key.poly
    big_p = math.prod(params.p_moduli)
    keys = [(ctx.relin_key, s.data, s.data * s.data % q)]
    keys += [(k, s.automorphism(pow(g, -1, 2 * params.n)).data, s.data) for g, k in ctx.galois_keys.keys.items()]
    for key, s_to, s_from in keys:
        for j, digit in enumerate(params.digits):
            gadget = np.zeros((len(idx), 1), dtype=np.uint64)
            gadget[list(digit), 0] = [big_p % params.moduli[i] for i in digit]
            x = (key.b[j].astype(np.uint64) + key.a[j].astype(np.uint64) * s_to % q) % q
            x = (x + q - gadget * s_from % q) % q
            assert _centered_small(ring, x, idx, 20)
            assert not _centered_small(ring, (x + gadget * s_from % q) % q, idx, 20)   # no gadget: not small


def test_ntt_subset_tables_are_lazy_views_and_equal_copies():
    """Sub-basis tables: nothing copied until a table is read; a contiguous range is a view of the parent's
    rows; any subset (gathered rows) equals the parent's rows and transforms like them."""
    from crypto.ntt_base import NTTTables, _TABLE_ARRAYS
    from crypto.params import CKKSParameters
    from crypto.ring import RingContext
    params = CKKSParameters.preset("TOY")
    tables = NTTTables(params.n, params.moduli)
    for idx in [(2, 3, 4), (0, 5, 1), (4,), ()]:
        sub = tables.subset(idx)
        assert not any(name in sub.__dict__ for name in _TABLE_ARRAYS)
        for name in _TABLE_ARRAYS:
            assert np.array_equal(getattr(sub, name), getattr(tables, name)[list(idx)])
            assert np.shares_memory(getattr(sub, name), getattr(tables, name)) == (idx == (2, 3, 4) or idx == (4,))
        with pytest.raises(AttributeError):
            sub.not_a_table
    ring = RingContext(params.n, params.moduli, "numba")
    x = np.random.default_rng(3).integers(0, 2**20, (len(params.moduli), params.n)).astype(np.uint64)
    full = ring.ntt(x, tuple(range(len(params.moduli))))
    for idx in [(0, 5, 1), (2, 3, 4)]:
        assert np.array_equal(ring.ntt(x[list(idx)], idx), full[list(idx)])


@settings(max_examples=15, deadline=None)
@given(idx=st.lists(st.integers(0, 12), min_size=1, max_size=8, unique=True), seed=st.integers(0, 2**32 - 1))
def test_ring_ntt_of_scattered_limbs_runs_over_ranges(idx, seed):
    """ring.ntt/intt of any basis equal the rows of the full transform, and leave no copied tables behind
    (a scattered basis is transformed run by run, each run a view of the ring's tables)."""
    from crypto.ntt_base import _TABLE_ARRAYS
    from crypto.params import CKKSParameters
    from crypto.ring import RingContext
    params = CKKSParameters.preset("TOY")
    ring = RingContext(params.n, params.moduli, "numba")
    x = np.random.default_rng(seed).integers(0, 2**20, (len(params.moduli), params.n)).astype(np.uint64)
    everything = tuple(range(len(params.moduli)))
    full, back = ring.ntt(x, everything), ring.intt(x, everything)
    assert np.array_equal(ring.ntt(x[idx], idx), full[idx]) and np.array_equal(ring.intt(x[idx], idx), back[idx])
    for key, sub in ring.tables._subsets.items():
        if any(name in sub.__dict__ for name in _TABLE_ARRAYS):
            assert key == tuple(range(key[0], key[0] + len(key)))
