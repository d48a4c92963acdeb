"""Pickling through versioned bytes (issue 15): parameters, public contexts, ciphertexts, CipherTensors, model
plans, models, commitments and proofs cross process boundaries (Dask, multiprocessing, concurrent.futures) as
their records; a context holding the secret key and a zero-knowledge prover refuse to pickle."""
import gc
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensor_ops
from crypto import CKKSContext, CKKSParameters
from crypto.errors import KeyMissingError, SerializationError
from crypto.rlwe import Ciphertext
from proofs.errors import ModelError, ProofError
from proofs.layers.network import Network, verify_network
from proofs.layers.spec import Linear as ProofLinear, ReLU
from tensor_ops.nn import Linear, Sequential, Square
from tensor_ops.tensor import CipherTensor
from tensor_ops.tensor_base import DetachedBackend


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


@pytest.fixture(scope="module")
def toy():
    return CKKSParameters.preset("TOY")


@pytest.fixture(scope="module")
def ctx(toy):
    return CKKSContext.keygen(toy, rotations=[1, 2, 4, 8, 16, 32, -1], seed=7)


@pytest.fixture(scope="module")
def public(ctx):
    return ctx.public_context()


@pytest.mark.parametrize("name", ["TOY", "N13"])
def test_parameters_roundtrip(name):
    params = CKKSParameters.preset(name)
    blob = pickle.dumps(params)
    assert params.to_bytes() in blob                     # the versioned record travels, nothing else of weight
    back = pickle.loads(blob)
    assert back == params and back.fingerprint == params.fingerprint


def test_secret_context_refuses_to_pickle(ctx):
    with pytest.raises(SerializationError, match=r"to_bytes\(include_secret_key=True\)"):
        pickle.dumps(ctx)
    # the explicit path: the full record, sent as bytes, brings the secret key back
    full = CKKSContext.from_bytes(roundtrip(ctx.to_bytes(include_secret_key=True)))
    assert full.has_secret_key and full.key_id == ctx.key_id


def test_public_context_roundtrip(ctx, public):
    back = roundtrip(public)
    assert not back.has_secret_key and back.key_id == ctx.key_id
    assert back.rotation_steps == public.rotation_steps
    x = np.linspace(-1, 1, 16)
    np.testing.assert_allclose(ctx.decrypt(back.encrypt(x)), x, atol=1e-6)


def test_ciphertext_attaches_to_a_live_public_context(ctx, public):
    x = np.arange(8.0)
    ct = ctx.encrypt(x)
    blob = pickle.dumps(ct)
    assert len(blob) < len(ct.to_bytes()) + 2048         # no keys inside (the evaluator stays behind)
    back = pickle.loads(blob)
    assert back.to_bytes() == ct.to_bytes()
    assert back.evaluator is public.evaluator
    np.testing.assert_allclose(ctx.decrypt(back + back), 2 * x, atol=1e-6)


def test_ciphertext_detached_without_a_public_context(toy):
    lone = CKKSContext.keygen(toy)      # fresh OS-random keys: no public context of this key set lives anywhere
    gc.collect()
    x = np.linspace(-2, 2, 8)
    back = roundtrip(lone.encrypt(x))
    assert back.evaluator is None
    np.testing.assert_allclose(lone.decrypt(back), x, atol=1e-6)
    np.testing.assert_allclose(lone.decrypt(roundtrip(back)), x, atol=1e-6)     # a detached one pickles too
    with pytest.raises(KeyMissingError):
        back + back
    attached = Ciphertext.from_bytes(back.to_bytes(), lone.public_context())
    np.testing.assert_allclose(lone.decrypt(attached + attached), 2 * x, atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_cipher_tensor_roundtrip(ctx, public, shape, seed):
    a = np.random.default_rng(seed).uniform(-1, 1, shape)
    t = tensor_ops.encrypt(ctx, a)
    back = roundtrip(t)
    assert isinstance(back, CipherTensor) and back.shape == t.shape and back.layout == t.layout
    assert back.to_bytes() == t.to_bytes()
    np.testing.assert_array_equal(back.decrypt(ctx), t.decrypt(ctx))
    np.testing.assert_allclose((back + 1.0).decrypt(ctx), a + 1.0, atol=1e-5)   # computes: keys found here


def test_cipher_tensor_detached(toy):
    lone = CKKSContext.keygen(toy, seed=5)
    gc.collect()
    a = np.arange(6.0).reshape(2, 3)
    back = roundtrip(tensor_ops.encrypt(lone, a))
    assert isinstance(back.backend, DetachedBackend)
    np.testing.assert_allclose(back.decrypt(lone), a, atol=1e-6)
    with pytest.raises(KeyMissingError, match="unpickle"):
        back.decrypt()
    with pytest.raises(KeyMissingError):
        back + back
    np.testing.assert_allclose(roundtrip(back).decrypt(lone), a, atol=1e-6)


def test_plain_cipher_tensor_roundtrip(toy):
    from tensor_ops.backends import PlainBackend
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(roundtrip(tensor_ops.encrypt(PlainBackend(toy.slots), a)).decrypt(), a)


def test_model_and_plan_roundtrip():
    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(size=(8, 16)), rng.normal(size=8)), Square(),
                        Linear(rng.normal(size=(3, 8)), rng.normal(size=3))], input_shape=(16,))
    back = roundtrip(model)
    assert back.identity() == model.identity()
    x = rng.uniform(-1, 1, (2, 16))
    np.testing.assert_array_equal(back.forward(x), model.forward(x))
    plan = model.plan(params="TOY")
    assert roundtrip(plan) == plan and roundtrip(plan).to_dict() == plan.to_dict()


@pytest.fixture(scope="module")
def proof_layers():
    rng = np.random.default_rng(1)
    return [ProofLinear(rng.normal(0, .3, (8, 16)), rng.normal(0, .1, 8)), ReLU(),
            ProofLinear(rng.normal(0, .3, (4, 8)), rng.normal(0, .1, 4))]


def test_commitments_and_proofs_roundtrip(proof_layers):
    x = np.random.default_rng(2).uniform(-1, 1, (2, 16))
    for net in (Network(proof_layers, max_proofs=2), Network(proof_layers, zk=False)):
        proof = net.prove(x)
        commitment, back = roundtrip(net.commitment), roundtrip(proof)
        assert type(back) is type(proof) and back.to_bytes() == proof.to_bytes()
        assert commitment.to_bytes() == net.commitment.to_bytes()
        np.testing.assert_array_equal(verify_network(commitment, x, back), proof.output)
        assert pickle.dumps(proof).count(proof.to_bytes()) == 1


def test_zk_prover_refuses_to_pickle_and_moves_as_explicit_state(proof_layers):
    net = Network(proof_layers, max_proofs=3)
    with pytest.raises(ModelError, match=r"state_bytes\(\)"):
        pickle.dumps(net)
    worker = Network(net.model, state=roundtrip(net.state_bytes()))
    x = np.random.default_rng(3).uniform(-1, 1, (1, 16))
    proof = worker.prove(x, copy=2)
    assert proof.relations.copy == 2
    net.verify(x, proof)
    with pytest.raises(ProofError, match="copy=2"):
        worker.prove(x, copy=2)                          # a copy serves one proof only
    with pytest.raises(ProofError, match="copy=3"):
        worker.prove(x, copy=3)
    assert pickle.loads(pickle.dumps(Network(proof_layers, zk=False))).commitment.to_bytes()


def _double(public_context, ct):
    """In another process: the ciphertext arrives after a public context of its key set, so it attaches to one."""
    assert ct.evaluator is not None and ct.evaluator.key_id == public_context.key_id
    return ct + ct


def test_process_pool_and_threads(ctx, public):
    import concurrent.futures
    import multiprocessing
    x = np.linspace(-1, 1, 8)
    ct = ctx.encrypt(x)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        doubled = pool.submit(_double, public, ct).result()
    assert doubled.evaluator is not None                          # back here: attached to a live public context
    np.testing.assert_allclose(ctx.decrypt(doubled), 2 * x, atol=1e-6)
    blob = pickle.dumps(ct)
    with concurrent.futures.ThreadPoolExecutor(4) as threads:    # the key-set index under concurrent unpickling
        back = list(threads.map(lambda _: pickle.loads(blob), range(16)))
    assert all(b.evaluator is not None and b.to_bytes() == ct.to_bytes() for b in back)


@pytest.mark.parametrize("which", ["cnn", "batchnorm"])
def test_onnx_lowered_model_roundtrip(tmp_path, which):
    """A Sequential lowered from ONNX (conv, pool, folded BatchNormalization, GraphNode affine nodes) has no byte
    form of its own: it pickles by default pickling, to the same forward, identity, digest and plan; the plan
    travels as its versioned public description (to_dict; ModelPlan has no binary record)."""
    import onnx
    from tests.model.onnx_models import batchnorm_model
    from tests.tensor_ops.test_onnx_encrypted import tiny_cnn
    onnx.save(tiny_cnn() if which == "cnn" else batchnorm_model(), tmp_path / "m.onnx")
    model = Sequential.load(tmp_path / "m.onnx")
    plan = model.plan()
    back = roundtrip(model)
    assert back.digest == model.digest and back.identity() == model.identity()
    x = np.random.default_rng(4).uniform(-1, 1, (2, *model.input_shape))
    np.testing.assert_array_equal(back.forward(x), model.forward(x))
    assert "_plans" not in vars(back)                                    # memoised plans stay behind
    assert roundtrip(plan) == plan and roundtrip(plan).layout == plan.layout
    assert back.plan(params=plan.params).to_dict() == plan.to_dict()
