"""Merkle trees over BLAKE2b-256, shared by every hash-based commitment of :mod:`proofs`.

Leaf digest H(0x00 || salt || column bytes) (Ligero, :mod:`proofs.commit` / :mod:`proofs.zk`; the salt is empty
for the transparent scheme), inner node H(0x01 || left || right) (every scheme; Basefold hashes its leaves with
a personalised BLAKE2b instead, :mod:`proofs.basefold`). A multi-proof of sorted distinct leaf indices sends,
level by level from the leaves, the siblings the verifier cannot compute itself (the order of
:func:`multiproof_siblings`), so a byte format built on it is fixed by this module.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..errors import ProofRejected

DIGEST_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"


def prefixed_hash(prefix: bytes, data: bytes) -> bytes:
    """BLAKE2b-256 of ``prefix || data`` (domain separation of leaves and inner nodes)."""
    return hashlib.blake2b(prefix + data, digest_size=DIGEST_SIZE).digest()


def column_leaves(encoded: np.ndarray, salts) -> list:
    """H(0x00 || salt_j || column j as little-endian u32) for each column j of a (rows, m) array."""
    data = np.ascontiguousarray(encoded.T, dtype="<u4")
    return [prefixed_hash(LEAF_PREFIX, salt + column.tobytes()) for salt, column in zip(salts, data)]


def merkle_levels(leaves: list[bytes]) -> list[list[bytes]]:
    """The tree's levels, leaves first, root last (``len(leaves)`` a power of two)."""
    levels = [leaves]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([prefixed_hash(NODE_PREFIX, below[i] + below[i + 1]) for i in range(0, len(below), 2)])
    return levels


def multiproof_siblings(indices: np.ndarray, depth: int):
    """For sorted distinct leaf indices, yield per level the (known indices, sibling indices to send)."""
    known = indices
    for _ in range(depth):
        siblings = np.setdiff1d(known ^ 1, known)
        yield known, siblings
        known = np.unique(known >> 1)


def merkle_open(levels, indices: np.ndarray) -> list[bytes]:
    """The sibling digests a verifier needs to recompute the root from the leaves at ``indices``.

    ``levels`` holds per level either a list of ``bytes`` digests (:func:`merkle_levels`) or an (n, 32) uint8
    array (Basefold's kernel-built tree); the multi-proof is the same bytes either way."""
    proof = []
    for level, (_, siblings) in zip(levels, multiproof_siblings(indices, len(levels) - 1)):
        proof.extend(bytes(level[i]) for i in siblings.tolist())
    return proof


def merkle_root_from(leaves: list[bytes], indices: np.ndarray, proof: list[bytes], depth: int) -> bytes:
    """Recompute the root from the leaves at sorted distinct ``indices`` and the multi-proof (ProofRejected on misuse)."""
    nodes = dict(zip(indices.tolist(), leaves))
    position = 0
    for known, siblings in multiproof_siblings(indices, depth):
        if position + len(siblings) > len(proof):
            raise ProofRejected("Merkle multi-proof has too few digests", "commitment opening")
        nodes.update(zip(siblings.tolist(), proof[position:position + len(siblings)]))
        position += len(siblings)
        nodes = {parent: prefixed_hash(NODE_PREFIX, nodes[2 * parent] + nodes[2 * parent + 1])
                 for parent in np.unique(known >> 1).tolist()}
    if position != len(proof):
        raise ProofRejected(f"Merkle multi-proof has {len(proof) - position} extra digests", "commitment opening")
    return nodes[0]
