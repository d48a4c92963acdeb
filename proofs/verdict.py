"""The one verdict of every proof-of-model verifier.

A verifier either returns a :class:`Verdict`, which is truthy (``if verify(...)`` reads as it should), or raises
:class:`~proofs.errors.ProofRejected`, never anything else. The verdict carries what was proven: ``kind`` (the
proof's kind, in words), ``output`` (the proven output, or None for a statement without one: a training step),
``soundness_bits`` (-log2 of the soundness error per attempt: grinding 2^k Fiat-Shamir hashes gives
2^(k - bits)) and, where the commitment grinds, ``statistical_bits`` (the figure without the grinding).

A rejection names the proof kind first and then the failed check in words: ``where`` reads
``"graph inference proof / op 2 / contraction round 5"`` and the transcript's labels
(``sumcheck.training.t0.forward0``) are spelled out (:func:`plain_where`); the labels themselves, bound in the
Fiat-Shamir transcript, are unchanged.

The sumcheck- and commitment-level verifiers (``verify_sumcheck``, ``verify_opening``, ``verify_batch``,
``verify_contraction``, ...) are primitives, not proofs of a model: they return the claim left to settle
(a ``SubClaim``, a ``Claim``) or None and raise ProofRejected; :data:`PRIMITIVE_VERIFIERS` lists them.
Bottom module: imports only numpy and :mod:`proofs.errors`.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import numpy as np

from .errors import ProofError, ProofRejected

__all__ = ["PRIMITIVE_VERIFIERS", "Verdict", "plain_where", "rejecting"]

#: the ``verify*`` names exported by ``proofs`` that are protocol primitives, not proofs of a model: they return
#: the claim left to the caller (or None) and raise ProofRejected, and are outside the Verdict contract
PRIMITIVE_VERIFIERS = frozenset({
    "verify_sumcheck", "verify_zk_sumcheck",            # -> SubClaim: the point and value still to settle
    "verify_opening", "verify_batch",                   # commitment openings -> None
    "verify_functionals", "verify_points",              # hiding openings -> None
    "verify_contraction", "verify_patches",             # claim reductions -> (input claim, weight claim)
})


@dataclass(frozen=True, eq=False, kw_only=True)
class Verdict:
    """An accepted proof: always truthy (a rejection raises ProofRejected instead). ``kind``: what was proven
    ("MLP inference", "graph inference", "training step", "forward"); ``output``: the proven output (int64, as
    proven) or None; ``soundness_bits``: per attempt; ``statistical_bits``: without grinding, where it
    differs (else None); ``parts``: the verdicts of the proofs a batch verdict stands for (else empty).
    ``np.asarray(verdict)`` is the output."""

    kind: str
    output: np.ndarray | None = None
    soundness_bits: float | None = None
    statistical_bits: float | None = None
    parts: tuple = ()

    @property
    def accepted(self) -> bool:
        """Always True: a verifier that does not accept raises ProofRejected."""
        return True

    def __bool__(self) -> bool:
        return True

    def __array__(self, dtype=None, copy=None):
        if self.output is None:
            raise ProofError(f"a {self.kind} verdict carries no output")
        return self.output if dtype is None else self.output.astype(dtype)

    def __repr__(self) -> str:
        parts = [f"accepted {self.kind} proof"]
        if self.output is not None:
            with np.printoptions(threshold=20):
                parts.append(f"output={self.output!r}")
        if self.soundness_bits is not None:
            parts.append(f"soundness {self.soundness_bits:.1f} bits")
        if self.statistical_bits is not None:
            parts.append(f"{self.statistical_bits:.1f} statistical")
        return f"Verdict({', '.join(parts)})"

    @classmethod
    def measured(cls, kind: str, output, figure, *args, **kwargs) -> "Verdict":
        """The verdict of an accepted ``kind`` proof whose soundness is ``figure(*args, **kwargs)`` (a
        commitment's ``soundness_bits``); ``statistical_bits`` is the same figure without grinding
        (:func:`proofs.basefold.statistical_bits`), kept only where it differs."""
        from .basefold import statistical_bits

        bits = float(figure(*args, **kwargs))
        statistical = float(statistical_bits(figure, *args, **kwargs))
        return cls(kind=kind, output=output, soundness_bits=bits,
                   statistical_bits=statistical if statistical != bits else None)


#: transcript labels -> words, for rejection messages only (the labels stay bound in the transcript)
_LABELS = (
    (re.compile(r"sumcheck\.training\.([\w.]+)"), r"relation \1 sumcheck"),
    (re.compile(r"sumcheck\.linear"), "matmul sumcheck"),
    (re.compile(r"sumcheck\.relu\.select"), "ReLU select sumcheck"),
    (re.compile(r"sumcheck\.relu\.bits"), "bit-decomposition sumcheck"),
)


def plain_where(where: str) -> str:
    """``where`` with the transcript labels spelled out (``sumcheck.training.t0.forward0 round 3`` ->
    ``relation t0.forward0 sumcheck round 3``)."""
    for pattern, words in _LABELS:
        where = pattern.sub(words, where)
    return where


@contextlib.contextmanager
def rejecting(kind: str):
    """Around a verifier's body: a ProofRejected leaves with ``where`` = "<kind> proof / <plain where>" (once:
    a nested verifier of the same kind already named it), and any other exception (a malformed proof object)
    as ProofRejected("malformed proof: ...", "<kind> proof")."""
    head = f"{kind} proof"
    try:
        yield
    except ProofRejected as rejection:
        where = plain_where(rejection.where)
        if where == head or where.startswith(head + " / "):
            if where == rejection.where:
                raise
            raise ProofRejected(rejection.reason, where) from None
        raise ProofRejected(rejection.reason, f"{head} / {where}" if where else head) from None
    except Exception as error:  # noqa: BLE001 (a malformed proof object must never escape as another exception)
        raise ProofRejected(f"malformed proof: {type(error).__name__}: {error}", head) from None
