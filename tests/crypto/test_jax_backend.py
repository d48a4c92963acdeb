"""JAX kernels (crypto.jax_backend) limb for limb against numba, the O(n²) transform and Python ints."""
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

jax = pytest.importorskip("jax", reason="the jax extra is not installed")
jnp = pytest.importorskip("jax.numpy")

from crypto import jax_backend as jb  # noqa: E402
from crypto.errors import ParameterError, ShapeError  # noqa: E402
from crypto.modarith import crt_compose, find_ntt_primes  # noqa: E402
from crypto.ntt import BasisConversion, NTTTables, get_backend  # noqa: E402
from tests.reference.naive_cross import naive_basis_conversion, naive_ntt_rows  # noqa: E402

HAS_GPU = any(d.platform in ("gpu", "cuda", "rocm") for d in jax.devices())
EDGE_MODULI = [3, 5, 97, 2**15 + 1, 65537, 12289, 2**30 + 3, 2**31 - 1]     # odd, below 2^31
FAST = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def kernels():
    """The device API, jitted once for the module (compile time counts)."""
    return {name: jax.jit(getattr(jb, name)) for name in ("mulmod", "barrett", "ntt", "intt", "convert_basis",
                                                           "keyswitch_inner", "addmod", "submod", "negmod")}


def _random_limbs(moduli, n, rng):
    a = np.array([rng.integers(0, q, n) for q in moduli], dtype=np.uint64)
    a[:, 0] = np.array(moduli, dtype=np.uint64) - 1      # the extremes: q − 1 and 0
    if n > 1:
        a[:, 1] = 0
    return a


@st.composite
def ntt_case(draw, min_log=3, max_log=12, max_limbs=3):
    log_n = draw(st.integers(min_log, max_log))
    n = 2**log_n
    limbs = draw(st.integers(1, max_limbs))
    bits = draw(st.lists(st.integers(max(2 * n.bit_length(), 17), 31), min_size=limbs, max_size=limbs))
    moduli = []
    for b in bits:
        moduli.append(find_ntt_primes(b, 1, n, exclude=frozenset(moduli))[0])
    return n, tuple(moduli), draw(st.integers(0, 2**32 - 1))


# ------------------------------------------------------------------------------------------ NTT
@FAST
@given(ntt_case())
@example((8, (17,), 0))                       # the smallest prime ≡ 1 mod 16
@example((2**12, find_ntt_primes(31, 2, 2**12), 1))   # the largest 31-bit primes: the widest top digits
def test_ntt_matches_numba_limb_for_limb(kernels, case):
    n, moduli, seed = case
    tables = NTTTables(n, moduli)
    a = _random_limbs(moduli, n, np.random.default_rng(seed))
    dt = jb.DeviceTables.of(tables)
    numba = get_backend("numba")
    out = np.asarray(kernels["ntt"](a.astype(np.uint32), dt)).astype(np.uint64)
    assert np.array_equal(out, numba.forward(a, tables))
    back = np.asarray(kernels["intt"](out.astype(np.uint32), dt)).astype(np.uint64)
    assert np.array_equal(back, a)
    assert np.array_equal(back, numba.inverse(out, tables))


@settings(max_examples=4, deadline=None)
@given(ntt_case(max_log=6, max_limbs=2))
@example((2, (5, 13), 0))                             # N = 2 (R = 2, C = 1) and tiny moduli
@example((4, (17, 41), 1))
def test_ntt_matches_the_quadratic_transform(case):
    n, moduli, seed = case
    tables = NTTTables(n, moduli)
    a = _random_limbs(moduli, n, np.random.default_rng(seed))
    got = get_backend("jax").forward(a, tables)
    assert got.tolist() == naive_ntt_rows(a.tolist(), moduli)


def test_backend_selectable_by_name_and_checks_inputs():
    backend = get_backend("jax")
    assert backend.name == "jax" and isinstance(backend, jb.JaxBackend)
    tables = NTTTables(16, find_ntt_primes(31, 2, 16))
    with pytest.raises(ShapeError):
        backend.forward(np.zeros((3, 16), dtype=np.uint64), tables)
    with pytest.raises(ParameterError):
        backend.forward(np.full((2, 16), 2**31, dtype=np.uint64), tables)          # not reduced
    assert backend.forward(np.zeros((0, 16), dtype=np.uint64), tables.subset([])).shape == (0, 16)
    with pytest.raises(ShapeError):
        jb.ntt(jnp.zeros((2, 32), dtype=jnp.uint32), jb.DeviceTables.of(tables))
    with pytest.raises(ParameterError):
        jb.DeviceTables.of("tables")


def test_device_tables_cached_and_sub_bases_gathered():
    n = 32
    tables = NTTTables(n, find_ntt_primes(31, 4, n))
    dt = jb.DeviceTables.of(tables)
    assert jb.DeviceTables.of(tables) is dt
    sub = tables.subset([2, 0])
    gathered = jb.DeviceTables.of(sub)
    fresh = jb._build_tables(sub)
    for name, a, b in zip(jb.DeviceTables._fields, gathered, fresh):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b)), name


def test_device_tables_made_under_a_trace_are_concrete():
    """DeviceTables.of inside a jitted function (a sub-basis gathered there) must not cache tracers."""
    n = 16
    tables = NTTTables(n, find_ntt_primes(31, 3, n))
    jb.DeviceTables.of(tables)
    sub = tables.subset([1])

    @jax.jit
    def forward(a):
        return jb.ntt(a, jb.DeviceTables.of(sub))

    a = _random_limbs(sub.moduli, n, np.random.default_rng(2))
    assert np.array_equal(np.asarray(forward(a.astype(np.uint32))), get_backend("numba").forward(a, sub))
    assert all(not isinstance(f, jax.core.Tracer) for f in jb.DeviceTables.of(sub))


def test_ntt_of_uint64_inside_enable_x64_keeps_the_dtype(kernels):
    n = 64
    tables = NTTTables(n, find_ntt_primes(30, 2, n))
    a = _random_limbs(tables.moduli, n, np.random.default_rng(3))
    with jax.enable_x64(True):
        out = kernels["ntt"](jnp.asarray(a), jb.DeviceTables.of(tables))
        assert out.dtype == jnp.uint64
        assert np.array_equal(np.asarray(out), get_backend("numba").forward(a, tables))
    assert not jax.config.jax_enable_x64       # never flipped globally


# ------------------------------------------------------------------------------------ mulmod / Barrett
@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(EDGE_MODULI), st.integers(1, 2**30 - 1).map(lambda v: 2 * v + 1)),
                min_size=8, max_size=8), st.integers(0, 2**32 - 1))
def test_mulmod_matches_python_ints_including_the_worst_cases(kernels, moduli, seed):
    rng = np.random.default_rng(seed)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    a = rng.integers(0, q, (8, 64), dtype=np.uint64)
    b = rng.integers(0, q, (8, 64), dtype=np.uint64)
    a[:, :2] = q - 1                                          # (q − 1)², and (q − 1)·0
    b[:, 0], b[:, 1] = q[:, 0] - 1, 0
    got = np.asarray(kernels["mulmod"](a.astype(np.uint32), b.astype(np.uint32), q.astype(np.uint32)))
    expected = [[int(x) * int(y) % int(p) for x, y in zip(ra, rb)] for ra, rb, p in zip(a, b, q[:, 0])]
    assert got.tolist() == expected
    with jax.enable_x64(True):                                # the widening-multiply form, uint64 in and out
        assert np.asarray(kernels["mulmod"](a, b, q)).tolist() == expected
    qs = q.astype(np.uint32)
    assert np.asarray(kernels["addmod"](a.astype(np.uint32), b.astype(np.uint32), qs)).tolist() == \
        ((a + b) % q).tolist()
    assert np.asarray(kernels["submod"](a.astype(np.uint32), b.astype(np.uint32), qs)).tolist() == \
        ((a + q - b) % q).tolist()
    assert np.asarray(kernels["negmod"](a.astype(np.uint32), qs)).tolist() == ((q - a) % q).tolist()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(EDGE_MODULI), st.integers(1, 2**30 - 1).map(lambda v: 2 * v + 1)),
                min_size=8, max_size=8), st.integers(0, 2**32 - 1))
def test_barrett_reduces_words_pairs_and_uint64(kernels, moduli, seed):
    rng = np.random.default_rng(seed)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    lo = rng.integers(0, 2**32, (8, 32), dtype=np.uint64)
    hi = rng.integers(0, 2**32, (8, 32), dtype=np.uint64)
    lo[:, 0] = hi[:, 0] = 2**32 - 1                            # 2^64 − 1
    lo[:, 1] = hi[:, 1] = 0
    got = np.asarray(kernels["barrett"](lo.astype(np.uint32), q.astype(np.uint32)))
    assert got.tolist() == (lo % q).tolist()
    wide = [[((int(h) << 32) + int(l)) % int(p) for h, l in zip(rh, rl)] for rh, rl, p in zip(hi, lo, q[:, 0])]
    got = kernels["barrett"]((hi.astype(np.uint32), lo.astype(np.uint32)), q.astype(np.uint32))
    assert np.asarray(got).tolist() == wide
    with jax.enable_x64(True):
        got = kernels["barrett"](jnp.asarray((hi << np.uint64(32)) | lo), jnp.asarray(q))
        assert got.dtype == jnp.uint64 and np.asarray(got).tolist() == wide


def test_host_uint64_without_x64_is_split_on_the_host():
    """Without x64 JAX would narrow a numpy uint64 to uint32: barrett splits it first; ntt takes residues."""
    q = np.array([[97], [2**31 - 1]], dtype=np.uint64)
    x = np.array([[2**64 - 1, 2**32, 5], [2**63 + 12345, 2**40 + 7, 2**31 - 1]], dtype=np.uint64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # JAX's "uint64 not available" warning
        got = jb.barrett(x, q)
        assert got.dtype == jnp.uint32 and np.asarray(got).tolist() == (x % q).tolist()
        tables = NTTTables(16, find_ntt_primes(31, 2, 16))
        a = _random_limbs(tables.moduli, 16, np.random.default_rng(4))
        out = jb.ntt(a, jb.DeviceTables.of(tables))
        assert np.array_equal(np.asarray(out), get_backend("numba").forward(a, tables))


@pytest.mark.parametrize("x64", [False, True], ids=["16-bit halves", "widening multiply"])
def test_mul_wide_both_forms_match_python_ints(x64):
    rng = np.random.default_rng(11)
    a = np.concatenate([rng.integers(0, 2**32, 500, dtype=np.uint64), [2**32 - 1, 2**32 - 1, 0, 2**16, 2**16 - 1]])
    b = np.concatenate([rng.integers(0, 2**32, 500, dtype=np.uint64), [2**32 - 1, 0, 2**32 - 1, 2**16, 2**16 - 1]])
    with jax.enable_x64(x64):
        hi, lo = jax.jit(jb.mul_wide)(a.astype(np.uint32), b.astype(np.uint32))
    products = [int(x) * int(y) for x, y in zip(a, b)]
    assert np.asarray(hi).astype(object).tolist() == [p >> 32 for p in products]
    assert np.asarray(lo).astype(object).tolist() == [p & 0xFFFFFFFF for p in products]


def test_barrett_constants_are_the_cross_ones():
    moduli = np.array(EDGE_MODULI, dtype=np.uint32)
    c = jb.barrett_constants(moduli)
    for q, m, word, r32 in zip(EDGE_MODULI, np.asarray(c.m), np.asarray(c.word), np.asarray(c.r32)):
        k = (q - 1).bit_length()
        assert int(m) == (1 << (2 * k)) // q and int(word) == 2**32 // q and int(r32) == 2**32 % q
    with pytest.raises(ShapeError):
        jb.barrett((jnp.zeros(2, jnp.uint32),) * 3, 7)


# ------------------------------------------------------------------------------------------ BAT bound
def test_balanced_digits_recombine_and_refuse_wide_values():
    v = np.array([0, 1, -1, 2**30, -2**30, 123456789, -987654321], dtype=np.int64)
    d = jb.balanced_digits(v).astype(np.int64)
    assert np.array_equal(sum(d[t] << (8 * t) for t in range(jb.CHUNKS)), v)
    assert np.abs(d[:-1]).max() <= jb.DIGIT_MAX and np.abs(d[-1]).max() <= jb.TOP_DIGIT_MAX
    on_device = np.asarray(jb._digit_bytes(jnp.asarray(v.astype(np.int32))))         # the bytes of one uint32
    assert np.array_equal(np.moveaxis(on_device, -1, 0), d)
    with pytest.raises(ParameterError):
        jb.balanced_digits(np.array([2**30 + 1]))
    with pytest.raises(ParameterError):
        jb.bat_left_matrix(np.zeros((1, jb.MAX_INNER + 1), dtype=np.uint64), 97)


def test_int8_matmul_at_the_inner_limit_is_exact():
    """The worst case the MAX_INNER argument allows: every product at its largest magnitude, same sign."""
    assert jb.MAX_INNER * jb.DIGIT_MAX * (3 * jb.DIGIT_MAX + jb.TOP_DIGIT_MAX) < jb.OFFSET
    inner = jb.MAX_INNER
    top = [-jb.DIGIT_MAX] * 3 + [-jb.TOP_DIGIT_MAX]
    data = np.repeat(np.array(top, dtype=np.int8), inner)[None, :, None]           # (1, 4·inner, 1)
    matrix = np.full((1, 1, jb.CHUNKS * inner), -jb.DIGIT_MAX, dtype=np.int8)
    z = int(np.asarray(jb._dot(jnp.asarray(matrix), jnp.asarray(data)))[0, 0, 0])
    assert z == inner * jb.DIGIT_MAX * (3 * jb.DIGIT_MAX + jb.TOP_DIGIT_MAX) < jb.OFFSET


# ------------------------------------------------------------------------------------- basis conversion
@FAST
@given(st.integers(1, 6), st.integers(1, 5), st.integers(18, 31), st.integers(18, 31), st.integers(0, 2**32 - 1))
@example(6, 5, 31, 31, 0)                             # the largest residues and constants
def test_convert_basis_matches_numba_and_the_exact_conversion(kernels, k_from, k_to, from_bits, to_bits, seed):
    n = 64
    from_moduli = find_ntt_primes(from_bits, k_from, n)
    conv = BasisConversion(from_moduli, find_ntt_primes(to_bits, k_to, n, exclude=frozenset(from_moduli)))
    x = _random_limbs(conv.from_moduli, n, np.random.default_rng(seed))
    got = np.asarray(kernels["convert_basis"](x.astype(np.uint32), jb.DeviceConversion.of(conv))).astype(np.uint64)
    assert np.array_equal(got, get_backend("numba").convert_basis(x, conv))
    assert got.tolist() == naive_basis_conversion(x.tolist(), conv.from_moduli, conv.to_moduli)
    exact = crt_compose(x, conv.from_moduli)             # the integer in [0, Q)
    big_q = int(np.prod([int(q) for q in conv.from_moduli], dtype=object))
    for j, p in enumerate(conv.to_moduli):
        u = [next(u for u in range(k_from) if (int(e) + u * big_q) % p == int(y)) for e, y in zip(exact, got[j])]
        assert max(u) < k_from                            # y = x + u·Q mod p, 0 <= u < k
    assert np.array_equal(get_backend("jax").convert_basis(x, conv), got)


# ----------------------------------------------------------------------------------- key-switch product
def test_keyswitch_inner_matches_python_ints(kernels):
    rng = np.random.default_rng(5)
    moduli = find_ntt_primes(31, 3, 64) + (2**31 - 1,)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    digits, key_b, key_a = (rng.integers(0, q, (4, 4, 64), dtype=np.uint64) for _ in range(3))
    digits[:, :, 0] = key_b[:, :, 0] = key_a[:, :, 0] = q - 1
    out_b, out_a = kernels["keyswitch_inner"](digits.astype(np.uint32), key_b.astype(np.uint32),
                                             key_a.astype(np.uint32), q.astype(np.uint32))
    for out, key in ((out_b, key_b), (out_a, key_a)):
        expected = (digits.astype(object) * key.astype(object)).sum(axis=0) % q.astype(object)
        assert np.asarray(out).astype(object).tolist() == expected.tolist()
    with pytest.raises(ShapeError):
        jb.keyswitch_inner(digits[:, :2], key_b, key_a, q)


# --------------------------------------------------------------------------------------- whole CKKS
@pytest.mark.slow
def test_ckks_product_and_rotation_equal_numba_limb_for_limb():
    from crypto.context import CKKSContext

    limbs = {}
    for backend in ("numba", "jax"):
        ctx = CKKSContext.keygen("TOY", rotations=[3], seed=b"jax-test", backend=backend)
        x = np.linspace(-1, 1, 16)
        ct = ctx.encrypt(x)
        ev = ctx.evaluator
        product = ev.mul_rescale(ct, ct)
        rotated = ev.rotate(product, 3)
        limbs[backend] = [p.data for c in (ct, product, rotated) for p in c.parts]
        np.testing.assert_allclose(ctx.decrypt(rotated)[:13], (x * x)[3:16], rtol=0,
                                   atol=2.0 ** -(ctx.params.log_scale - 16))
    assert len(limbs["jax"]) == len(limbs["numba"])
    assert all(np.array_equal(a, b) for a, b in zip(limbs["numba"], limbs["jax"]))


# --------------------------------------------------------------------------------------------- import
def test_importing_crypto_does_not_import_jax():
    code = ("import sys, crypto, crypto.ntt, crypto.backend_select, crypto.jax_backend, crypto.context; "
            "assert 'jax' not in sys.modules, 'jax imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_jax_the_backend_is_refused_by_name_and_auto_skips_it():
    code = "\n".join([
        "import sys; sys.modules['jax'] = None            # as if JAX were not installed",
        "from crypto.errors import ParameterError",
        "from crypto.ntt import NTTTables, get_backend",
        "from crypto.backend_select import BackendSelector",
        "from crypto.modarith import find_ntt_primes",
        "try:",
        "    get_backend('jax')",
        "except ParameterError as e:",
        "    assert isinstance(e, ImportError) and \"backend='jax'\" in str(e) and 'hezk[jax]' in str(e), e",
        "else:",
        "    raise AssertionError('no error')",
        "sel = BackendSelector(candidates=('numba', 'jax'), cache_file=None)",
        "assert sel.for_ntt(NTTTables(16, find_ntt_primes(31, 1, 16))).name == 'numba'",
    ])
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------------ GPU
@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: JAX sees no GPU device here")
def test_gpu_ntt_2_16_with_32_limbs_equals_numba():
    n = 2**16
    tables = NTTTables(n, find_ntt_primes(31, 32, n))
    a = _random_limbs(tables.moduli, n, np.random.default_rng(9))
    backend = get_backend("jax")
    out = backend.forward(a, tables)
    assert np.array_equal(out, get_backend("numba").forward(a, tables))
    assert np.array_equal(backend.inverse(out, tables), a)
