"""Every NTT backend bit-identical through the ring and the CKKS evaluator; the measured ``auto`` choice."""
import json
import time

import numpy as np
import pytest

from crypto.backend_select import (CANDIDATES, DEFAULT_CANDIDATES, BackendSelector, Calibration, jax_accelerated,
                                   jax_installed, limb_bucket, machine_fingerprint)
from crypto.cross import CrossBackend
from crypto.errors import ParameterError
from crypto.modarith import find_ntt_primes
from crypto.ntt import AutoBackend, BasisConversion, NTTBackend, NTTTables, get_backend
from crypto.ring import RingContext, RNSPoly
from tests.crypto.ckks_helpers import random_residues

BACKENDS = ["numpy", "numba", "cross", "fourstep", "auto"]
_JAX = {"jax"} if jax_installed() else set()      # a candidate only where JAX is installed


@pytest.fixture
def selector(tmp_path):
    return BackendSelector(candidates=CANDIDATES, cache_file=tmp_path / "ntt_backends.json", repeats=2)


# ------------------------------------------------------------------------------ bit-identical matrix
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("log_n,limbs", [(4, 1), (9, 3), (12, 5)])
def test_every_backend_equals_numpy_radix2(backend, log_n, limbs, tmp_path):
    n = 1 << log_n
    moduli = find_ntt_primes(31, limbs, n)
    tables = NTTTables(n, moduli)
    b = AutoBackend(BackendSelector(cache_file=tmp_path / "c.json")) if backend == "auto" else get_backend(backend)
    ref = get_backend("numpy")
    a = random_residues(moduli, n, np.random.default_rng(log_n))
    assert np.array_equal(b.forward(a, tables), ref.forward(a, tables))
    assert np.array_equal(b.inverse(a, tables), ref.inverse(a, tables))
    conv = BasisConversion(moduli, find_ntt_primes(30, 2, n))
    assert np.array_equal(b.convert_basis(a, conv), ref.convert_basis(a, conv))


@pytest.mark.parametrize("backend", BACKENDS[:-1])
def test_unusual_layouts_and_dtypes_and_no_limbs(backend):
    n = 64
    tables = NTTTables(n, find_ntt_primes(31, 3, n))
    a = random_residues(tables.moduli, n, np.random.default_rng(2))
    b, ref = get_backend(backend), get_backend("numpy").forward(a, tables)
    read_only = a.copy()
    read_only.setflags(write=False)
    strided = np.zeros((3, 2 * n), dtype=np.uint64)
    strided[:, ::2] = a
    for arr in (read_only, np.asfortranarray(a), a.astype(np.int64), a.tolist(), strided[:, ::2]):
        assert np.array_equal(b.forward(arr, tables), ref)
        assert np.array_equal(b.inverse(ref, tables), a)
    empty = np.zeros((0, n), dtype=np.uint64)
    assert b.forward(empty, tables.subset([])).shape == (0, n) == b.inverse(empty, tables.subset([])).shape


def _ring_ops(ring):
    """Products, automorphisms, basis extension, mod-down and rescale of fixed polynomials."""
    rng = np.random.default_rng(7)
    idx = tuple(range(len(ring.moduli)))
    q_idx, p_idx = idx[:-1], idx[-1:]
    a = RNSPoly.from_ints(ring, rng.integers(-2**40, 2**40, ring.n), q_idx)
    b = RNSPoly.from_ints(ring, rng.integers(-8, 8, ring.n), q_idx)
    prod = (a.to_ntt() * b.to_ntt()).to_coeff()
    return [prod.data, prod.automorphism(5).data, a.to_ntt().automorphism(3).data,
            a.extend(p_idx).data, a.extend(p_idx).mod_down(p_idx).data, prod.rescale().data]


def test_ring_results_identical_under_every_backend(tmp_path):
    n = 256
    moduli = find_ntt_primes(31, 3, n) + find_ntt_primes(30, 1, n)
    reference = _ring_ops(RingContext(n, moduli, "numba"))
    for name in ("numpy", "cross", "fourstep", CrossBackend(8), AutoBackend(BackendSelector(cache_file=None))):
        got = _ring_ops(RingContext(n, moduli, name))
        assert all(np.array_equal(x, y) for x, y in zip(got, reference)), name


def test_he_multiply_and_rotation_identical_ciphertexts_under_every_backend():
    """keygen takes a seed and a backend (a TypeError there is a failure, not a skip); the ciphertexts are
    identical and decrypt within 2^-(log_scale - 16) of x^2 rotated."""
    from crypto.context import CKKSContext

    limbs = {}
    for backend in ("numba", "cross", "fourstep"):
        ctx = CKKSContext.keygen("TOY", rotations=[1, 3], seed=b"cross-test", backend=backend)
        x = np.linspace(-1, 1, 16)
        ct = ctx.encrypt(x)
        ev = ctx.evaluator
        product = ev.mul_rescale(ct, ct)
        rotated = ev.rotate(product, 3)
        limbs[backend] = [p.data for c in (ct, product, rotated) for p in c.parts]
        np.testing.assert_allclose(ctx.decrypt(rotated)[:13], (x * x)[3:16], rtol=0,
                                   atol=2.0 ** -(ctx.params.log_scale - 16))
    for other in ("cross", "fourstep"):
        assert all(np.array_equal(a, b) for a, b in zip(limbs["numba"], limbs[other]))


# ------------------------------------------------------------------------------------ auto choice
def test_auto_picks_the_measured_fastest_and_remembers(selector):
    n = 1024
    tables = NTTTables(n, find_ntt_primes(31, 3, n))
    chosen = selector.for_ntt(tables)
    (cal,) = selector.calibrations()
    assert cal.key == "ntt:1024:4" and cal.limbs == "4"
    assert {name for name, _ in cal.seconds} == {"fourstep", "numba", "cross", "numpy"} | _JAX
    times = [t for _, t in cal.seconds]
    assert times == sorted(times) and all(t > 0 for t in times)
    assert chosen is selector.backend(cal.best) and chosen.name == cal.best
    selector._measure = None            # a second request must not measure again
    assert selector.for_ntt(tables.subset([0, 1, 2])) is chosen


def test_auto_measures_only_compiled_backends_by_default(tmp_path):
    accelerated = {"jax"} if jax_accelerated() else set()
    assert set(BackendSelector(cache_file=None).candidates) == {"fourstep", "numba"} | accelerated
    assert set(BackendSelector(candidates=DEFAULT_CANDIDATES, cache_file=None).candidates) == \
        {"fourstep", "numba"} | _JAX


def test_jax_on_the_cpu_is_not_measured_by_default(monkeypatch):
    """Without an accelerator plugin, measuring JAX only imports it (hundreds of MB resident in the process that
    calibrates, which broke the memory plan's RSS test on a fresh cache) to find it ~10x slower."""
    import crypto.backend_select as select

    monkeypatch.setattr(select, "jax_installed", lambda: True)
    found = {}
    monkeypatch.setattr(select.importlib.util, "find_spec", lambda name: found.get(name))
    assert "jax" not in BackendSelector(cache_file=None).candidates
    found["jax_cuda12_plugin"] = object()
    assert "jax" in BackendSelector(cache_file=None).candidates


def test_calibration_is_read_back_from_disk_without_measuring(tmp_path):
    path = tmp_path / "cache.json"
    n = 64
    tables = NTTTables(n, find_ntt_primes(31, 2, n))
    first = BackendSelector(cache_file=path)
    best = first.for_ntt(tables).name
    payload = json.loads(path.read_text())
    assert payload["fingerprint"] == machine_fingerprint() and "ntt:64:2" in payload["entries"]

    second = BackendSelector(cache_file=path)
    second._measure = lambda *a, **k: pytest.fail("measured although the disk cache had the answer")
    assert second.for_ntt(tables).name == best


def test_forget_measures_again(tmp_path):
    path = tmp_path / "cache.json"
    tables = NTTTables(32, find_ntt_primes(31, 1, 32))
    sel = BackendSelector(cache_file=path, candidates=("numpy", "fourstep"))
    sel.for_ntt(tables)
    assert path.exists() and len(sel.calibrations()) == 1
    sel.forget()
    assert not path.exists() and sel.calibrations() == []
    sel.for_ntt(tables)
    assert len(sel.calibrations()) == 1 and path.exists()


def test_forced_disk_entry_decides(tmp_path):
    """The choice follows the stored timings, whatever they say (no built-in belief)."""
    path = tmp_path / "cache.json"
    for fake_best in ("numpy", "cross", *_JAX):           # jax too where installed: auto may pick it
        others = [c for c in ("fourstep", "numba", "cross", "numpy", *_JAX) if c != fake_best]
        entry = {"seconds": [[fake_best, 1e-6]] + [[c, 1.0] for c in others]}
        path.write_text(json.dumps({"fingerprint": machine_fingerprint(), "entries": {"ntt:32:1": entry}}))
        tables = NTTTables(32, find_ntt_primes(31, 1, 32))
        auto = AutoBackend(BackendSelector(candidates=CANDIDATES, cache_file=path))
        assert auto.choose(tables).name == fake_best
        a = random_residues(tables.moduli, 32, np.random.default_rng(1))
        assert np.array_equal(auto.forward(a, tables), get_backend("numba").forward(a, tables))


@pytest.mark.parametrize("content", ["not json", json.dumps({"fingerprint": "another machine", "entries": {}}),
                                     json.dumps({"fingerprint": None}), json.dumps([1, 2])])
def test_stale_or_corrupt_cache_is_ignored_and_rewritten(tmp_path, content):
    path = tmp_path / "cache.json"
    path.write_text(content)
    tables = NTTTables(16, find_ntt_primes(31, 1, 16))
    sel = BackendSelector(cache_file=path, candidates=("numpy", "cross"))
    assert sel.for_ntt(tables).name in ("numpy", "cross")
    assert json.loads(path.read_text())["fingerprint"] == machine_fingerprint()


def test_entries_measured_without_our_candidates_are_not_trusted(tmp_path):
    path = tmp_path / "cache.json"
    BackendSelector(cache_file=path, candidates=("numpy",)).for_ntt(NTTTables(16, find_ntt_primes(31, 1, 16)))
    wider = BackendSelector(cache_file=path, candidates=("numpy", "cross"))
    wider.for_ntt(NTTTables(16, find_ntt_primes(31, 1, 16)))
    (cal,) = wider.calibrations()
    assert {name for name, _ in cal.seconds} == {"numpy", "cross"}


def test_auto_choose_by_size_and_radix2_alias(tmp_path):
    auto = AutoBackend(BackendSelector(cache_file=tmp_path / "c.json"))
    chosen = auto.choose(512, 3)
    (cal,) = auto.selector.calibrations()
    assert cal.key == "ntt:512:4" and chosen.name == cal.best
    tables = NTTTables(512, find_ntt_primes(30, 4, 512))
    auto.selector._measure = None                      # same (n, bucket): no second measurement
    assert auto.choose(tables) is chosen
    assert get_backend("radix2").name == "numba"
    with pytest.raises(ParameterError, match="n=500, limbs=1"):
        auto.choose(500, 1)


def test_memory_only_selector_and_conversion_choice():
    n = 128
    moduli = find_ntt_primes(31, 5, n)
    sel = BackendSelector(cache_file=None, repeats=1)
    conv = BasisConversion(moduli[:3], moduli[3:])
    chosen = sel.for_conversion(conv, n)
    (cal,) = sel.calibrations()
    assert cal.operation == "convert" and cal.limbs == "4to2" and chosen.name == cal.best


def test_selector_rejects_bad_arguments():
    with pytest.raises(ParameterError, match=r"candidates=\('fftw',\)"):
        BackendSelector(candidates=("fftw",))
    with pytest.raises(ParameterError, match="candidates=()"):
        BackendSelector(candidates=())
    with pytest.raises(ParameterError, match="repeats=0"):
        BackendSelector(repeats=0)
    with pytest.raises(ParameterError, match="limbs=0"):
        limb_bucket(0)
    with pytest.raises(ParameterError, match="backend='fast'"):
        get_backend("fast")


def test_limb_buckets_and_calibration_order():
    assert [limb_bucket(k) for k in (1, 2, 3, 5, 8, 9, 32, 33)] == [1, 2, 4, 8, 8, 16, 32, 64]
    cal = Calibration("ntt", 16, "1", (("cross", 1.0), ("numpy", 2.0)))
    assert cal.best == "cross" and cal.key == "ntt:16:1"


def test_nothing_is_measured_before_first_use(tmp_path):
    path = tmp_path / "never.json"
    auto = AutoBackend(BackendSelector(cache_file=path))
    assert auto.selector.calibrations() == [] and not path.exists()


class _Sluggish(NTTBackend):
    """A correct but slow backend (numpy radix-2 plus a sleep per limb) that records its input sizes."""

    name = "cross"

    def __init__(self):
        self.inner, self.limbs_seen = get_backend("numpy"), []

    def forward(self, a, tables):
        self.limbs_seen.append(len(a))
        time.sleep(0.01 * len(a))
        return self.inner.forward(a, tables)

    def inverse(self, a, tables):
        return self.inner.inverse(a, tables)

    def convert_basis(self, x, conv):
        return self.inner.convert_basis(x, conv)


def test_a_hopeless_candidate_is_pruned_on_the_one_limb_pilot():
    n = 256
    tables = NTTTables(n, find_ntt_primes(31, 4, n))
    sel = BackendSelector(candidates=("numba", "cross"), cache_file=None, timer=time.perf_counter)  # it sleeps
    slow = sel._backends["cross"] = _Sluggish()
    assert sel.for_ntt(tables).name == "numba"
    assert set(slow.limbs_seen) == {1}                 # never run (nor built) at the full 4 limbs
    (cal,) = sel.calibrations()
    assert dict(cal.seconds)["cross"] >= 4 * 0.01       # recorded as pilot time x limbs
