"""RNSPoly behaviours the mutation run of crypto/ring.py found untested (issue 19; tests/mutation/survivors.md).

Each test names the mutants it kills; all are exact checks against Python integers or the documented contract.
"""
import math

import numpy as np
import pytest

from crypto.errors import ContextMismatchError, ParameterError
from crypto.modarith import find_ntt_primes
from crypto.ring import RingContext, RNSPoly

N = 16
MODULI = find_ntt_primes(30, 3, N) + find_ntt_primes(25, 2, N)
IDX = tuple(range(len(MODULI)))


@pytest.fixture
def ring():
    """A fresh ring per test (mutmut attributes a module fixture's calls to the first test only)."""
    return RingContext(N, MODULI, backend="numpy")


def _poly(ring, seed, idx=IDX, is_ntt=False):
    rng = np.random.default_rng(seed)
    data = np.array([rng.integers(0, ring.moduli[i], N) for i in idx], dtype=np.uint64)
    return RNSPoly(ring, data, idx, is_ntt)


def test_from_ints_defaults_to_coefficient_form_with_exact_residues(ring):
    """from_ints(…) without is_ntt is coefficient form: data[l, j] = c_j mod q_l (kills from_ints is_ntt=True)."""
    values = np.arange(-N // 2, N // 2, dtype=np.int64) * 12345
    p = RNSPoly.from_ints(ring, values, IDX)
    assert p.is_ntt is False
    assert p.data.tolist() == [[int(v) % q for v in values] for q in MODULI]


def test_from_ints_int64_beyond_float_precision(ring):
    """int64 coefficients above 2^53 are reduced exactly (a float64 detour rounds them: kills the
    astype(None) mutants of the int64 branch)."""
    values = np.array([(1 << 62) + 2 * j + 1 for j in range(N)], dtype=np.int64)
    values[1::2] *= -1
    p = RNSPoly.from_ints(ring, values, IDX)
    assert p.data.tolist() == [[int(v) % q for v in values] for q in MODULI]


def test_keep_restricts_and_reorders_limbs(ring):
    """keep(idx) = x mod Q' limb by limb, in the order asked; unknown limbs refused."""
    a = _poly(ring, 3, is_ntt=True)
    kept = a.keep((3, 0))
    assert kept.idx == (3, 0) and kept.is_ntt
    assert np.array_equal(kept.data, a.data[[3, 0]])
    sub = a.keep(IDX[:2]).keep((1,))
    assert sub.idx == (1,) and np.array_equal(sub.data, a.data[[1]])
    with pytest.raises(ParameterError, match=r"limbs \[7\] are not in"):
        a.keep((0, 7))
    with pytest.raises(ParameterError, match="not in this polynomial's basis"):
        a.keep(IDX[:2]).keep((2,))


def test_rings_with_equal_moduli_are_compatible_and_others_are_not(ring):
    """Two RingContext objects with the same moduli (another backend) mix; different moduli are refused."""
    a = _poly(ring, 4)
    twin = ring.with_backend("numba")
    b = RNSPoly(twin, _poly(ring, 5).data, IDX, False)
    assert np.array_equal((a + b).data, (a + _poly(ring, 5)).data)
    other = RingContext(N, find_ntt_primes(28, 5, N), backend="numpy")
    c = RNSPoly(other, np.zeros((len(IDX), N), dtype=np.uint64), IDX, False)
    with pytest.raises(ContextMismatchError, match="different rings"):
        a + c
    with pytest.raises(ContextMismatchError, match="different rings"):
        a - c


@pytest.mark.parametrize("g", [3, 2 * N - 1])
def test_coefficient_automorphism_keeps_residues_canonical(ring, g):
    """σ_g in coefficient form maps a zero coefficient to 0, not q (every residue stays in [0, q))."""
    a = _poly(ring, g)
    data = np.array(a.data)
    data[:, ::2] = 0
    out = RNSPoly(ring, data, IDX, False).automorphism(g)
    assert (out.data < ring.q_column(IDX)).all()
    assert np.array_equal(out.to_ntt().data, RNSPoly(ring, data, IDX, False).to_ntt().automorphism(g).data)


def test_divide_round_tables_are_uint64(ring):
    """The divide-and-round kernel is compiled for uint64 tables (numba types an int64 table apart and
    compiles the kernel again); every table DivideRound hands it is uint64."""
    div = ring.divider(IDX[:2], IDX[2:])
    for name in ("q_tail", "q_head", "half_tail", "garner", "garner_shoup", "radix_inv", "radix_inv_shoup",
                 "t_inv", "t_inv_shoup", "weight", "weight_shoup", "half_head"):
        assert getattr(div, name).dtype == np.uint64, name
    t = math.prod(MODULI[2:])
    assert div.half_head.tolist() == [(t // 2) * pow(t, -1, q) % q for q in MODULI[:2]]


def test_default_backend_and_with_backend():
    """The default backend is "auto"; with_backend keeps n and the moduli and gives bit-identical products."""
    from crypto.ntt import get_backend

    ring = RingContext(N, MODULI)
    assert ring.backend.name == get_backend("auto").name
    twin = ring.with_backend("numpy")
    assert twin.n == N and twin.moduli == tuple(MODULI) and twin.backend.name == "numpy"
    a = _poly(ring, 1, is_ntt=True)
    assert np.array_equal(twin.mul(a.data, a.data, IDX), ring.mul(a.data, a.data, IDX))


def test_backend_override_is_used(ring):
    """A per-call backend is looked up (an unknown name is refused), not ignored."""
    a = _poly(ring, 2)
    for call in (lambda: ring.ntt(a.data, IDX, backend="no-such"), lambda: ring.intt(a.data, IDX, backend="no-such"),
                 lambda: ring.convert(a.data[:2], IDX[:2], IDX[2:], backend="no-such")):
        with pytest.raises(ParameterError, match="no-such"):
            call()


def test_q_column_is_uint64(ring):
    """q_column (and RNSPoly.q) is the documented uint64 column of the moduli."""
    col = ring.q_column((4, 1))
    assert col.dtype == np.uint64 and col.shape == (2, 1) and col[:, 0].tolist() == [MODULI[4], MODULI[1]]
    assert _poly(ring, 1).q.dtype == np.uint64


def test_zeros_and_repr(ring):
    """zeros: NTT form by default, uint64 zeros over idx; repr names n, limbs and form."""
    z = RNSPoly.zeros(ring, (0, 2))
    assert z.is_ntt is True and z.idx == (0, 2) and z.ring is ring
    assert z.data.dtype == np.uint64 and z.data.shape == (2, N) and not z.data.any()
    assert RNSPoly.zeros(ring, (1,), is_ntt=False).is_ntt is False
    assert repr(z) == f"RNSPoly(n={N}, limbs=2, ntt)"
    assert repr(_poly(ring, 1)) == f"RNSPoly(n={N}, limbs={len(IDX)}, coeff)"


def test_to_ntt_is_idempotent_and_rescale_defaults_to_one_limb(ring):
    a = _poly(ring, 6, is_ntt=True)
    assert a.to_ntt() is a
    assert np.array_equal(a.rescale().data, a.rescale(1).data) and a.rescale().idx == IDX[:-1]


def _automorphism_reference(values, g):
    ref = [0] * N
    for j, c in enumerate(values):
        e = j * g % (2 * N)
        ref[e % N] += -c if e >= N else c
    return ref


def test_automorphism_elements_beyond_2n_share_one_ring(ring):
    """σ_g depends on g mod 2N only: elements 3, 3 + 3N, 3N + 1, 2N + 3 on one ring (its index cache is keyed
    by g mod 2N) each match the reference, in both forms."""
    a = _poly(ring, 7)
    values = [int(v) for v in a.to_ints()]
    for g in (3, 3 + 3 * N, 3 * N + 1, 2 * N + 3, 3):
        ref = _automorphism_reference(values, g)
        assert [int(v) for v in a.automorphism(g).to_ints()] == ref, g
        assert [int(v) for v in a.to_ntt().automorphism(g).to_ints()] == ref, g


def test_limb_sets_do_not_share_cached_constants(ring):
    """Constants cached per limb set (Barrett moduli, basis conversions): an operation over one limb set
    then another gives exact results for both."""
    a, b = _poly(ring, 8), _poly(ring, 9)
    assert np.array_equal((a + b).data, (a.data + b.data) % ring.q_column(IDX))
    c, d = _poly(ring, 10, (3, 4)), _poly(ring, 11, (3, 4))
    assert np.array_equal((c + d).data, (c.data + d.data) % ring.q_column((3, 4)))
    assert np.array_equal((-c).data, (ring.q_column((3, 4)) - c.data) % ring.q_column((3, 4)))
    # basis conversions into two different targets, then from a different source
    x = _poly(ring, 12, (0, 1))
    big = math.prod(MODULI[:2])
    for to in ((2, 3), (4,)):
        ext = x.extend(to)
        for xi, yi in zip(x.to_ints(), ext.to_ints()):
            assert (int(yi) - int(xi)) % big == 0 and abs(int(yi) - int(xi)) // big <= 2
    y = _poly(ring, 13, (2, 3))
    ext = y.extend((0,))
    big = math.prod(MODULI[2:4])
    for xi, yi in zip(y.to_ints(), ext.to_ints()):
        assert (int(yi) - int(xi)) % big == 0 and abs(int(yi) - int(xi)) // big <= 2


@pytest.mark.parametrize("q", [65537, 536903681])
def test_barrett_constants_at_the_edges(q):
    """k = bitlength(q − 1) and m = ⌊2^2k / q⌋ exactly: q = 2^16 + 1 (q − 2 has one bit less) and
    q = 536903681 (2^60 / q in float64 rounds up to the next integer); products of the largest residues exact."""
    ring = RingContext(N, [q])
    _, bk, bm = ring._barrett((0,))
    k = (q - 1).bit_length()
    assert bk.tolist() == [k] and bm.tolist() == [(1 << (2 * k)) // q]
    x = np.array([[q - 1 - j for j in range(N)]], dtype=np.uint64)
    got = ring.mul(x, x, (0,))
    assert got[0].tolist() == [int(v) * int(v) % q for v in x[0]]
