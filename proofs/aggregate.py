"""Aggregation of same-kind tensors across layers and steps (FAC4DNN, zkDL section 5).

zkDL (Sun, Li, Zhang, "zkDL: Efficient Zero-Knowledge Proofs of Deep Learning Training", section 5)
stacks the tensors of one kind (here: the committed bit planes of every rescale of every layer, and
of several training steps) into one table, so that one commitment and one sumcheck cover all of them
instead of one per layer. With tables T_1..T_m of power-of-two lengths placed by
:class:`proofs.layers.packing.Packing`, the packed table P satisfies P~(z, sel_i) = T_i~(z), so

- one **bit check** shows every entry of every T_i is a bit:
  sum_x eq(tau, x) (P(x) - P(x)^2) = 0 for tau random in F_p4^n (a nonzero P - P^2 on the cube gives a
  nonzero multilinear polynomial, which vanishes at tau w.p. <= n / |F_p4|, Schwartz-Zippel); the
  sumcheck (degree 3, error 3 n / |F_p4|) ends at sigma with one claim P~(sigma);
- one **batch opening** of P settles the claims on all T_i (each mapped by ``Packing.point``).

Tables are grouped by kind (FAC4DNN stacks "tensors of the same kind": here forward, backward and update
bits), and a kind is split into a few groups that each fill a power of two, so stacking never pads a total
of 17.3M entries to 33.5M. Layer by layer (``mode="layer"``) each T_i gets its own commitment, bit check and opening: m Merkle
trees, m sumchecks and m sets of column queries instead of one. :func:`plan_groups` says which tables
share a commitment; the training proof (:mod:`proofs.layers.training`) measures both modes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import field as F
from .errors import ProofError
from .layers.packing import Packing
from .mle import eq_eval, eq_table, is_ext, num_vars_of

MODES = ("aggregate", "layer")


@dataclass(frozen=True)
class TableGroups:
    """Tables (by index) grouped into commitments: ``groups[g]`` lists the tables of commitment g."""

    lengths: tuple
    groups: tuple

    def packing(self, group: int) -> Packing:
        return Packing(tuple(self.lengths[i] for i in self.groups[group]))

    def locate(self, table: int) -> tuple:
        """(group, position inside the group) of a table."""
        for g, members in enumerate(self.groups):
            if table in members:
                return g, members.index(table)
        raise ProofError(f"table {table} is in no group")


def plan_groups(lengths, mode: str = "aggregate", kinds=None) -> TableGroups:
    """Tables of the same kind share groups (``"aggregate"``; all tables are one kind when ``kinds`` is None),
    each group filling a power of two (:func:`_power_of_two_bins`); or one group per table (``"layer"``)."""
    if mode not in MODES:
        raise ProofError(f"mode={mode!r} not in {MODES}")
    lengths = tuple(int(n) for n in lengths)
    if not lengths or any(n < 1 or n & (n - 1) for n in lengths):
        raise ProofError(f"table lengths {lengths} must be non-empty powers of two")
    kinds = tuple(kinds) if kinds is not None else ("",) * len(lengths)
    if len(kinds) != len(lengths):
        raise ProofError(f"{len(kinds)} kinds for {len(lengths)} tables")
    if mode == "layer":
        return TableGroups(lengths, tuple((i,) for i in range(len(lengths))))
    groups = []
    for kind in dict.fromkeys(kinds):
        groups += _power_of_two_bins([i for i, k in enumerate(kinds) if k == kind], lengths)
    return TableGroups(lengths, tuple(groups))


def _power_of_two_bins(members, lengths) -> list:
    """Split tables (power-of-two lengths) into few groups whose padding to a power of two stays small.

    A packed table is padded to a power of two; stacking tables of total 17.3M into one would commit 33.5M.
    While padding the rest would waste more than 1/8 of the kind's total, the largest tables fill the largest
    power of two not above the remaining total (powers of two sorted in decreasing order fill it exactly).
    """
    remaining = sorted(members, key=lambda i: (-lengths[i], i))
    budget = sum(lengths[i] for i in members) // 8  # padding accepted to keep one commitment
    bins = []
    while remaining:
        total = sum(lengths[i] for i in remaining)
        capacity = 1 << (total.bit_length() - 1)
        if (2 * capacity if capacity < total else capacity) - total <= budget or len(remaining) == 1:
            bins.append(tuple(sorted(remaining)))
            break
        chosen, filled = [], 0
        for i in remaining:
            if filled + lengths[i] <= capacity:
                chosen.append(i)
                filled += lengths[i]
        bins.append(tuple(sorted(chosen)))
        remaining = [i for i in remaining if i not in chosen]
    return bins


def stack(tables, groups: TableGroups, group: int) -> np.ndarray:
    """The packed base table of commitment ``group``."""
    return groups.packing(group).pack([tables[i] for i in groups.groups[group]])


def bit_check_terms(packed, tau) -> list:
    """Sumcheck terms of sum_x eq(tau, x) (P(x) - P(x)^2) (claim 0, degree 3)."""
    weights = eq_table(tau)
    return [(1, [weights, packed]), (-1, [weights, packed, packed])]


class BitCheckProver:
    """The bit check's sumcheck prover, by the split eq: eq(tau, x) = eq(tau_<=j, x_<=j) eq(tau_>j, x_>j).

    Round j sends g_j(X) = c_j eq(tau_j, X) S_j(X) with c_j = prod_{i<j} eq(tau_i, r_i) and
    S_j(X) = sum_rest eq(tau_>j, rest) h(r_<j, X, rest), h = T - T^2 (degree 2 in X): one pass of a
    compiled kernel over the remaining cube, no full eq table and no product tables (Gruen, "Some
    improvements for the PIOP for ZeroCheck", 2024, section 3; Thaler's book, section 4.1). Same
    interface as :class:`proofs.sumcheck.SumcheckProver`; ``tests/proofs/test_aggregate.py`` compares
    its messages with that generic prover's.
    """

    degree = 3

    def __init__(self, table, tau):
        self._table = np.asarray(table, dtype=np.uint64)
        self.num_vars = num_vars_of(self._table)
        self._tau = np.asarray(tau, dtype=np.uint64).reshape(self.num_vars, F.EXT_DEGREE)
        if self.num_vars < 1:
            raise ProofError("bit check: the table needs at least 2 entries")
        self._scale = F.ext_one()
        self.challenges = []

    def _eq1(self, x):
        """eq(tau_j, x) = (1 - tau_j) + x (2 tau_j - 1) for the current variable j."""
        t = self._tau[len(self.challenges)]
        x = np.asarray(x, dtype=np.uint64)
        x = F.ext_from_base(x) if x.ndim == 0 else x
        return F.ext_add(F.ext_sub(F.ext_one(), t), F.ext_mul(x, F.ext_sub(F.ext_add(t, t), F.ext_one())))

    def round_message(self) -> np.ndarray:
        from . import _aggregate_kernels as K
        rest = self._tau[len(self.challenges) + 1:]
        half = rest.shape[0] // 2
        eq_lo, eq_hi = eq_table(rest[:half]), eq_table(rest[half:])
        sums = np.zeros((4, F.EXT_DEGREE), dtype=np.uint64)
        if self._lazy:  # round 1 reads the base table: the half-size F_p4 table is never written
            K.bit_round_lazy(self._table, self.challenges[0], eq_lo, eq_hi, sums)
        else:
            low, high = np.ascontiguousarray(self._table[0::2]), np.ascontiguousarray(self._table[1::2])
            (K.bit_round_ext if is_ext(self._table) else K.bit_round_base)(low, high, eq_lo, eq_hi, sums)
        return np.stack([F.ext_mul(self._scale, F.ext_mul(self._eq1(np.uint64(x)), sums[x])) for x in range(4)])

    @property
    def _lazy(self) -> bool:
        """After round 0 of a base table with >= 2 variables, x_0 stays unbound in the table until round 1."""
        return len(self.challenges) == 1 and not is_ext(self._table)

    def bind(self, r) -> None:
        from . import _aggregate_kernels as K
        r = np.ascontiguousarray(r, dtype=np.uint64)
        self._scale = F.ext_mul(self._scale, self._eq1(r))
        if self._lazy:  # bind x_0 and x_1 together: weights (1-r0)(1-r1), r0(1-r1), (1-r0)r1, r0 r1
            r0, one = self.challenges[0], F.ext_one()
            w0, w1 = np.stack([F.ext_sub(one, r0), r0]), np.stack([F.ext_sub(one, r), r])
            weights = np.ascontiguousarray(F.ext_mul(w0[None, :, :], w1[:, None, :]).reshape(4, F.EXT_DEGREE))
            folded = np.empty((self._table.shape[0] // 4, F.EXT_DEGREE), dtype=np.uint64)
            K.fold_two_base(self._table, weights, folded)
            self._table = folded
        elif is_ext(self._table) or self.num_vars == 1:
            low, high = np.ascontiguousarray(self._table[0::2]), np.ascontiguousarray(self._table[1::2])
            folded = np.empty((low.shape[0], F.EXT_DEGREE), dtype=np.uint64)
            (K.fold_ext if is_ext(self._table) else K.fold_base)(low, high, r, folded)
            self._table = folded
        self.challenges.append(r)

    def final_evaluations(self):
        """[[T~(sigma)]] after the last round."""
        value = self._table[0] if is_ext(self._table) else F.ext_from_base(self._table[0])
        return [[value]]


def bit_check_value(tau, sigma, value) -> np.ndarray:
    """eq(tau, sigma) (t - t^2): what the bit-check sumcheck must end at, given t = P~(sigma)."""
    return F.ext_mul(eq_eval(tau, sigma), F.ext_sub(value, F.ext_mul(value, value)))
