"""The plain (non-hiding) commitment a network proof uses: Ligero-style (:mod:`proofs.commit`) or Basefold
(:mod:`proofs.basefold`), chosen by the parameters' type; parsing dispatches on each record's magic.

With Ligero every store opens on its own (the weights once, each bits group once); with Basefold the
bits groups' claims are deferred and the weights and every bits table open in ONE batched proof at the end
of the transcript (:func:`proofs.basefold.open_batch`).

The hiding commitments of zero-knowledge proofs are chosen the same way: :class:`~proofs.zk.HidingParams`
(Ligero with random tails and salted columns, one opening per store and per sumcheck mask; the default) or
:class:`~proofs.basefold_zk.HidingBasefoldParams` (every store and every sumcheck mask in one batched opening,
:mod:`proofs.layers.basefold_channel`; ``Network(zk=True, params=network_zk.basefold_params())``).
Measured on the 16->16->4 MLP (batch 1, both at >= 100 proven bits; CPU times, load average ~13 on 2 cores):
hiding Ligero 615 KB, prove 0.121 s, verify 44.5 ms, commitment 2.46 MB; hiding Basefold
(:func:`~proofs.layers.network_zk.basefold_params`) 131 KB, prove 0.274 s, verify 24.1 ms, commitment 383 KB.
A training step (6->5->3, batch 3): Ligero 5.6 MB, prove 0.75 s; Basefold 218 KB, prove 0.81 s. Basefold wins
bytes 4.6-26x and verification 1.8-2.7x but costs 2.1-2.3x prover time on the small network (its slot tables are
8-32x the data) and cannot hide tables above about 2^19 entries (a 784->128->10 step at batch 64 stores 2^23):
the default stays Ligero, Basefold is the choice for small proofs.
"""
from __future__ import annotations

from .. import basefold
from ..commit import CommitParams, Commitment
from ..pcs.scheme import BASEFOLD, LIGERO, scheme_of
from ..pcs.scheme import read_commitment as pcs_read_commitment, read_opening as pcs_read_opening

PARAMS_TYPES = (CommitParams, basefold.BasefoldParams)
COMMITMENT_TYPES = (Commitment, basefold.BasefoldCommitment)
MLP_SCHEMES = (LIGERO, BASEFOLD)  #: the schemes of an MLP commitment's weights and bits


def commit_table(values, params):
    """(commitment, witness) of ``values`` with the scheme ``params`` selects (Ligero's error for other params)."""
    scheme = scheme_of(params, error=None)
    return (scheme if scheme in MLP_SCHEMES else LIGERO).commit(values, params)


def read_commitment(blob: bytes):
    """A Commitment or a BasefoldCommitment from its bytes (ProofRejected otherwise)."""
    return pcs_read_commitment(blob, MLP_SCHEMES)


def read_opening(blob: bytes):
    """An OpeningProof or a BasefoldProof from its bytes (ProofRejected otherwise)."""
    return pcs_read_opening(blob, MLP_SCHEMES)


def soundness_label(params) -> str:
    """"conjectured" for Basefold parameters resting on the RS proximity conjecture, else "proven"."""
    return "conjectured" if scheme_of(params, error=None) is BASEFOLD and params.conjectured else "proven"


def opening_error(commitments) -> float:
    """The soundness error of opening ``commitments``: each on its own (Ligero: the sum of 2^-security_bits)
    or all in one Basefold batch (:func:`proofs.basefold.batch_security_bits`)."""
    commitments = list(commitments)
    return scheme_of(commitments[0]).opening_error(commitments)
