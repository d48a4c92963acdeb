"""The plain (non-hiding) commitment a network proof uses: Ligero-style (:mod:`proofs.commit`) or Basefold
(:mod:`proofs.basefold`), chosen by the parameters' type; parsing dispatches on each record's magic.

With Ligero every store opens on its own (the weights once, each bits group once); with Basefold the
bits groups' claims are deferred and the weights and every bits table open in ONE batched proof at the end
of the transcript (:func:`proofs.basefold.open_batch`).

The hiding commitments of zero-knowledge proofs are chosen the same way: :class:`~proofs.zk.HidingParams`
(Ligero with random tails and salted columns, one opening per store and per sumcheck mask; the default) or
:class:`~proofs.basefold_zk.HidingBasefoldParams` (every store and every sumcheck mask in one batched opening,
:mod:`proofs.layers.basefold_channel`; ``Network(zk=True, params=network_zk.basefold_params())``).
Measured on the 16->16->4 MLP (batch 1, rate 1/8 Basefold, both at >= 100 proven bits): Ligero 605 KB,
prove 0.11 s, verify 57 ms; Basefold 146-150 KB, prove 0.3-0.4 s, verify 26-35 ms (load average ~10 on 2
cores, CPU times). Bytes favour Basefold 4x, prover time Ligero 3x: the default stays Ligero (the issue's
prover budget is 1.5x) and Basefold is the choice for small proofs.
"""
from __future__ import annotations

from .. import basefold
from ..commit import CommitParams, Commitment, OpeningProof, commit
from ..errors import ProofRejected
from ..proof_format import parse_nested

PARAMS_TYPES = (CommitParams, basefold.BasefoldParams)
COMMITMENT_TYPES = (Commitment, basefold.BasefoldCommitment)


def is_basefold(params) -> bool:
    return isinstance(params, basefold.BasefoldParams)


def commit_table(values, params):
    """(commitment, witness) of ``values`` with the scheme ``params`` selects."""
    return (basefold.commit if is_basefold(params) else commit)(values, params)


def _by_magic(blob: bytes, kinds, what: str):
    for kind, magic in kinds:
        if blob[:len(magic)] == magic:
            return parse_nested(kind.from_bytes, blob, kind.__name__)
    raise ProofRejected(f"unknown {what} (magic {blob[:8]!r})", what)


def read_commitment(blob: bytes):
    """A Commitment or a BasefoldCommitment from its bytes (ProofRejected otherwise)."""
    return _by_magic(blob, ((Commitment, b"HZKCMT01"), (basefold.BasefoldCommitment, b"HZKBFC01")), "commitment")


def read_opening(blob: bytes):
    """An OpeningProof or a BasefoldProof from its bytes (ProofRejected otherwise)."""
    return _by_magic(blob, ((OpeningProof, b"HZKOPN01"), (basefold.BasefoldProof, b"HZKBFP01")), "opening")


def soundness_label(params) -> str:
    """"conjectured" for Basefold parameters resting on the RS proximity conjecture, else "proven"."""
    return "conjectured" if is_basefold(params) and params.conjectured else "proven"


def opening_error(commitments) -> float:
    """The soundness error of opening ``commitments``: each on its own (Ligero: the sum of 2^-security_bits)
    or all in one Basefold batch (:func:`proofs.basefold.batch_security_bits`)."""
    commitments = list(commitments)
    if isinstance(commitments[0], basefold.BasefoldCommitment):
        return 2.0 ** -basefold.batch_security_bits(commitments)
    return sum(2.0 ** -c.security_bits for c in commitments)
