"""Grinding (proof of work before the queries): the numba search against a hashlib loop, the check's refusals."""
import hashlib

import pytest
from hypothesis import given, settings, strategies as st

from proofs import grinding
from proofs.errors import ProofError


def _naive_grind(state: bytes, bits: int) -> int:
    """The smallest nonce whose BLAKE2b-256(0x02 || state || nonce) has its low ``bits`` bits zero (hashlib)."""
    nonce = 0
    while True:
        digest = hashlib.blake2b(b"\x02" + state + nonce.to_bytes(8, "little"), digest_size=32).digest()
        if int.from_bytes(digest[:8], "little") % (1 << bits) == 0:
            return nonce
        nonce += 1


@settings(max_examples=12, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.integers(0, 11))
def test_grind_finds_the_smallest_nonce_of_the_hashlib_twin(state, bits):
    nonce = grinding.grind(state, bits)
    assert nonce == _naive_grind(state, bits)
    assert grinding.check(state, bits, nonce)
    assert all(not grinding.check(state, bits, w) for w in range(nonce))


def test_grinding_past_one_batch_and_wrong_nonces():
    state = bytes([12]) * 32
    nonce = grinding.grind(state, 15)
    assert nonce >= grinding._BATCH              # this state's first hit lies past the first batch of nonces
    assert grinding.check(state, 15, nonce) and nonce == _naive_grind(state, 15)
    for bad in (-1, 1 << 64, "0", 1.0, None):
        assert grinding.check(state, 15, bad) is False
    assert grinding.grind(state, 0) == 0 and grinding.check(state, 0, 12345)


@pytest.mark.parametrize("bits", [-1, grinding.MAX_BITS + 1, 2.5])
def test_out_of_range_bits_are_refused(bits):
    with pytest.raises(ProofError, match="bits"):
        grinding.grind(bytes(32), bits)


def test_small_proofs_of_work_search_past_their_short_batches():
    """Few bits search batches of about 2^(bits + 1) nonces (a fold's proof of work each round): a state whose
    first solution lies past several such batches still gets the smallest nonce."""
    bits = 5
    state = next(bytes([i]) * 32 for i in range(256) if _naive_grind(bytes([i]) * 32, bits) >= 130)
    assert grinding.grind(state, bits) == _naive_grind(state, bits) >= 130 > 2 * max(64, 1 << (bits + 1))
