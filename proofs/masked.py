"""Libra-masked tables: a product sumcheck over committed tables whose final evaluations reveal nothing.

:func:`proofs.zk.prove_zk_sumcheck` hides the round messages, but a sumcheck still ends at a random point
sigma where the factors' values f~(sigma) are stated and opened: each is a random linear functional of
the witness. Libra (Xie, Zhang, Zhang, Papamanthou, Song, CRYPTO 2019, section 4.2; also
Chiesa-Forbes-Spooner 2017) replaces the multilinear extension f~ of a table f by a low-degree extension
that agrees with f on the hypercube but is randomised off it:

    f^(x) = f~(x) + sum_(i < n) l_i x_i (1 - x_i),       l_i uniform in F_p4 (4 base coefficients each)

x_i (1 - x_i) vanishes on {0, 1}, so sum_x f^(x) g^(x) = sum_x f(x) g(x): the sumcheck is run on the
masked product (degree 2 per factor, 4 per round message) and ends at f^(sigma) g^(sigma). With
z_i = sigma_i (1 - sigma_i), f^(sigma) = f~(sigma) + sum_i z_i l_i is uniform in F_p4 whenever some
z_i != 0 (sigma_i not in {0, 1}, probability >= 1 - n 2 / |F_p4| over the challenges), and m such
values at points whose vectors (z_i) are independent are jointly uniform; a table is evaluated at one
point here, so the values are independent of the witness.

Commitment: the table f (n variables, zero-padded) and its 4n mask coefficients are committed as one
table of n + 1 variables, [f, l, 0...] (:func:`proofs.zk.hiding_commit`), so f^(sigma) is ONE linear
functional of the committed table (the MLE at (sigma, 0) plus the weights z_i u^e on l_(i, e)); the hiding
opening reveals only that value (:mod:`proofs.zk`). The verifier's view: hiding commitments (simulatable),
the ZK sumcheck (simulatable from the claim and f^(sigma) g^(sigma), Libra theorem 3), and f^(sigma),
g^(sigma), uniform and independent: :func:`simulate_zk_product` draws all of it without the witness.

Soundness (|F| = p^4): the sumcheck's n 4 / |F| plus its mask's 1 / |F|, the commitment's opening error
(>= 100 bits by :class:`proofs.zk.HidingParams`). The commitment binds [f, l], and f^ restricted to the
cube is f whatever l is, so an accepted claim is a claim on the committed f.
Assumptions: as :mod:`proofs.zk` (BLAKE2b a random oracle; honest-verifier zero knowledge made
non-interactive by Fiat-Shamir).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import field as F
from .errors import ProofError, ProofRejected
from .mle import fold, is_ext, mle_evaluate, pad_to_pow2
from .sumcheck import _as_ext_scalar
from .zk import (HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof, hiding_commit, mle_functional,
                 open_functionals, prove_zk_sumcheck, simulate_zk_sumcheck, verify_functionals,
                 verify_zk_sumcheck)

DEGREE = 4  #: per-round degree of f^ g^ (each masked factor has degree 2 in every variable)
MAX_TABLE_VARS = 28
MIN_TABLE_SIZE = 16  #: tables are zero-padded to >= 2^4 entries, so the 4n mask coefficients fit beside them


@dataclass(frozen=True, eq=False)
class MaskedWitness:
    """The prover's side of a masked table: the table f (2^n), its masks l ((n, 4)) and the commitment witness."""

    table: np.ndarray
    masks: np.ndarray
    commitment_witness: object

    @property
    def num_vars(self) -> int:
        return self.masks.shape[0]


def table_vars(commitment: HidingCommitment) -> int:
    """n for a masked commitment of n + 1 variables."""
    return commitment.num_vars - 1


def masked_commit(values, params: HidingParams = HidingParams(), seed=None):
    """Commit to base-field ``values`` (zero-padded to 2^n, n >= 4) with fresh masks.

    Returns (HidingCommitment of the n + 1 variable table [f, l, 0...], MaskedWitness).

    ``seed`` (tests only) makes masks, tails and salts reproducible; by default all come from the OS CSPRNG.
    """
    values = np.asarray(values)
    if values.dtype != np.uint64 or values.ndim != 1 or not F.is_canonical(values):
        raise ProofError(f"masked_commit: values must be a 1-d array of canonical field elements (uint64 < p), "
                         f"got {values.dtype} {values.shape}")
    if not isinstance(params, HidingParams):
        raise ProofError(f"masked_commit: params must be HidingParams, got {type(params).__name__}")
    if not params.hiding:
        raise ProofError("masked_commit: params.hiding=False; masked tables only make sense with a hiding commitment")
    table = np.zeros(max(MIN_TABLE_SIZE, pad_to_pow2(values).size if values.size else 1), dtype=np.uint64)
    table[:values.size] = values
    n = table.size.bit_length() - 1
    if n > MAX_TABLE_VARS:
        raise ProofError(f"masked_commit: {values.size} values need n={n} > {MAX_TABLE_VARS} variables")
    masks = F.random_elements((n, F.EXT_DEGREE), seed=seed)
    extended = np.zeros(2 * table.size, dtype=np.uint64)
    extended[:table.size] = table
    extended[table.size:table.size + masks.size] = masks.reshape(-1)
    commitment, witness = hiding_commit(extended, params, seed=None if seed is None else seed + 1)
    return commitment, MaskedWitness(table, masks, witness)


def _mask_weights(point) -> np.ndarray:
    """Weights of the 4n mask coefficients l_(i, e) in f^(point) - f~(point): z_i u^e, z_i = point_i (1 - point_i)."""
    z = F.ext_mul(point, F.ext_sub(F.ext_one(point.shape[:1]), point))  # (n, 4)
    units = np.eye(F.EXT_DEGREE, dtype=np.uint64)
    return F.ext_mul(z[:, None, :], units[None, :, :]).reshape(-1, F.EXT_DEGREE)


def masked_functional(commitment: HidingCommitment, point) -> list:
    """f^(point) as pieces of one linear functional of the committed [f, l] table (point: (n, 4))."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    n = table_vars(commitment)
    if (1 << n) < MIN_TABLE_SIZE:
        raise ProofError(f"masked_functional: a masked table has n >= 4 variables, the commitment n={n}")
    if point.shape[0] != n:
        raise ProofError(f"masked_functional: point has {point.shape[0]} variables, the table {n}")
    pieces = mle_functional(commitment, np.concatenate([point, F.ext_zero((1,))]))
    weights = _mask_weights(point)
    cols = 1 << commitment.log_cols
    flat = np.arange(weights.shape[0]) + (1 << n)  # l starts at index 2^n of the committed table
    for row in np.unique(flat // cols):
        chosen = flat // cols == row
        row_weights = F.ext_zero((1 << commitment.log_rows,))
        row_weights[row] = F.ext_one()
        col_weights = F.ext_zero((cols,))
        col_weights[flat[chosen] % cols] = weights[chosen]
        pieces.append((row_weights, col_weights))
    return pieces


def masked_evaluate(witness: MaskedWitness, point) -> np.ndarray:
    """f^(point) = f~(point) + sum_i l_i point_i (1 - point_i), computed directly (the opening's value)."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    z = F.ext_mul(point, F.ext_sub(F.ext_one(point.shape[:1]), point))
    return F.ext_add(mle_evaluate(witness.table, point), F.ext_sum(F.ext_mul(z, witness.masks), axis=0))


class MaskedProductProver:
    """Sumcheck prover for sum_x f^(x) g^(x) (the :class:`proofs.sumcheck.SumcheckProver` interface).

    With variables x_0..x_(j-1) bound to r, f^ restricted to (X, x_(j+1), ...) on the remaining cube is
    f~(r, X, x) + P_j + l_j X (1 - X), P_j = sum_(i < j) l_i r_i (1 - r_i): the mask is one scalar per round.
    """

    degree = DEGREE

    def __init__(self, left: MaskedWitness, right: MaskedWitness):
        if left.table.shape != right.table.shape:
            raise ProofError(f"masked product: tables of {left.table.size} and {right.table.size} entries")
        self.num_vars = left.num_vars
        self.challenges = []
        self._tables = [left.table, right.table]
        self._masks = [left.masks, right.masks]
        self._prefix = [F.ext_zero(), F.ext_zero()]

    def _restricted(self, k: int):
        """Per X = 0..4: (sum of the table part, the table part itself as ext rows, the scalar mask)."""
        table, j = self._tables[k], len(self.challenges)
        low, high = table[0::2], table[1::2]
        if not is_ext(table):
            low, high = F.ext_from_base(low), F.ext_from_base(high)
        diff = F.ext_sub(high, low)
        rows, masks = [low], []
        for x in range(DEGREE + 1):
            if x:
                rows.append(F.ext_add(rows[-1], diff))
            bump = F.ext_mul_base(self._masks[k][j], F.to_field(np.array([x * (1 - x)])))[0]
            masks.append(F.ext_add(self._prefix[k], bump))
        return rows, masks

    def round_message(self) -> np.ndarray:
        """s(X) = sum (A_X + m_A(X)) (B_X + m_B(X)) at X = 0..4 (A_X, B_X the restricted table parts)."""
        if len(self.challenges) >= self.num_vars:
            raise ProofError("masked product: every variable is already bound")
        (a_rows, a_masks), (b_rows, b_masks) = self._restricted(0), self._restricted(1)
        count = F.to_field(np.array([a_rows[0].shape[0]]))
        out = F.ext_zero((DEGREE + 1,))
        for x in range(DEGREE + 1):
            a, b, ma, mb = a_rows[x], b_rows[x], a_masks[x], b_masks[x]
            total = F.ext_sum(F.ext_mul(a, b), axis=0)
            total = F.ext_add(total, F.ext_mul(mb, F.ext_sum(a, axis=0)))
            total = F.ext_add(total, F.ext_mul(ma, F.ext_sum(b, axis=0)))
            out[x] = F.ext_add(total, F.ext_mul_base(F.ext_mul(ma, mb), count)[0])
        return out

    def bind(self, r) -> None:
        r = np.asarray(r, dtype=np.uint64)
        j = len(self.challenges)
        z = F.ext_mul(r, F.ext_sub(F.ext_one(), r))
        for k in range(2):
            self._tables[k] = fold(self._tables[k], r)
            self._prefix[k] = F.ext_add(self._prefix[k], F.ext_mul(self._masks[k][j], z))
        self.challenges.append(r)

    def final_evaluations(self):
        if len(self.challenges) != self.num_vars:
            raise ProofError(f"masked product: {len(self.challenges)} of {self.num_vars} variables bound")
        return [[F.ext_add(self._tables[k][0], self._prefix[k]) for k in range(2)]]


# ---------------------------------------------------------------------------------------- the proof
@dataclass(frozen=True, eq=False)
class ZKProductProof:
    """The ZK sumcheck of f^ g^, the masked values f^(sigma), g^(sigma) ((2, 4)) and their hiding openings."""

    sumcheck: ZKSumcheckProof
    values: np.ndarray
    openings: tuple

    def to_bytes(self) -> bytes:
        return self.sumcheck.to_bytes() + F.elements_to_bytes(self.values) + b"".join(
            o.to_bytes() for o in self.openings)

    @classmethod
    def from_bytes(cls, data) -> "ZKProductProof":
        reader = F.ByteReader(data, "masked product proof")
        proof = cls(ZKSumcheckProof.read(reader), reader.elements(2),
                    (HidingOpening.read(reader), HidingOpening.read(reader)))
        reader.finish()
        return proof

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


def _absorb(transcript, label, commitments, claim):
    transcript.absorb(f"{label}.statement", [c.to_bytes() for c in commitments] + [np.asarray(claim, np.uint64)])


def prove_zk_product(left: MaskedWitness, right: MaskedWitness, claim, transcript, label: str = "product",
                     params: HidingParams = HidingParams(), seed=None) -> ZKProductProof:
    """Zero-knowledge proof that sum_x f(x) g(x) = claim for two masked committed tables (no value of f or g
    is revealed: the final evaluations are of f^, g^). ``seed``: tests only."""
    if not isinstance(left, MaskedWitness) or not isinstance(right, MaskedWitness):
        raise ProofError("prove_zk_product: left and right must be MaskedWitness (from masked_commit)")
    claim = _as_ext_scalar(claim, "claim")
    witnesses = (left.commitment_witness, right.commitment_witness)
    _absorb(transcript, label, [w.commitment for w in witnesses], claim)
    prover = MaskedProductProver(left, right)
    rng = None if seed is None else np.random.default_rng(seed)
    sumcheck, point, evaluations = prove_zk_sumcheck(prover, claim, transcript, label, params,
                                                     seed=None if rng is None else int(rng.integers(1 << 62)))
    values = np.stack(evaluations[0])
    transcript.absorb(f"{label}.values", values)
    openings = []
    for witness, value in zip(witnesses, values):
        _, opening = open_functionals(witness, [masked_functional(witness.commitment, point)], transcript,
                                      values=value[None], seed=None if rng is None else int(rng.integers(1 << 62)))
        openings.append(opening)
    return ZKProductProof(sumcheck, values, tuple(openings))


def verify_zk_product(left: HidingCommitment, right: HidingCommitment, claim, proof, transcript,
                      label: str = "product") -> np.ndarray:
    """Raise ProofRejected unless ``proof`` shows sum_x f(x) g(x) = claim for the committed tables; returns sigma."""
    if not isinstance(proof, ZKProductProof) or not isinstance(proof.openings, tuple) or len(proof.openings) != 2:
        raise ProofRejected("expected a ZKProductProof with two openings", label)
    for name, commitment in (("left", left), ("right", right)):
        if not isinstance(commitment, HidingCommitment) or not commitment.params.hiding or \
                (1 << table_vars(commitment)) < MIN_TABLE_SIZE:
            raise ProofRejected(f"{name} commitment must be a hiding masked-table commitment (n >= 4 variables)",
                                label)
    n = table_vars(left)
    if table_vars(right) != n:
        raise ProofRejected(f"tables of {n} and {table_vars(right)} variables", label)
    values = proof.values
    if not isinstance(values, np.ndarray) or values.shape != (2, F.EXT_DEGREE) or not F.is_canonical(values):
        raise ProofRejected(f"values of shape {getattr(values, 'shape', None)}, expected (2, 4) canonical", label)
    try:
        claim = _as_ext_scalar(claim, "claim")
    except ProofError as error:
        raise ProofRejected(str(error), label) from None
    _absorb(transcript, label, [left, right], claim)
    sub = verify_zk_sumcheck(proof.sumcheck, claim, n, DEGREE, transcript, label)
    if not F.ext_eq(sub.expected_value, F.ext_mul(values[0], values[1])):
        raise ProofRejected("final value != f^(sigma) g^(sigma)", label)
    transcript.absorb(f"{label}.values", values)
    for commitment, value, opening in zip((left, right), values, proof.openings):
        verify_functionals(commitment, [masked_functional(commitment, sub.point)], value[None], opening, transcript)
    return sub.point


@dataclass(frozen=True, eq=False)
class SimulatedProduct:
    """A simulated view of the sumcheck part: the ZK sumcheck transcript and the stated values f^, g^ (2, 4)."""

    sumcheck: object
    values: np.ndarray


def simulate_zk_product(claim, num_vars: int, seed=None) -> SimulatedProduct:
    """Without the witness: f^(sigma), g^(sigma) drawn uniform (as the masks make them), and a ZK sumcheck
    transcript ending at their product (:func:`proofs.zk.simulate_zk_sumcheck`)."""
    values = F.ext_random((2,), seed=seed)
    product = F.ext_mul(values[0], values[1])
    sumcheck = simulate_zk_sumcheck(claim, num_vars, DEGREE, lambda point: product,
                                    seed=None if seed is None else seed + 1)
    return SimulatedProduct(sumcheck, values)
