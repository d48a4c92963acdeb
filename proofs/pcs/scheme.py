"""One interface to the four multilinear commitment schemes of :mod:`proofs`.

A :class:`CommitmentScheme` commits to a table of base-field values (its multilinear extension), opens a batch
of evaluation claims, verifies an opening (raising only ``ProofRejected``), states the soundness bits of an
opening and reads/writes its commitments and openings. The four schemes:

- :data:`LIGERO` (:mod:`proofs.commit`, Ames et al. CCS 2017): transparent; one opening per commitment.
- :data:`HIDING_LIGERO` (:mod:`proofs.zk`): random row tails, mask rows, salted leaves; one opening per commitment.
- :data:`BASEFOLD` (:mod:`proofs.basefold`, Zeilberger-Chen-Fisch CRYPTO 2024): one proof opens every commitment
  of a batch.
- :data:`HIDING_BASEFOLD` (:mod:`proofs.basefold_zk`): the table in random slots of a Basefold table; one proof
  per batch.

The objects wrap the schemes' own functions: the byte formats and transcripts are theirs, unchanged. A Ligero
opening of several commitments is the tuple of one opening per commitment, made in order on one transcript;
a Basefold opening is one proof for all of them (``batched``). :func:`scheme_of` maps parameters, commitments
and witnesses to their scheme: callers hold the scheme object instead of branching on types.
"""
from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np

from .. import basefold as B
from .. import basefold_zk as BZ
from .. import commit as C
from .. import field as F
from .. import zk as Z
from ..errors import ProofError, ProofRejected
from ..proof_format import parse_nested


@runtime_checkable
class CommitmentScheme(Protocol):
    """What every commitment scheme offers (the objects below implement it)."""

    name: str  #: a short stable name ("ligero", "hiding-ligero", "basefold", "hiding-basefold")
    hiding: bool  #: openings reveal nothing about the table beyond the opened values
    batched: bool  #: one opening covers every commitment of a batch (Basefold), else one per commitment
    params_type: type
    commitment_type: type

    def commit(self, values, params, seed=None):
        """(commitment, witness) of the base-field ``values`` (zero-padded to a power of two)."""

    def open(self, witnesses, points_list, transcript, values=None):
        """Open witness k at the points ``points_list[k]`` ((m_k, n_k, 4)) -> (values list of (m_k, 4), opening).
        ``values``: the claimed values when the caller has them (a batched scheme then skips a pass per point)."""

    def verify(self, commitments, points_list, values_list, opening, transcript,
               min_security_bits: float = 100, *, allow_conjectured: bool = False) -> None:
        """Raise ProofRejected unless ``opening`` shows every claim, at parameters of at least
        ``min_security_bits`` (conjectured Basefold parameters only with ``allow_conjectured``)."""

    def opening_error(self, commitments) -> float:
        """The soundness error of opening ``commitments`` (one batch, or one opening each)."""

    def soundness_bits(self, commitments) -> float:
        """-log2 of :meth:`opening_error`."""

    def commitment_bytes(self, commitment) -> bytes:
        """A commitment's byte format (its ``to_bytes``)."""

    def opening_bytes(self, opening) -> bytes:
        """One opening proof's byte format (a Ligero batch: of each of its proofs)."""

    def read_commitment(self, blob: bytes):
        """The commitment from its bytes (ProofRejected on malformed bytes)."""

    def read_opening(self, blob: bytes):
        """One opening proof from its bytes (ProofRejected on malformed bytes)."""


def _union_error(commitments) -> float:
    """Openings made one per commitment: their errors add (union bound)."""
    return sum(2.0 ** -c.security_bits for c in commitments)


def _pairs(witnesses, points_list, error, where: str) -> list:
    witnesses, points_list = list(witnesses), list(points_list)
    if not witnesses or len(witnesses) != len(points_list):
        raise error(f"{len(witnesses)} commitments for {len(points_list)} point sets", where)
    return list(zip(witnesses, points_list))


def _prover_error(message, _where=None):
    return ProofError(message)


class _Scheme:
    name = ""
    hiding = False
    batched = False
    params_type = commitment_type = witness_type = opening_type = type(None)
    commitment_magic = opening_magic = b""  #: the first bytes of a commitment's / an opening's format

    def soundness_bits(self, commitments) -> float:
        return -math.log2(self.opening_error(list(commitments)))

    def __repr__(self) -> str:
        return f"<commitment scheme {self.name}>"

    def owns(self, obj) -> bool:
        """``obj`` is this scheme's parameter set, commitment or witness."""
        return isinstance(obj, (self.params_type, self.commitment_type, self.witness_type))

    def is_commitment(self, obj) -> bool:
        """``obj`` is a commitment of this scheme (a verifier's shape check)."""
        return isinstance(obj, self.commitment_type)

    def commitment_bytes(self, commitment) -> bytes:
        return commitment.to_bytes()

    def opening_bytes(self, opening) -> bytes:
        """The bytes of one opening proof (a Ligero batch: of each of its proofs)."""
        return opening.to_bytes()

    def read_commitment(self, blob: bytes):
        return parse_nested(self.commitment_type.from_bytes, bytes(blob), self.commitment_type.__name__)


class LigeroScheme(_Scheme):
    """Transparent Ligero (:mod:`proofs.commit`): one opening per commitment, at all of its points."""

    name, hiding, batched = "ligero", False, False
    params_type, commitment_type, witness_type, opening_type = C.CommitParams, C.Commitment, C.CommitmentWitness, \
        C.OpeningProof
    commitment_magic, opening_magic = b"HZKCMT01", b"HZKOPN01"

    def commit(self, values, params, seed=None):
        return C.commit(values, params)

    def open(self, witnesses, points_list, transcript, values=None):
        opened = [C.open_batch(w, np.asarray(p), transcript)
                  for w, p in _pairs(witnesses, points_list, _prover_error, "")]
        return [v for v, _ in opened], tuple(proof for _, proof in opened)

    def verify(self, commitments, points_list, values_list, opening, transcript,
               min_security_bits: float = C.MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
        """(Nothing is conjectured here: ``allow_conjectured`` changes nothing.)"""
        pairs = _pairs(commitments, points_list, ProofRejected, "commitment opening")
        if not isinstance(opening, tuple) or len(opening) != len(pairs) or len(values_list) != len(pairs):
            raise ProofRejected(f"expected {len(pairs)} openings and value sets", "commitment opening")
        for (c, points), values, proof in zip(pairs, values_list, opening):
            C.verify_batch(c, points, values, proof, transcript, min_security_bits)

    def opening_error(self, commitments) -> float:
        return _union_error(commitments)

    def read_opening(self, blob: bytes):
        return parse_nested(C.OpeningProof.from_bytes, bytes(blob), "OpeningProof")


class HidingLigeroScheme(_Scheme):
    """Hiding Ligero (:mod:`proofs.zk`): random row tails, mask rows and salted leaves; one opening per
    commitment (``HidingParams(hiding=False)`` runs the same code without the hiding parts)."""

    name, hiding, batched = "hiding-ligero", True, False
    params_type, commitment_type, witness_type, opening_type = Z.HidingParams, Z.HidingCommitment, Z.HidingWitness, \
        Z.HidingOpening
    commitment_magic = b"HZKHIDE1"  # an opening has no magic of its own (it is nested in the proofs' formats)

    def commit(self, values, params, seed=None):
        return Z.hiding_commit(values, params, seed=seed)

    def open(self, witnesses, points_list, transcript, values=None):
        opened = [Z.open_points(w, np.asarray(p), transcript)
                  for w, p in _pairs(witnesses, points_list, _prover_error, "")]
        return [v for v, _ in opened], tuple(proof for _, proof in opened)

    def verify(self, commitments, points_list, values_list, opening, transcript,
               min_security_bits: float = C.MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
        """Each commitment's own parameters must give ``min_security_bits`` (:func:`proofs.zk.verify_functionals`
        also requires 100)."""
        pairs = _pairs(commitments, points_list, ProofRejected, "hiding opening")
        if not isinstance(opening, tuple) or len(opening) != len(pairs) or len(values_list) != len(pairs):
            raise ProofRejected(f"expected {len(pairs)} openings and value sets", "hiding opening")
        for (c, points), values, proof in zip(pairs, values_list, opening):
            if self.is_commitment(c) and c.security_bits < min_security_bits:
                raise ProofRejected(f"commitment parameters give {c.security_bits:.1f} bits < {min_security_bits} "
                                    "required", "hiding opening")
            Z.verify_points(c, points, values, proof, transcript)

    def opening_error(self, commitments) -> float:
        return _union_error(commitments)

    def read_opening(self, blob: bytes):
        def parse(data):
            reader = F.ByteReader(data, where="hiding opening")
            opening = Z.HidingOpening.read(reader)
            reader.finish()
            return opening
        return parse_nested(parse, bytes(blob), "HidingOpening")


class BasefoldScheme(_Scheme):
    """Basefold (:mod:`proofs.basefold`): one proof opens every commitment of a batch (one parameter set)."""

    name, hiding, batched = "basefold", False, True
    params_type, commitment_type, witness_type, opening_type = B.BasefoldParams, B.BasefoldCommitment, \
        B.BasefoldWitness, B.BasefoldProof
    commitment_magic, opening_magic = b"HZKBFC01", b"HZKBFP01"

    def commit(self, values, params, seed=None):
        return B.commit(values, params)

    def open(self, witnesses, points_list, transcript, values=None):
        return B.open_batch(list(witnesses), [np.asarray(p) for p in points_list], transcript, values)

    def verify(self, commitments, points_list, values_list, opening, transcript,
               min_security_bits: float = B.MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
        B.verify_batch(commitments, points_list, values_list, opening, transcript, min_security_bits,
                       allow_conjectured=allow_conjectured)

    def opening_error(self, commitments) -> float:
        return 2.0 ** -B.batch_security_bits(commitments)

    def read_opening(self, blob: bytes):
        return parse_nested(B.BasefoldProof.from_bytes, bytes(blob), "BasefoldProof")


class HidingBasefoldScheme(_Scheme):
    """Hiding Basefold (:mod:`proofs.basefold_zk`): the table in random slots of a Basefold table; one proof per
    batch (a ``BasefoldProof``, or a ``MaskedBatchProof`` in the "tail" layout)."""

    name, hiding, batched = "hiding-basefold", True, True
    params_type, commitment_type, witness_type, opening_type = BZ.HidingBasefoldParams, \
        BZ.HidingBasefoldCommitment, BZ.HidingBasefoldWitness, (B.BasefoldProof, BZ.MaskedBatchProof)
    commitment_magic = b"HZKBFH01"  # an opening is a BasefoldProof (b"HZKBFP01") or a MaskedBatchProof (b"HZKBFM01")

    def commit(self, values, params, seed=None):
        return BZ.commit(values, params, seed=seed)

    def open(self, witnesses, points_list, transcript, values=None):
        return BZ.open_batch(list(witnesses), [np.asarray(p) for p in points_list], transcript, values)

    def verify(self, commitments, points_list, values_list, opening, transcript,
               min_security_bits: float = B.MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
        BZ.verify_batch(commitments, [np.asarray(p) for p in points_list], values_list, opening, transcript,
                        min_security_bits, allow_conjectured=allow_conjectured)

    def opening_error(self, commitments) -> float:
        return BZ.batch_error(commitments)

    def read_opening(self, blob: bytes):
        blob = bytes(blob)
        if blob[:8] == b"HZKBFM01":  # the tail layout's MaskedBatchProof
            return parse_nested(BZ.MaskedBatchProof.from_bytes, blob, "MaskedBatchProof")
        return parse_nested(B.BasefoldProof.from_bytes, blob, "BasefoldProof")


LIGERO = LigeroScheme()
HIDING_LIGERO = HidingLigeroScheme()
BASEFOLD = BasefoldScheme()
HIDING_BASEFOLD = HidingBasefoldScheme()
SCHEMES = (LIGERO, HIDING_LIGERO, BASEFOLD, HIDING_BASEFOLD)


def scheme_of(obj, error=ProofError, where: str = "commitment"):
    """The scheme of a parameter set, commitment or witness (``CommitParams``/``Commitment`` -> :data:`LIGERO`,
    ``HidingParams`` -> :data:`HIDING_LIGERO`, ``BasefoldParams`` -> :data:`BASEFOLD`,
    ``HidingBasefoldParams`` -> :data:`HIDING_BASEFOLD`, and their commitments and witnesses likewise).

    Anything else raises ``error`` (``ProofError`` for a prover's input; verifiers pass ``ProofRejected``, and
    ``error=None`` returns None instead)."""
    for scheme in SCHEMES:
        if scheme.owns(obj):
            return scheme
    if error is None:
        return None
    message = f"{type(obj).__name__} is not a commitment, its parameters or its witness of a known scheme"
    raise error(message, where) if error is ProofRejected else error(message)


def _by_magic(blob, schemes, magic_of, read_of, what: str):
    blob = bytes(blob)
    for scheme in schemes:
        magic = magic_of(scheme)
        if magic and blob[:len(magic)] == magic:
            return read_of(scheme)(blob)
    raise ProofRejected(f"unknown {what} (magic {blob[:8]!r})", what)


def read_commitment(blob: bytes, schemes=SCHEMES):
    """The commitment of whichever of ``schemes`` its magic names (ProofRejected otherwise)."""
    return _by_magic(blob, schemes, lambda s: s.commitment_magic, lambda s: s.read_commitment, "commitment")


def read_opening(blob: bytes, schemes=SCHEMES):
    """The opening proof of whichever of ``schemes`` its magic names (ProofRejected otherwise; a hiding Ligero
    opening has no magic and is read by :meth:`HidingLigeroScheme.read_opening` alone)."""
    return _by_magic(blob, schemes, lambda s: s.opening_magic, lambda s: s.read_opening, "opening")
