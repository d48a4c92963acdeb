"""Sample-per-slot packing (tensor_ops.sample_packing): the exact modular matrix product against its Python-integer
twin, the dense layer on ciphertexts against the library's own scalar multiply-accumulate bit for bit, the whole
network against the float reference (precision stated in bits), and the refusals.

Unit cases use the insecure TOY ring (N = 2^12, an explicit opt-in of crypto.params); the 128-bit run is marked
slow."""
import json
import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext, CKKSParameters
from crypto.errors import (ContextMismatchError, KeyMissingError, LevelError, ParameterError, SerializationError,
                           ShapeError)
from tensor_ops.inference import OutputRangeError
from tensor_ops.nn import Linear, Poly, Sequential, Square
from tensor_ops.sample_packing import (SamplePackedClient, SamplePackedModel, SamplePackedServer, SamplePackedSpec,
                                       dense_layer, dense_layer_naive, digit_width, modular_matmul,
                                       modular_matmul_naive)

PRIMES = (1073643521, 1072857089, 33554393, 65537, 12289)   # NTT primes of the rings and small ones


# --- the exact modular matrix product --------------------------------------------------------------------------
@settings(deadline=None)  # the profile's examples: 25 by default, 300 with HYPOTHESIS_PROFILE=thorough
@given(st.sampled_from(PRIMES), st.integers(1, 5), st.integers(1, 30), st.integers(1, 40), st.integers(0, 2**32 - 1),
       st.sampled_from([2**10, 2**31, 2**62]))
def test_modular_matmul_equals_the_integer_product(q, n_out, n_in, cols, seed, span):
    """Rule: (a @ x) mod q of the float64-BLAS kernel equals the Python-integer product exactly, for any integer
    weights (small, word-size or up to 2^62, either sign) and residues x in [0, q)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-span, span, (n_out, n_in), dtype=np.int64)
    x = rng.integers(0, q, (n_in, cols), dtype=np.int64)
    assert np.array_equal(modular_matmul(a, x, q), modular_matmul_naive(a, x, q))


def test_modular_matmul_extremes_need_several_digits():
    """Rule: at the worst case (every weight and every centred word at (q-1)/2 in magnitude, 5,000 inputs: digits of
    12 bits, three of them) the product is still exact; Python-int weights beyond 2^63 are reduced first."""
    q = PRIMES[0]
    n_in = 5000
    assert digit_width(n_in, q) == 12
    half = (q - 1) // 2
    a = np.where(np.arange(2 * n_in).reshape(2, n_in) % 3 == 0, half, -half)
    x = np.array([[half + 1, half, q - 1, 0]] * n_in, dtype=np.int64)   # centred: -half, +half, -1, 0
    assert np.array_equal(modular_matmul(a, x, q), modular_matmul_naive(a, x, q))
    big = np.array([[2**80 + 3, -(2**70)]], dtype=object)
    assert np.array_equal(modular_matmul(big, np.array([[5], [7]]), q), modular_matmul_naive(big, [[5], [7]], q))


@pytest.mark.parametrize("n_in", [1, 784, 5000, 2**22])
def test_digit_width_keeps_sums_below_2_53_and_is_widest(n_in):
    """Rule: k is the widest digit width with n_in * (q-1)/2 * 2^(k-1) < 2^53 (capped at 31)."""
    q = PRIMES[0]
    k = digit_width(n_in, q)
    bound = n_in * ((q - 1) // 2)
    assert bound * 2 ** (k - 1) < 2**53
    assert k == 31 or bound * 2**k >= 2**53


def test_modular_matmul_refusals():
    with pytest.raises(ParameterError, match="q="):
        modular_matmul([[1]], [[1]], 2**31 + 11)
    with pytest.raises(ShapeError, match=r"\(out, in\) and \(in, cols\)"):
        modular_matmul(np.ones((2, 3), dtype=np.int64), np.ones((4, 1), dtype=np.int64), 65537)
    with pytest.raises(ParameterError, match=r"residues in \[0, q=65537\)"):
        modular_matmul([[1]], [[65537]], 65537)
    with pytest.raises(ParameterError, match="no room below 2"):
        digit_width(2**40, PRIMES[0])


# --- dense layers on ciphertexts ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy():
    return CKKSContext.keygen(CKKSParameters.preset("TOY"), seed=7)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1), st.floats(1e-3, 4.0),
       st.booleans())
def test_dense_layer_equals_the_library_multiply_accumulate(toy, n_out, n_in, level, seed, spread, paired):
    """Rule: the fast dense layer (one modular matrix product per limb) gives the very residues, level and scale
    of the naive twin (Evaluator.mul by each scalar weight, add, add the bias, rescale), at any level, and the
    same residues before the rescale; for complex (paired) inputs the bias is b (1 + i), as Evaluator.add of
    complex(b, b) encodes it."""
    rng = np.random.default_rng(seed)
    cts = [toy.encrypt(rng.uniform(-1, 1, 17) + (1j * rng.uniform(-1, 1, 17) if paired else 0), level=level)
           for _ in range(n_in)]
    weights = rng.normal(0, spread, (n_out, n_in))
    weights[0, 0] = 0.0
    bias = rng.normal(0, spread, n_out)
    fast, naive = dense_layer(cts, weights, bias), dense_layer_naive(cts, weights, bias)
    assert len(fast) == len(naive) == n_out
    products = zip(dense_layer(cts, weights, bias, rescale=False), dense_layer_naive(cts, weights, bias, rescale=False))
    q_top = toy.params.modulus_at(level) // toy.params.modulus_at(level - 1)
    for f, n in products:   # before the rescale, whose rounding could hide a difference in the low bits
        assert (f.level, f.scale) == (n.level, n.scale) == (level, cts[0].scale * float(q_top))
        for pf, pn in zip(f.parts, n.parts):
            assert np.array_equal(pf.data, pn.data)
    for f, n in zip(fast, naive):
        assert (f.level, f.scale, f.length) == (n.level, n.scale, n.length) == (level - 1, cts[0].scale, 17)
        for pf, pn in zip(f.parts, n.parts):
            assert np.array_equal(pf.data, pn.data)
    values = np.stack([toy.decrypt(ct) for ct in cts])
    expected = weights @ values + (bias * (1 + 1j) if paired else bias)[:, None]
    assert np.allclose(np.stack([toy.decrypt(ct) for ct in fast]), expected, atol=1e-6)


def test_dense_layer_refusals(toy):
    cts = [toy.encrypt([0.5, 0.25], level=2) for _ in range(3)]
    with pytest.raises(ShapeError, match="3 ciphertexts for weights of 2 inputs"):
        dense_layer(cts, np.ones((2, 2)))
    with pytest.raises(ShapeError, match=r"bias of shape \(3,\) must be \(2,\)"):
        dense_layer(cts, np.ones((2, 3)), np.ones(3))
    with pytest.raises(LevelError, match="minimum 1"):
        dense_layer([toy.encrypt([0.5], level=0)], np.ones((1, 1)))
    other = CKKSContext.keygen(CKKSParameters.preset("TOY"), seed=8)
    with pytest.raises(ContextMismatchError, match="another key set"):
        dense_layer(cts[:2] + [other.encrypt([0.5, 0.25], level=2)], np.ones((1, 3)))
    with pytest.raises(ParameterError, match="finite"):
        dense_layer(cts, np.full((1, 3), np.nan))


# --- the network: client, server ---------------------------------------------------------------------------------
def _mlp(rng, features=12, hidden=6, outputs=3, degree=2):
    return Sequential([Linear(rng.normal(0, 0.4, (hidden, features)), rng.normal(0, 0.1, hidden)),
                       Poly("relu", degree, (-3.0, 3.0)),
                       Linear(rng.normal(0, 0.4, (outputs, hidden)), rng.normal(0, 0.1, outputs))],
                      input_shape=(features,))


@pytest.fixture(scope="module")
def toy_network():
    rng = np.random.default_rng(1)
    model = _mlp(rng)
    packed = SamplePackedModel.from_sequential(model, params=CKKSParameters.preset("TOY"))
    client = SamplePackedClient(packed.spec, seed=3, allow_insecure=True)
    return model, packed, client, SamplePackedServer(packed, client.public_context())


def test_network_matches_the_float_model_to_24_bits(toy_network):
    """Rule: decrypt(evaluate(encrypt(x))) equals the model's float forward within 2^-24 (TOY: scale 2^50); the
    packed model's own plaintext forward is the model's; the keys hold no rotation key."""
    model, packed, client, server = toy_network
    x = np.random.default_rng(2).uniform(-1, 1, (40, 12))
    requests = client.encrypt(x)
    assert len(requests) == 1
    y = client.decrypt([server.evaluate(r) for r in requests])
    assert y.shape == (40, 3)
    assert np.max(np.abs(y - model.forward(x))) < 2.0**-24
    assert np.allclose(packed.forward(x), model.forward(x), atol=1e-12)
    assert packed.depth == 4 and packed.spec.level == 4 and (packed.features, packed.outputs) == (12, 3)
    public = CKKSContext.from_bytes(client.public_context())
    assert public.rotation_steps == () and not public.has_secret_key and not public.has_conjugation_key


def test_batch_beyond_the_slots_is_split_into_sets(toy_network, tmp_path):
    """Rule: a batch of more than N/2 samples becomes ceil(batch / (N/2)) requests, evaluated one by one (a request
    read from a file too), decrypted in order; one set alone refuses more than N/2 samples."""
    model, packed, client, server = toy_network
    x = np.random.default_rng(4).uniform(-0.5, 0.5, (client.slots + 5, 12))
    requests = client.encrypt(x)
    assert len(requests) == 2
    (tmp_path / "request-1.bin").write_bytes(requests[1])
    replies = [server.evaluate(requests[0]), server.evaluate(tmp_path / "request-1.bin")]
    y = client.decrypt(replies)
    assert y.shape == (client.slots + 5, 3)
    assert np.max(np.abs(y - model.forward(x))) < 2.0**-24
    with pytest.raises(ShapeError, match=rf"at most {client.slots} samples \(N/2\)"):
        next(client.encrypt_set(x))


def test_paired_sets_hold_two_samples_per_slot(toy_network):
    """Rule: with pairs=True a batch of up to N samples is one request of complex ciphertexts (samples L + s in
    the imaginary parts, one zero sample padding an odd batch), evaluated with a conjugation per activation, and
    decrypts to the model's outputs within 2^-24; without ``count`` the padding row comes back last; a batch of
    at most N/2 stays unpaired; a server without the conjugation key refuses a paired request."""
    model, packed, _, plain_server = toy_network
    client = SamplePackedClient(packed.spec, seed=5, pairs=True, allow_insecure=True)
    assert client.pairs and client.set_size == 2 * client.slots
    server = SamplePackedServer(packed, client.public_context())
    x = np.random.default_rng(7).uniform(-0.5, 0.5, (client.slots + 7, 12))
    requests = client.encrypt(x)
    assert len(requests) == 1
    reply = server.evaluate(requests[0])
    y = client.decrypt(reply, count=len(x))
    assert y.shape == (len(x), 3) and np.max(np.abs(y - model.forward(x))) < 2.0**-24
    padded = client.decrypt(reply)
    assert len(padded) == len(x) + 1 and np.allclose(padded[:-1], y)
    small = x[:10]
    assert np.max(np.abs(client.decrypt(server.evaluate(client.encrypt(small)[0])) - model.forward(small))) < 2.0**-24
    with pytest.raises(KeyMissingError, match="conjugation key"):
        SamplePackedServer(packed, _without_conjugation(client)).evaluate(requests[0])
    with pytest.raises(ShapeError, match="count=5"):
        client.decrypt(reply, count=5)


def _without_conjugation(client):
    """The client's public and relinearization keys without the conjugation key."""
    ctx = CKKSContext.from_bytes(client.public_context())
    return CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.relin_key_bytes())


def test_client_file_and_spec_round_trip(toy_network, tmp_path):
    """Rule: the spec survives JSON; the saved client (mode 0600) decrypts what the first one's requests give."""
    model, packed, client, server = toy_network
    spec = SamplePackedSpec.from_dict(json.loads(json.dumps(packed.spec.to_dict())))
    assert spec == packed.spec
    client.save(tmp_path / "client.bin")
    assert stat.S_IMODE(os.stat(tmp_path / "client.bin").st_mode) == 0o600
    again = SamplePackedClient.load(tmp_path / "client.bin", spec)
    x = np.random.default_rng(5).uniform(-1, 1, (3, 12))
    assert np.allclose(again.decrypt(server.evaluate(client.encrypt(x)[0])), model.forward(x), atol=2.0**-24)
    with pytest.raises(ParameterError, match="samples-per-slot"):
        SamplePackedSpec.from_dict({"params": {}})



def test_client_file_replaces_a_link_and_never_writes_through_it(toy_network, tmp_path):
    """Rule: saving the secret client over a symbolic link replaces the link; the file it pointed to (readable by
    others) keeps its bytes, so a planted link cannot make the secret key land in a world-readable file."""
    client = toy_network[2]
    target = tmp_path / "public.txt"
    target.write_bytes(b"not a key")
    target.chmod(0o644)
    (tmp_path / "client.bin").symlink_to(target)
    client.save(tmp_path / "client.bin")
    assert target.read_bytes() == b"not a key"
    assert not (tmp_path / "client.bin").is_symlink()
    assert stat.S_IMODE(os.stat(tmp_path / "client.bin").st_mode) == 0o600


def test_calibrated_ranges_right_or_refused(toy_network):
    """Rule: the spec carries the model's calibrated input range and the output range of its stages; the client
    refuses (or clips) inputs outside the input range before encrypting, and refuses a decrypted set whose sample
    left the output range, naming the sample and marking its whole set untrusted (one wrapped polynomial
    corrupts every slot); the ranges survive the spec's JSON."""
    model, packed, client, server = toy_network
    assert packed.spec.input_range is None and packed.spec.output_range is not None
    calibrated = SamplePackedModel(packed.stages, packed.features, packed.params, input_range=(-1.0, 1.0))
    spec = SamplePackedSpec.from_dict(json.loads(json.dumps(calibrated.spec.to_dict())))
    assert spec == calibrated.spec and spec.input_range == (-1.0, 1.0)
    ranged = SamplePackedClient(spec, context=client.context)
    x = np.random.default_rng(8).uniform(-1, 1, (5, 12))
    x[3, 4] = 1.5
    with pytest.raises(ParameterError, match=r"samples \[3\].*input range \[-1, 1\]"):
        ranged.encrypt(x)
    with pytest.raises(ParameterError, match="input range"):
        ranged.encrypt_set(x)  # refused before the first ciphertext is asked for
    clipped = ranged.decrypt(server.evaluate(ranged.encrypt(x, clip=True)[0]))
    assert np.allclose(clipped, model.forward(np.clip(x, -1, 1)), atol=2.0**-24)
    # without an input range, a sample far outside the activation's interval comes back refused
    far = np.random.default_rng(9).uniform(-1, 1, (4, 12))
    far[2] = 40.0
    with pytest.raises(OutputRangeError) as refused:
        client.decrypt(server.evaluate(client.encrypt(far)[0]))
    assert refused.value.invalid == (2,) and refused.value.untrusted == (0, 1, 2, 3)
    with pytest.raises(ParameterError, match="output_range"):
        SamplePackedSpec(packed.params, packed.spec.level, 12, 3, output_range=((0.0,), (1.0,)))
    for fields in ({"features": 0}, {"outputs": -1}, {"level": packed.params.max_level + 1}, {"level": -1}):
        record = {**packed.spec.to_dict(), **fields}
        with pytest.raises(ParameterError, match=next(iter(fields))):
            SamplePackedSpec.from_dict(record)


def test_keys_below_128_bits_need_the_opt_in(toy_network):
    """Rule: the spec (the server's) naming parameters below 128 bits makes no keys unless allow_insecure=True."""
    packed = toy_network[1]
    with pytest.raises(ParameterError, match="not 128-bit secure.*allow_insecure=True"):
        SamplePackedClient(packed.spec)

def test_requests_and_keys_refused(toy_network):
    """Rule: a request of the wrong length, truncated, or under another key set, a server keyed for other
    parameters, an input of the wrong shape, a model with a residual block or too deep for the parameters are
    refused with the limit named."""
    model, packed, client, server = toy_network
    x = np.random.default_rng(6).uniform(-1, 1, (4, 12))
    records = list(client.encrypt_set(x))
    with pytest.raises(ShapeError, match="holds 11 ciphertexts; the model takes 12"):
        server.evaluate(b"".join(records[:11]))
    with pytest.raises(ShapeError, match="more than 12 ciphertexts"):
        server.evaluate(b"".join(records + records[:1]))
    with pytest.raises(SerializationError, match="truncated"):
        server.evaluate(b"".join(records)[:-100])
    stranger = SamplePackedClient(packed.spec, seed=9, allow_insecure=True)
    with pytest.raises(ContextMismatchError):
        server.evaluate(stranger.encrypt(x)[0])
    with pytest.raises(ContextMismatchError, match="parameters"):
        SamplePackedServer(packed, CKKSContext.keygen(CKKSParameters.preset("N13"), seed=1).public_context())
    with pytest.raises(ShapeError, match=r"\(batch >= 1, 12\)"):
        client.encrypt(np.zeros((4, 11)))
    with pytest.raises(ShapeError, match=r"\(batch >= 1, 12\)"):
        client.encrypt(np.zeros((0, 12)))
    deep = _mlp(np.random.default_rng(0), degree=4)
    with pytest.raises(LevelError, match="needs 5 levels"):
        SamplePackedModel.from_sequential(deep, params=CKKSParameters.preset("TOY"))
    from tensor_ops.nn import Residual
    residual = Sequential([Linear(np.eye(4), np.zeros(4)), Residual([Square()])], input_shape=(4,))
    with pytest.raises(ParameterError, match="no residual blocks"):
        SamplePackedModel.from_sequential(residual, params=CKKSParameters.preset("TOY"))


@pytest.mark.slow
def test_128_bit_network_on_a_full_set():
    """Rule: at the default 128-bit parameters (choose_parameters(depth): N = 2^14 for two degree-4 ReLUs) a set
    of N/2 samples of a 64-32-16-10 network matches the float model within 2^-6 absolute (logits of size ~10:
    about 10 bits relative); the keys are the public and relinearization keys only (under 10 MB)."""
    rng = np.random.default_rng(11)
    model = Sequential([Linear(rng.normal(0, 0.05, (32, 64)), np.zeros(32)), Poly("relu", 4, (-4.0, 4.0)),
                        Linear(rng.normal(0, 0.3, (16, 32)), np.zeros(16)), Poly("relu", 4, (-4.0, 4.0)),
                        Linear(rng.normal(0, 0.5, (10, 16)), np.zeros(10))], input_shape=(64,))
    packed = SamplePackedModel.from_sequential(model)
    assert packed.params.security_bits >= 128 and packed.params.n == 2**14 and packed.depth == 9
    client = SamplePackedClient(packed.spec)
    keys = client.public_context()
    assert len(keys) < 10 * 2**20
    x = rng.uniform(-1, 1, (client.slots, 64))
    y = client.decrypt(SamplePackedServer(packed, keys).evaluate(client.encrypt(x)[0]))
    assert np.max(np.abs(y - model.forward(x))) < 2.0**-6
