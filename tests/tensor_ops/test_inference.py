"""Client/server split with the real CKKS scheme: results equal the plaintext model; bad input refused."""
import numpy as np
import pytest

from crypto import CKKSContext
from crypto.errors import ContextMismatchError, KeyMissingError, LevelError, ParameterError, SerializationError, ShapeError
from tensor_ops.inference import Client, Server, pack_message, unpack_message
from tensor_ops.nn import AvgPool2d, BatchNorm, Conv2d, Flatten, Linear, Poly, Sequential, Square


def assert_precise(y, reference, params) -> None:
    """|y - reference| <= 2^-(log_scale - 16) max(1, |reference|_inf): the plan's scale 2^log_scale less 16 bits of
    noise (each rescale rounds with noise ~ sqrt(N h / 12) ~ 2^8.5 units of 2^-log_scale for N = 2^13, which
    the layers amplify). Measured: 2^-14.7 (3.8e-5) on the 6-input model, 1.3e-4 with 40 inputs and outputs ~12."""
    reference = np.asarray(reference)
    bound = 2.0 ** -(params.log_scale - 16) * max(1.0, float(np.abs(reference).max()))
    np.testing.assert_allclose(y, reference, rtol=0, atol=bound)


def _request(client, cts, **header):
    fields = {"key_id": client.key_id.hex(), "samples": 1, "single": True,
              "sample_shape": list(client.plan.input_shape), "block": client.plan.block}
    return pack_message("request", dict(fields, **header), cts)


def _model(seed=0, activation=None, n_in=6):
    rng = np.random.default_rng(seed)
    return Sequential([Linear(rng.normal(0, 0.5, (5, n_in)), rng.normal(0, 0.5, 5)), activation or Square(),
                       Linear(rng.normal(0, 0.5, (3, 5)), rng.normal(0, 0.5, 3))], input_shape=(n_in,))


@pytest.fixture(scope="module")
def setup():
    model = _model()
    client = Client(model=model, seed=11)
    server = Server(model, client.public_context())
    return model, client, server


def test_encrypted_batch_equals_plaintext(setup):
    model, client, server = setup
    x = np.random.default_rng(1).uniform(-1, 1, (40, 6))
    y = client.decrypt(server.evaluate(client.encrypt(x)))
    assert_precise(y, model.forward(x), client.plan.params)
    assert y.shape == (40, 3)


def test_single_sample_keeps_its_shape(setup):
    model, client, server = setup
    x = np.linspace(-1, 1, 6)
    y = client.decrypt(server.evaluate(client.encrypt(x)))
    assert y.shape == (3,)
    assert_precise(y, model.forward(x), client.plan.params)


def test_many_ciphertexts_when_the_batch_overflows():
    model = _model(2, n_in=40)
    client = Client(model=model, seed=3)
    plan = client.plan
    small = Client(plan=plan.__class__(plan.params, plan.input_shape, plan.output_shape, plan.params.slots // 2,
                                       plan.stages), seed=3)
    x = np.random.default_rng(4).uniform(-1, 1, (5, 40))
    request = small.encrypt(x)
    header, blobs = unpack_message(request, "request")
    assert len(blobs) == 3 and header["samples"] == 5
    server = Server(model, client.public_context())
    assert_precise(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x), client.plan.params)


def test_polynomial_activation_model():
    model = _model(5, Poly("silu", 3, (-4, 4)))
    client = Client(model=model, seed=6)
    server = Server(model, client.public_context())
    x = np.random.default_rng(7).uniform(-1, 1, (8, 6))
    assert_precise(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x), client.plan.params)


def test_public_context_holds_only_public_keys_of_the_plan(setup):
    model, client, _ = setup
    context = CKKSContext.from_bytes(client.public_context())
    assert not context.has_secret_key
    assert tuple(context.rotation_steps) == client.plan.rotations
    report = client.key_report()
    assert report["public_context_bytes"] == len(client.public_context()) == client.key_bytes
    assert report["rotation_keys"] == len(client.plan.rotations)


def test_context_from_another_key_is_refused(setup):
    model, client, _ = setup
    other = Client(model=model, seed=12)
    server = Server(model, other.public_context())
    with pytest.raises(ContextMismatchError, match="key set"):
        server.evaluate(client.encrypt(np.zeros(6)))
    with pytest.raises(ContextMismatchError):
        other.decrypt(setup[2].evaluate(client.encrypt(np.zeros(6))))


def test_forged_header_with_foreign_ciphertext_is_refused(setup):
    model, client, server = setup
    other = Client(model=model, seed=13)
    ct = other._context.encrypt(other.plan.pack(np.zeros(6))[0], level=other.plan.input_level)
    forged = _request(client, [ct])
    with pytest.raises(ContextMismatchError):
        server.evaluate(forged)


def test_wrong_level_is_refused(setup):
    model, client, server = setup
    ct = client._context.encrypt(client.plan.pack(np.zeros(6))[0], level=client.plan.input_level - 1)
    request = _request(client, [ct])
    with pytest.raises(LevelError, match="level=2"):
        server.evaluate(request)


def test_wrong_shape_is_refused(setup):
    _, client, _ = setup
    with pytest.raises(ShapeError, match=r"\(6,\)"):
        client.encrypt(np.zeros((2, 7)))


@pytest.mark.parametrize("blob", [b"", b"garbage" * 10, b"HEZKINF1\xff\xff\xff\xff",
                                  b"HEZKINF1\x02\x00\x00\x00{}"])
def test_garbage_is_refused(setup, blob):
    with pytest.raises(SerializationError):
        setup[2].evaluate(blob)


def test_truncated_and_padded_requests_are_refused(setup):
    _, client, server = setup
    request = client.encrypt(np.zeros(6))
    with pytest.raises(SerializationError, match="truncated"):
        server.evaluate(request[:-10])
    with pytest.raises(SerializationError, match="padded"):
        server.evaluate(request + b"\x00")


def test_corrupted_ciphertext_is_refused(setup):
    _, client, server = setup
    request = bytearray(client.encrypt(np.zeros(6)))
    request[-100] ^= 0xFF
    with pytest.raises(SerializationError):
        server.evaluate(bytes(request))


def test_too_many_ciphertexts_are_refused(setup):
    model, client, _ = setup
    server = Server(model, client.public_context(), max_ciphertexts=1)
    ct = client._context.encrypt(np.zeros(8), level=client.plan.input_level)
    request = _request(client, [ct, ct])
    with pytest.raises(SerializationError, match=r"\[1, 1\]"):
        server.evaluate(request)


def test_server_refuses_a_context_without_the_needed_keys():
    keyless = Client(model=Sequential([Linear(np.full((1, 1), 2.0))]), seed=9)
    assert keyless.key_report()["rotation_keys"] == 0
    wide = Sequential([Linear(np.random.default_rng(8).normal(size=(40, 40)))])
    with pytest.raises(KeyMissingError, match="rotations"):
        Server(wide, keyless.public_context())


def test_client_needs_params_or_a_plan():
    with pytest.raises(ParameterError, match="params"):
        Client()


def test_params_only_client_with_power_of_two_keys(setup):
    model, planned, _ = setup
    client = Client(planned.plan.params, seed=14)
    assert client.plan is None and len(client.key_report()["rotations"]) == planned.plan.params.log_n - 1
    server = Server(model, client.public_context())
    x = np.random.default_rng(15).uniform(-1, 1, (3, 6))
    request = client.encrypt(x)
    assert len(unpack_message(request, "request")[1]) == 3  # one sample per ciphertext, model unknown
    assert_precise(client.decrypt(server.evaluate(request)), model.forward(x), planned.plan.params)
    with pytest.raises(ShapeError, match=r"\(7,\)"):
        server.evaluate(client.encrypt(np.zeros(7)))


def test_header_lies_are_refused(setup):
    _, client, server = setup
    ct = client._context.encrypt(np.zeros(8), level=client.plan.input_level)
    for header in ({"block": 3}, {"samples": 10**6}, {"sample_shape": [6, 0]}, {"block": 1}):
        with pytest.raises((SerializationError, ShapeError)):
            server.evaluate(_request(client, [ct], **header))


def test_saved_client_decrypts(setup, tmp_path):
    model, client, server = setup
    client.save(tmp_path / "client.key")
    loaded = Client.load(tmp_path / "client.key")
    x = np.full(6, 0.5)
    assert_precise(loaded.decrypt(server.evaluate(loaded.encrypt(x))), model.forward(x), client.plan.params)
    (tmp_path / "bad.key").write_bytes(b"nope")
    with pytest.raises(SerializationError):
        Client.load(tmp_path / "bad.key")


def test_cnn_with_batchnorm_and_stride_on_toy_parameters():
    rng = np.random.default_rng(16)
    model = Sequential([Conv2d(rng.normal(0, 0.5, (2, 1, 3, 3)), rng.normal(0, 0.1, 2), stride=2, padding=1),
                        BatchNorm(rng.uniform(0.5, 1.5, 2), rng.normal(0, 0.1, 2), rng.normal(0, 0.1, 2),
                                  rng.uniform(0.5, 1.5, 2)),
                        AvgPool2d(2), Poly("gelu", 3, (-3, 3)), Flatten(), Linear(rng.normal(0, 0.5, (3, 8)))],
                       input_shape=(1, 8, 8))
    client = Client(plan=model.plan(params="TOY"), seed=17, allow_insecure=True)
    server = Server(model, client.public_context())
    x = rng.uniform(0, 1, (5, 1, 8, 8))
    np.testing.assert_allclose(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x), atol=1e-6)


def test_params_only_client_with_an_image_model():
    rng = np.random.default_rng(18)
    model = Sequential([Conv2d(rng.normal(0, 0.5, (2, 1, 3, 3)), padding=1), AvgPool2d(2), Square(), Flatten(),
                        Linear(rng.normal(0, 0.5, (3, 8)))], input_shape=(1, 4, 4))
    client = Client("TOY", seed=19)
    server = Server(model, client.public_context())
    image = rng.uniform(0, 1, (1, 4, 4))
    single = client.decrypt(server.evaluate(client.encrypt(image)))   # sent as one (4, 4) sample
    assert single.shape == (3,)
    np.testing.assert_allclose(single, model.forward(image), atol=1e-6)
    batch = client.decrypt(server.evaluate(client.encrypt(image[None].repeat(2, axis=0))))
    np.testing.assert_allclose(batch, model.forward(image[None].repeat(2, axis=0)), atol=1e-6)
    with pytest.raises(ShapeError, match=r"\(1, 4, 4\)"):
        server.evaluate(client.encrypt(np.zeros((2, 3, 5))))


def test_forward_on_cipher_tensors_with_real_ckks():
    import tensor_ops

    model = _model(20)
    context = CKKSContext.keygen("TOY", rotations=model.tensor_rotations(batch=4, params="TOY"), seed=21)
    x = np.random.default_rng(22).uniform(-1, 1, (4, 6))
    y = model(tensor_ops.encrypt(context, x))
    np.testing.assert_allclose(y.decrypt(context), model.forward(x), atol=1e-6)


def test_servers_of_two_clients_share_the_encoded_weights(setup):
    model, client, _ = setup
    other = Client(model=model, seed=23)
    shared = {}
    first, second = (Server(model, c.public_context(), encoded=shared) for c in (client, other))
    x = np.random.default_rng(24).uniform(-1, 1, (2, 6))
    assert_precise(client.decrypt(first.evaluate(client.encrypt(x))), model.forward(x), client.plan.params)
    filled = len(shared)
    assert_precise(other.decrypt(second.evaluate(other.encrypt(x))), model.forward(x), other.plan.params)
    assert filled > 0 and len(shared) == filled
