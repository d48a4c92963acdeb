"""Merkle trees over BLAKE2b-256, shared by every hash-based commitment of :mod:`proofs`.

Leaf digest H(0x00 || salt || column bytes) (Ligero, :mod:`proofs.commit` / :mod:`proofs.zk`; the salt is empty
for the transparent scheme), inner node H(0x01 || left || right) (every scheme; Basefold hashes its leaves with
a personalised BLAKE2b instead, :mod:`proofs.basefold`). A multi-proof of sorted distinct leaf indices sends,
level by level from the leaves, the siblings the verifier cannot compute itself (the order of
:func:`multiproof_siblings`), so a byte format built on it is fixed by this module.
"""
from __future__ import annotations

import hashlib
import sys

import numpy as np

from .. import field as F
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


def _blake2b_kernels():
    """The numba BLAKE2b row kernels (:mod:`proofs._basefold_kernels`), or None without numba or on a big-endian
    host (they read message words little-endian)."""
    if sys.byteorder != "little" or F.numba_kernels() is None:
        return None
    from .. import _basefold_kernels
    return _basefold_kernels


def _parents(below: np.ndarray, kernels) -> np.ndarray:
    """(n / 2, 32): H(0x01 || row 2i || row 2i + 1) of (n, 32) digests, by the kernel when given."""
    if kernels is None:
        raw, width = below.tobytes(), 2 * DIGEST_SIZE
        parents = b"".join(prefixed_hash(NODE_PREFIX, raw[i:i + width]) for i in range(0, len(raw), width))
        return np.frombuffer(parents, dtype=np.uint8).reshape(-1, DIGEST_SIZE)
    out = np.empty((below.shape[0] // 2, DIGEST_SIZE), dtype=np.uint8)
    kernels.blake2b_rows(np.uint8(1), np.ascontiguousarray(below).reshape(-1, 2 * DIGEST_SIZE), kernels._IV, out)
    return out


def digest_levels(digests: np.ndarray) -> list:
    """The Merkle levels over (n, 32) uint8 leaf digests, leaves first, each an (n / 2^l, 32) uint8 array: node =
    H(0x01 || left || right), as :func:`merkle_levels` (n a power of two; the kernel hashes levels of at least
    ``F.NUMBA_MIN_SIZE`` nodes)."""
    levels = [digests]
    while levels[-1].shape[0] > 1:
        below = levels[-1]
        levels.append(_parents(below, _blake2b_kernels() if below.shape[0] >= F.NUMBA_MIN_SIZE else None))
    return levels


def root_from_digests(digests: np.ndarray, indices: np.ndarray, path: list, depth: int) -> bytes:
    """The root from the (k, 32) digests of the opened leaves at sorted distinct ``indices`` and their
    multi-proof, level by level with one kernel call per level (the twin of :func:`merkle_root_from`, which
    runs without numba and on big-endian hosts; ProofRejected on a short or long multi-proof)."""
    kernels = _blake2b_kernels()
    if kernels is None:
        return merkle_root_from([d.tobytes() for d in digests], np.asarray(indices), list(path), depth)
    sent = np.frombuffer(b"".join(path), dtype=np.uint8).reshape(-1, DIGEST_SIZE)
    known, position = np.asarray(indices, dtype=np.int64), 0
    for _ in range(depth):
        siblings = np.setdiff1d(known ^ 1, known)
        if position + siblings.size > sent.shape[0]:
            raise ProofRejected("Merkle multi-proof has too few digests", "commitment opening")
        nodes = np.concatenate([known, siblings])
        order = np.argsort(nodes, kind="stable")
        pairs = np.ascontiguousarray(np.concatenate([digests, sent[position:position + siblings.size]])[order])
        position += siblings.size
        digests = _parents(pairs, kernels)
        known = nodes[order][0::2] >> 1
    if position != sent.shape[0]:
        raise ProofRejected(f"Merkle multi-proof has {sent.shape[0] - position} extra digests", "commitment opening")
    return digests[0].tobytes()
