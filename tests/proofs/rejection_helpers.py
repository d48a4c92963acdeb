"""Assertions that a verifier rejects: only ProofRejected (and which check: its reason and where), ProofError's
message, and an SGD step proved from a cheating trace."""
import re

import pytest

from proofs.errors import ProofError, ProofRejected
from proofs.layers import step_proof


def rejected(call, reason, where):
    """``call()`` raises ProofRejected whose reason equals ``reason`` (a str) or fully matches it (a Pattern),
    at exactly ``where``; returns the exception."""
    with pytest.raises(ProofRejected) as info:
        call()
    error = info.value
    assert error.where == where, error
    if isinstance(reason, re.Pattern):
        assert reason.fullmatch(error.reason), error
    else:
        assert error.reason == reason, error
    assert str(error) == (f"{where}: {error.reason}" if where else error.reason)
    return error


def only_rejected(call):
    """``call()`` raises ProofRejected: exactly that, never another exception type; returns the rejection."""
    try:
        call()
    except ProofRejected as rejection:
        return rejection
    except Exception as other:  # noqa: BLE001 - the point of the check
        pytest.fail(f"expected ProofRejected, got {type(other).__name__}: {other}")
    pytest.fail("a tampered proof was accepted")


def step_rejected(trace, committed=None, *, zk=False, spec=None, where=None, api=step_proof):
    """The honest prover code run on ``trace`` (a cheating trace) gives a training-step proof that the verifier
    rejects for ``spec`` (default ``trace.spec``) against ``committed`` (default: a fresh commitment to
    ``trace``), with ``where`` in the message if given. ``api`` holds commit_step, prove_training_step and
    verify_training_step (:mod:`proofs.layers.step_proof`, or the public :mod:`proofs`)."""
    committed = committed or api.commit_step(trace, zk=zk)
    proof = api.prove_training_step(trace, committed, zk=zk)
    rejection = only_rejected(lambda: api.verify_training_step(trace.spec if spec is None else spec, committed, proof))
    if where is not None:
        assert where in str(rejection), rejection
    return rejection


def raises_error(call, message):
    """``call()`` raises ProofError (not ProofRejected) with exactly ``message``."""
    with pytest.raises(ProofError) as info:
        call()
    assert not isinstance(info.value, ProofRejected), info.value
    assert str(info.value) == message
    return info.value


def proved_mlp(batch=1, **network_options):
    """The 16 -> 16 -> 4 fixed-point MLP (8 fractional bits) proved on `batch` inputs: ``(network, x, proof)``."""
    import numpy as np

    from proofs.layers.network import Network
    from proofs.quantize import quantize_fixed_point, quantize_input
    from tests.proofs.test_network import float_mlp

    weights, biases = float_mlp(1, (16, 16, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=8)
    x = quantize_input(model, np.random.default_rng(2).uniform(-1, 1, (batch, 16)))
    network = Network(model, **network_options)
    return network, x, network.prove(x)


def with_relations(proof, **changes):
    """A hiding network proof with some fields of its relations replaced."""
    import dataclasses

    return dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, **changes))
