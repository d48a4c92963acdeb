"""Batch proving and verification of graph models (a CNN with MaxPool and a Sigmoid lookup): the Python API
(``proofs.batch``, ``hezk.prove(..., per_proof=K)`` / ``hezk.verify(c, x, proofs)``) and the command line
(``prove --inputs ... --per-proof K``, ``verify --inputs ... --proofs DIR``), plain and hiding.

Each hiding proof of a batch uses its own copy of the committed weights, all reserved in the prover state's
journal before any proof runs (``docs/architecture.md`` rule 8: a copy serves one proof), so the proofs of one
batch name distinct copies; a proof checked against another group's input, or a tampered proof, is rejected
alone while the others are still accepted."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hezk
import hezk.model
from proofs.batch import input_groups, prove_batch, verify_batch, verify_each
from proofs.cli import main
from proofs.errors import ModelError, ProofRejected
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph import GraphNetwork
from proofs.layers.graph_zk import HidingGraphNetwork, HidingGraphProof


class _PoolNet(torch.nn.Module):
    """Conv -> ReLU -> MaxPool -> Linear -> Sigmoid: a contraction, a bit decomposition, the MaxPool lowering and
    a lookup."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.conv, self.pool, self.head = torch.nn.Conv2d(1, 2, 3), torch.nn.MaxPool2d(2), torch.nn.Linear(8, 3)

    def forward(self, x):
        return torch.sigmoid(self.head(torch.flatten(self.pool(torch.relu(self.conv(x))), 1)))


SHAPE = (1, 6, 6)


@pytest.fixture(scope="module")
def pool_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batch_graph")
    rng = np.random.default_rng(5)
    calibration = rng.uniform(-1, 1, (16, *SHAPE)).astype(np.float32)
    path = folder / "pool.onnx"
    torch.onnx.export(_PoolNet().eval(), torch.tensor(calibration[:1]), str(path), dynamo=False)
    q = quantize_graph(hezk.model.load(str(path)), calibration)
    return folder, path, q, calibration


def _reference(q, x):
    return q.forward_int(q.quantize_input(x))


def test_hiding_batch_uses_one_copy_per_proof_and_verifies(pool_model):
    """Three samples, two per proof: two proofs on two distinct copies; the batch verdict stacks the integer
    reference; a proof checked against the other group's input is rejected, the other proof still accepted."""
    _, _, q, calibration = pool_model
    network = HidingGraphNetwork(q, max_proofs=3)
    x = calibration[:3]
    proofs = prove_batch(network, x, per_proof=2)
    assert len(proofs) == 2 and network.proofs_left == 1
    assert sorted(p.relations.copy for p in proofs) == [0, 1]
    verdict = verify_batch(network.commitment.to_bytes(), x, [p.to_bytes() for p in proofs], per_proof=2)
    assert verdict.kind == "graph inference batch" and len(verdict.parts) == 2
    assert np.array_equal(verdict.output, _reference(q, x))
    swapped = verify_each(network.commitment, [x[2:3], x[:2]], [proofs[0], proofs[1]])
    assert [ok for ok, _ in swapped] == [False, False]
    one_wrong = verify_each(network.commitment, [x[:2], x[:2] + 0.25], proofs)
    assert [ok for ok, _ in one_wrong] == [True, False]
    with pytest.raises(ProofRejected, match="graph inference batch proof"):
        verify_batch(network.commitment, x, list(reversed(proofs)), per_proof=2)
    with pytest.raises(ModelError, match="2 proofs need 2 unused copies"):  # one left: refused before any work
        prove_batch(network, x, per_proof=2)
    assert network.proofs_left == 1


def test_batch_of_private_inputs_verifies_without_inputs(pool_model):
    _, _, q, calibration = pool_model
    network = HidingGraphNetwork(q, max_proofs=2)
    proofs = prove_batch(network, calibration[:2], private_input=True)
    verdict = verify_batch(network.commitment, None, proofs)
    assert np.array_equal(verdict.output, _reference(q, calibration[:2]))
    with pytest.raises(ProofRejected):  # a private-input proof checked against a stated input
        verify_batch(network.commitment, calibration[:2], proofs)


def test_plain_batch_and_input_checks(pool_model):
    _, _, q, calibration = pool_model
    network = GraphNetwork(q)
    proofs = prove_batch(network, calibration[:2])
    assert np.array_equal(verify_batch(network.commitment, calibration[:2], proofs).output,
                          _reference(q, calibration[:2]))
    with pytest.raises(ModelError, match="input group 1"):  # outside the committed input range: before any proof
        prove_batch(network, np.stack([calibration[0], calibration[1] * 1e6]))
    with pytest.raises(ModelError, match="samples of 3 dimensions"):
        input_groups(np.zeros((6, 6)), 1, 3)
    with pytest.raises(ProofRejected, match="1 proofs for 2 input groups"):
        verify_batch(network.commitment, calibration[:2], proofs[:1])


def test_api_batches(pool_model):
    """hezk.prove(prover, x, per_proof=K) gives a list of proof bytes; hezk.verify takes the list."""
    _, path, _, calibration = pool_model
    prover = hezk.commit(str(path), calibration, max_proofs=3)
    x = calibration[:3]
    proofs = hezk.prove(prover, x, per_proof=2)
    assert isinstance(proofs, list) and len(proofs) == 2 and all(isinstance(p, bytes) for p in proofs)
    assert prover.proofs_left == 1
    verified = hezk.verify(prover.commitment, x, proofs, per_proof=2)
    assert verified and verified.output.shape == (3, 3) and len(verified.parts) == 2
    single = hezk.verify(prover.commitment, x[2], hezk.prove(prover, x[2]))
    np.testing.assert_array_equal(verified.output[2], single.output[0])
    with pytest.raises(ProofRejected):
        hezk.verify(prover.commitment, x[::-1], proofs, per_proof=2)
    with pytest.raises(ProofRejected, match="must be bytes"):
        hezk.verify(prover.commitment, x, [proofs[0], 7], per_proof=2)


@pytest.mark.parametrize("public", [False, True])
def test_cli_batch_of_a_graph_model(pool_model, tmp_path, capsys, public):
    """commit, prove --inputs (stacked, --per-proof 2), verify --inputs --proofs; then a folder of inputs with one
    tampered proof: only its line rejects (exit 1)."""
    _, path, _, calibration = pool_model
    flag = ["--public-weights"] if public else []
    np.save(tmp_path / "cal.npy", calibration)
    np.save(tmp_path / "x.npy", calibration[:3])
    c = str(tmp_path / "c.bin")
    assert main(["commit", "--model", str(path), "--out", c, "--calibration", str(tmp_path / "cal.npy"),
                 "--max-proofs", "3", "--quiet", *flag]) == 0
    assert main(["prove", "--model", str(path), "--commitment", c, "--inputs", str(tmp_path / "x.npy"),
                 "--per-proof", "2", "--out", str(tmp_path / "p"), "--quiet", *flag]) == 0
    assert ("PUBLIC WEIGHTS" if public else "1 proofs left") in capsys.readouterr().out
    verify = ["verify", "--commitment", c, "--proofs", str(tmp_path / "p"), "--quiet"]
    assert main([*verify, "--inputs", str(tmp_path / "x.npy"), "--per-proof", "2",
                 "--outputs", str(tmp_path / "y")]) == 0
    assert capsys.readouterr().out.splitlines() == ["proof_00000.bin: accept", "proof_00001.bin: accept", "accept"]
    assert np.load(tmp_path / "y" / "output_00001.npy").shape == (1, 3)
    (tmp_path / "xs").mkdir()
    for i in range(2):
        np.save(tmp_path / "xs" / f"x{i}.npy", calibration[i])
    data = bytearray((tmp_path / "p" / "proof_00001.bin").read_bytes())
    data[-40] ^= 1
    (tmp_path / "p" / "proof_00001.bin").write_bytes(bytes(data))
    assert main(["prove", "--model", str(path), "--commitment", c, "--inputs", str(tmp_path / "xs"),
                 "--out", str(tmp_path / "q"), "--quiet", *flag]) == (2 if not public else 0)  # hiding: 1 copy left
    if public:
        assert main([*verify[:3], "--proofs", str(tmp_path / "q"), "--inputs", str(tmp_path / "xs")]) == 0
        capsys.readouterr()
    assert main([*verify, "--inputs", str(tmp_path / "x.npy"), "--per-proof", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "proof_00000.bin: accept" and lines[1].startswith("proof_00001.bin: reject") \
        and lines[2] == "reject"


def test_the_worker_share_crosses_a_pickle_and_proves_the_copy_it_is_handed(pool_model):
    """What a Dask worker receives (the quantized model and the SECRET state bytes, sent explicitly) rebuilds the
    hiding graph prover; it proves with the copy handed out by the batch (not its own next unused one), so two
    workers holding the same state never reuse a copy."""
    import pickle

    from proofs.batch import ProverShare, prove_task

    _, _, q, calibration = pool_model
    network = HidingGraphNetwork(q, max_proofs=3)
    share = pickle.loads(pickle.dumps(ProverShare(q, network.state_bytes(), HidingGraphNetwork)))
    copies = network.reserve("test", 2)
    blobs = [prove_task((calibration[i:i + 1], copy), share) for i, copy in zip(range(2), copies[::-1])]
    assert [HidingGraphProof.from_bytes(b).relations.copy for b in blobs] == copies[::-1]
    assert verify_batch(network.commitment, calibration[:2], blobs)


def test_graph_batch_on_a_dask_cluster(pool_model):
    distributed = pytest.importorskip("distributed")
    _, _, q, calibration = pool_model
    network = HidingGraphNetwork(q, max_proofs=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") \
            as cluster, distributed.Client(cluster) as client:
        proofs = prove_batch(network, calibration[:2], dask=client)
        verdict = verify_batch(network.commitment, calibration[:2], proofs, dask=client)
    assert sorted(p.relations.copy for p in proofs) == [0, 1]
    assert np.array_equal(verdict.output, _reference(q, calibration[:2]))


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), per_proof=st.integers(1, 10), ndim=st.integers(1, 3))
def test_input_groups_cut_the_samples_in_order(n, per_proof, ndim):
    """Groups of per_proof samples (the last one shorter), in order, whatever the sample rank."""
    x = np.arange(n * 2 ** ndim).reshape(n, *(2,) * ndim)
    groups = input_groups(x, per_proof, ndim)
    assert len(groups) == -(-n // per_proof) and all(len(g) <= per_proof for g in groups)
    assert np.array_equal(np.concatenate(groups), x)
    assert len(input_groups(x[0], per_proof, ndim)) == 1  # one sample: one group
