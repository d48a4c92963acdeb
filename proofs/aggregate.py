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

Layer by layer (``mode="layer"``) each T_i gets its own commitment, bit check and opening: m Merkle
trees, m sumchecks and m sets of column queries instead of one. :func:`plan_groups` says which tables
share a commitment; the training proof (:mod:`proofs.layers.training`) measures both modes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import field as F
from .errors import ProofError
from .layers.packing import Packing
from .mle import eq_eval, eq_table

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


def plan_groups(lengths, mode: str = "aggregate") -> TableGroups:
    """One group with every table (``"aggregate"``) or one group per table (``"layer"``)."""
    if mode not in MODES:
        raise ProofError(f"mode={mode!r} not in {MODES}")
    lengths = tuple(int(n) for n in lengths)
    if not lengths or any(n < 1 or n & (n - 1) for n in lengths):
        raise ProofError(f"table lengths {lengths} must be non-empty powers of two")
    if mode == "aggregate":
        return TableGroups(lengths, (tuple(range(len(lengths))),))
    return TableGroups(lengths, tuple((i,) for i in range(len(lengths))))


def stack(tables, groups: TableGroups, group: int) -> np.ndarray:
    """The packed base table of commitment ``group``."""
    return groups.packing(group).pack([tables[i] for i in groups.groups[group]])


def bit_check_terms(packed, tau) -> list:
    """Sumcheck terms of sum_x eq(tau, x) (P(x) - P(x)^2) (claim 0, degree 3)."""
    weights = eq_table(tau)
    return [(1, [weights, packed]), (-1, [weights, packed, packed])]


def bit_check_value(tau, sigma, value) -> np.ndarray:
    """eq(tau, sigma) (t - t^2): what the bit-check sumcheck must end at, given t = P~(sigma)."""
    return F.ext_mul(eq_eval(tau, sigma), F.ext_sub(value, F.ext_mul(value, value)))
