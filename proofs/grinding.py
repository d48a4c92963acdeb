"""Proof of work before a Fiat-Shamir challenge ("grinding"): before the query phase, and before folding challenges.

Before the verifier's query positions are drawn, the prover searches a nonce w with
H(0x02 || state || w) = 0 in its low ``bits`` bits (H = BLAKE2b-256, read little-endian; ``state`` the
transcript's digest at that moment), and the nonce is absorbed before the queries. A cheating prover that
re-rolls the query positions (the only way to beat the query phase besides luck) pays 2^bits hashes per roll,
so the query phase's success probability PER HASH is 2^-(query bits + bits): the soundness accounting of
every hezk proof is per Fiat-Shamir hash attempt already, so the ``bits`` add to the query bits (StarkWare,
"ethSTARK Documentation", ePrint 2021/582, section 6.3 "Grinding"; Winterfell and Plonky3 count it the same way).
The statistical bound of the queries (unique decoding, :mod:`proofs.basefold`) is unchanged and stated apart.

The same search before a folding challenge (Basefold's ``fold_grinding_bits``: per-round proof of work as in
WHIR, Arnon, Chiesa, Fenzi, Yogev, ePrint 2024/1586, and Plonky3's commit-phase proof of work) makes every draw
of that challenge cost 2^bits hashes, so that challenge's error term counts 2^-bits per hash.

Cost: the prover 2^bits hashes on average (a numba BLAKE2b over batches of nonces: about 0.2 us each here),
the verifier one hash.
"""
from __future__ import annotations

import sys

import numpy as np

from . import field as F
from .pcs.merkle import prefixed_hash
from .errors import ProofError

MAX_BITS = 30  #: most grinding bits a parameter set may ask for (2^30 hashes: minutes for the prover)
_DOMAIN = b"\x02"  #: the hash prefix of a grinding attempt (0x00 Merkle leaves, 0x01 Merkle nodes)
_BATCH = 1 << 14  #: nonces hashed per kernel call


def check(state: bytes, bits: int, nonce: int) -> bool:
    """True when H(0x02 || state || nonce as u64 little-endian) has its low ``bits`` bits zero."""
    if not isinstance(nonce, (int, np.integer)) or not 0 <= int(nonce) < 1 << 64:
        return False
    digest = prefixed_hash(_DOMAIN, state + int(nonce).to_bytes(8, "little"))
    return int.from_bytes(digest[:8], "little") & ((1 << bits) - 1) == 0


def _kernel():
    """The numba BLAKE2b row kernel (little-endian hosts with numba), else None."""
    if F.numba_kernels() is None or sys.byteorder != "little":
        return None
    from . import _basefold_kernels
    return _basefold_kernels


def grind(state: bytes, bits: int) -> int:
    """The smallest nonce w >= 0 with :func:`check`(state, bits, w) (0 when bits = 0)."""
    if not isinstance(bits, (int, np.integer)) or not 0 <= bits <= MAX_BITS:
        raise ProofError(f"grinding bits={bits!r} not in [0, {MAX_BITS}]")
    if bits == 0:
        return 0
    mask = np.uint64((1 << bits) - 1)
    kernels = _kernel()
    if kernels is None:
        nonce = 0
        while not check(state, bits, nonce):
            nonce += 1
        return nonce
    batch = min(_BATCH, 1 << max(6, bits + 1))  # about two expected solutions a call: few wasted hashes at small bits
    head = np.frombuffer(state, dtype=np.uint8)
    rows = np.empty((batch, len(state) + 8), dtype=np.uint8)
    rows[:, :len(state)] = head
    out = np.empty((batch, 32), dtype=np.uint8)
    start = 0
    while True:
        nonces = np.arange(start, start + batch, dtype="<u8")
        rows[:, len(state):] = nonces.view(np.uint8).reshape(batch, 8)
        kernels.blake2b_rows(np.uint8(_DOMAIN[0]), rows, kernels._IV, out)
        hits = np.flatnonzero((np.ascontiguousarray(out[:, :8]).view("<u8")[:, 0] & mask) == 0)
        if hits.size:
            return int(nonces[hits[0]])
        start += batch
