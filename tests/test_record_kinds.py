"""One container for every record (issue 16, item 4): every record kind of every package round-trips; a record
of one kind given where another is expected gives the engine's own error naming both kinds (every pair);
truncations and bit flips give only the library's errors (the checksum catches flips)."""
import numpy as np
import pytest

import hezk.record
from crypto import CKKSContext, CKKSParameters
from crypto.errors import HEError, SerializationError
from crypto.rlwe import Ciphertext, Plaintext
from proofs.errors import ModelError, ProofError, ProofRejected
from proofs.layers import prover_state
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.layers.network import ModelCommitment, Network, NetworkProof, read_proof
from proofs.layers.network_zk import HidingNetworkProof
from proofs.layers.reusable import Reusable
from proofs.layers.graph import GraphCommitment, GraphNetwork, GraphProof
from proofs.layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, HidingGraphProof
from proofs.graph_quantize import quantize_graph
from hezk.model import Contraction, Graph
from proofs.quantize import quantize_fixed_point, quantize_input
from tensor_ops.inference import Client, Server, unpack_message
from tensor_ops.nn import Linear, Sequential, Square
from tensor_ops.tensor import CipherTensor, encrypt as encrypt_tensor


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """kind -> valid bytes of that kind, made by each package's own writer; plus the loaders' context."""
    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(0, .5, (2, 4)), np.zeros(2)), Square()], input_shape=(4,))
    client = Client(model=model, seed=1)
    server = Server(model, client.public_context())
    ctx = client._context
    request = client.encrypt(np.zeros((2, 4)))
    path = tmp_path_factory.mktemp("records")
    client.save(path / "client.key")
    quantized = quantize_fixed_point([rng.normal(0, .4, (3, 4))], [np.zeros(3)], frac_bits=5)
    x = quantize_input(quantized, rng.uniform(-1, 1, (1, 4)))
    plain, hiding = Network(quantized, zk=False), Network(quantized, zk=True, max_proofs=1)
    hiding.save_state(path / "c.state")
    hiding_proof = hiding.prove(x)
    spec = T.TrainingSpec((2, 2), batch=1, act_bits=4, weight_bits=4, shift=2, grad_shift=2, grad_bits=6,
                          lr_shift=2, update_bits=6)
    trace = T.training_trace([rng.integers(-3, 3, (2, 2))], rng.integers(-3, 3, (1, 2)), rng.integers(-3, 3, (1, 2)),
                             spec)
    training = S.prove_training_step(trace, S.commit_step(trace, zk=False, seed=1), zk=False)
    quantized_graph = quantize_graph(Graph("x", (16,), (Contraction("fc", "Gemm", ("x",), "y", "bk,nk->bn",
                                                                    rng.normal(size=(3, 16)), None, None, (3,)),),
                                           "y"), rng.normal(size=(2, 16)))
    graph, hiding_graph = GraphNetwork(quantized_graph), HidingGraphNetwork(quantized_graph, max_proofs=1)
    blobs = {
        "crypto.Parameters": ctx.params.to_bytes(),
        "crypto.Plaintext": ctx.encode([1.0]).to_bytes(),
        "crypto.Ciphertext": ctx.encrypt([1.0]).to_bytes(),
        "crypto.PublicKey": ctx.public_key_bytes(),
        "crypto.RelinKey": ctx.relin_key_bytes(),
        "crypto.GaloisKeys": ctx.galois_keys_bytes(),
        "crypto.PublicContext": client.public_context(),
        "crypto.SecretKey": ctx.secret_key_bytes(),
        "crypto.FullContext": ctx.to_bytes(include_secret_key=True),
        "tensor_ops.Request": request,
        "tensor_ops.Reply": server.evaluate(request),
        "tensor_ops.CipherTensor": encrypt_tensor(ctx, np.arange(3.0)).to_bytes(),
        "tensor_ops.Client": (path / "client.key").read_bytes(),
        "proofs.ModelCommitment": plain.commitment.to_bytes(),
        "proofs.NetworkProof": plain.prove(x).to_bytes(),
        "proofs.HidingNetworkProof": hiding_proof.to_bytes(),
        "proofs.ProverState": (path / "c.state").read_bytes(),
        "proofs.Reusable": hiding.commitment.weights.to_bytes(),
        "proofs.TrainingProof": training.to_bytes(),
        "proofs.GraphCommitment": graph.commitment.to_bytes(),
        "proofs.GraphProof": graph.prove(np.zeros((1, 16))).to_bytes(),
        "proofs.HidingGraphCommitment": hiding_graph.commitment.to_bytes(),
        "proofs.HidingGraphProof": hiding_graph.prove(np.zeros((1, 16))).to_bytes(),
    }
    return blobs, ctx, path


def _loaders(ctx, path):
    """kind -> (the kinds it accepts, a function loading bytes as that kind, the engine's error types)."""
    def client_load(blob):
        (path / "any.bin").write_bytes(blob)
        return Client.load(path / "any.bin")

    crypto, proofs, model = (HEError,), (ProofRejected,), (ModelError,)
    contexts = ("crypto.PublicContext", "crypto.FullContext")
    return {
        "crypto.Parameters": (("crypto.Parameters",), CKKSParameters.from_bytes, crypto),
        "crypto.Plaintext": (("crypto.Plaintext",), lambda b: Plaintext.from_bytes(b, ctx), crypto),
        "crypto.Ciphertext": (("crypto.Ciphertext",), lambda b: Ciphertext.from_bytes(b, ctx), crypto),
        "crypto.PublicKey": (("crypto.PublicKey",), lambda b: CKKSContext.from_key_bytes(b, ctx.relin_key_bytes()),
                             crypto),
        "crypto.RelinKey": (("crypto.RelinKey",), lambda b: CKKSContext.from_key_bytes(ctx.public_key_bytes(), b),
                            crypto),
        "crypto.GaloisKeys": (("crypto.GaloisKeys",), lambda b: CKKSContext.from_key_bytes(
            ctx.public_key_bytes(), ctx.relin_key_bytes(), b), crypto),
        "crypto.PublicContext": (contexts, CKKSContext.from_bytes, crypto),
        "crypto.SecretKey": (("crypto.SecretKey",), lambda b: CKKSContext.from_bytes(
            ctx.public_context().to_bytes(), secret_key=b), crypto),
        "tensor_ops.Request": (("tensor_ops.Request",), lambda b: unpack_message(b, "request"), crypto),
        "tensor_ops.Reply": (("tensor_ops.Reply",), lambda b: unpack_message(b, "reply"), crypto),
        "tensor_ops.CipherTensor": (("tensor_ops.CipherTensor",), lambda b: CipherTensor.from_bytes(b, ctx), crypto),
        "tensor_ops.Client": (("tensor_ops.Client",), client_load, crypto),
        "proofs.ModelCommitment": (("proofs.ModelCommitment",), ModelCommitment.from_bytes, proofs),
        "proofs.NetworkProof": (("proofs.NetworkProof",), NetworkProof.from_bytes, proofs),
        "proofs.HidingNetworkProof": (("proofs.HidingNetworkProof",), HidingNetworkProof.from_bytes, proofs),
        "proofs.proof file": (("proofs.NetworkProof", "proofs.HidingNetworkProof"), read_proof, proofs),
        "proofs.ProverState": (("proofs.ProverState",), lambda b: prover_state._from_record(b, "state"), model),
        "proofs.Reusable": (("proofs.Reusable",), Reusable.from_bytes, proofs),
        "proofs.TrainingProof": (("proofs.TrainingProof",), S.TrainingProof.from_bytes, proofs),
        "proofs.GraphCommitment": (("proofs.GraphCommitment",), GraphCommitment.from_bytes, proofs),
        "proofs.GraphProof": (("proofs.GraphProof",), GraphProof.from_bytes, proofs),
        "proofs.HidingGraphCommitment": (("proofs.HidingGraphCommitment",), HidingGraphCommitment.from_bytes, proofs),
        "proofs.HidingGraphProof": (("proofs.HidingGraphProof",), HidingGraphProof.from_bytes, proofs),
    }


LOADERS = sorted(_loaders(None, None))


def test_every_kind_has_a_sample_and_a_loader(samples):
    blobs, _, _ = samples
    assert set(blobs) == set(hezk.record.KINDS)
    assert {k for k in LOADERS if not k.startswith("proofs.proof file")} | {"crypto.FullContext"} \
        == set(hezk.record.KINDS)
    for kind, blob in blobs.items():
        assert hezk.record.peek_kind(blob) == kind  # every package's writer makes a container record


@pytest.mark.parametrize("loader", LOADERS)
def test_each_kind_round_trips_and_refuses_every_other_kind_by_name(samples, loader):
    blobs, ctx, path = samples
    accepts, load, errors = _loaders(ctx, path)[loader]
    for kind in accepts:
        load(blobs[kind])  # its own kind loads
    for found, blob in blobs.items():
        if found in accepts:
            continue
        with pytest.raises(errors) as info:
            load(blob)
        text = str(info.value)
        assert f"this is a {found} record" in text and "expected a" in text, (loader, text)
        assert all(kind in text for kind in accepts), (loader, text)  # every kind the loader takes is named


@pytest.mark.parametrize("kind", ["crypto.PublicContext", "tensor_ops.Reply", "tensor_ops.Client",
                                  "proofs.ModelCommitment", "proofs.NetworkProof", "proofs.ProverState",
                                  "proofs.TrainingProof"])
def test_truncations_and_bit_flips_give_the_library_errors(samples, kind):
    blobs, ctx, path = samples
    accepts, load, errors = _loaders(ctx, path)[kind]
    blob = blobs[kind]
    rng = np.random.default_rng(1)
    cuts = sorted(set(rng.integers(0, len(blob), 40).tolist()) | {0, 8, len(blob) - 1})
    for cut in cuts:
        with pytest.raises(errors):
            load(blob[:cut])
    for position in sorted(set(rng.integers(0, len(blob), 40).tolist()) | {4, 6, len(blob) - 1}):
        damaged = bytearray(blob)
        damaged[position] ^= 1 << int(rng.integers(0, 8))
        with pytest.raises(errors):
            load(bytes(damaged))


def test_the_secret_kinds_are_the_files_holding_secrets(samples):
    blobs, _, _ = samples
    secret = {kind for kind, blob in blobs.items() if "SECRET" in hezk.record.describe(blob)}
    assert secret == hezk.record.SECRET_KINDS
    assert isinstance(ProofRejected("x"), ProofError) and issubclass(SerializationError, HEError)


def test_only_records_start_with_the_container_magic(samples):
    """The proofs' inner encodings have their own magics (HZK...), so nothing but a record starts with HEZK."""
    blobs, _, _ = samples
    for kind in ("proofs.ModelCommitment", "proofs.NetworkProof", "proofs.HidingNetworkProof", "proofs.Reusable",
                 "proofs.TrainingProof"):
        inner = hezk.record.array_bytes(hezk.record.unpack(blobs[kind], kind), 0, kind)
        assert inner[:3] == b"HZK" and not inner.startswith(hezk.record.MAGIC), kind
