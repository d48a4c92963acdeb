"""The transcript against a naive twin of its documented construction (byte for byte), found untested by the
mutation run of proofs/transcript.py (issue 19; tests/mutation/survivors.md).

Prover and verifier share ``Transcript``, so a change to an encoding or a domain-separation string keeps every
proof verifying; what such a change breaks is the specification (the module docstring), which a second
implementation (another verifier) would follow. These tests pin it.
"""
import hashlib

import numpy as np
import pytest

from proofs.field import P
from proofs.transcript import Transcript, encode


def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def _int(value: int) -> bytes:
    """Two's complement, little-endian, in ⌈(bitlength(|v|) + 1) / 8⌉ bytes (magnitude bits plus a sign bit)."""
    size = (abs(value).bit_length() + 8) // 8
    return b"i" + _lp(value.to_bytes(size, "little", signed=True))


@pytest.mark.parametrize("value, expected", [
    (b"ab", b"b" + (2).to_bytes(8, "little") + b"ab"),
    (bytearray(b"\x00"), b"b" + (1).to_bytes(8, "little") + b"\x00"),
    ("h\u00e9", b"s" + (3).to_bytes(8, "little") + "h\u00e9".encode("utf-8")),
    (True, b"i" + (1).to_bytes(8, "little") + b"\x01"),
    (False, b"i" + (1).to_bytes(8, "little") + b"\x00"),
    (np.bool_(True), b"i" + (1).to_bytes(8, "little") + b"\x01"),
    (0, b"i" + (1).to_bytes(8, "little") + b"\x00"),
    (127, b"i" + (1).to_bytes(8, "little") + b"\x7f"),
    (128, b"i" + (2).to_bytes(8, "little") + b"\x80\x00"),
    (-127, b"i" + (1).to_bytes(8, "little") + b"\x81"),
    (-128, b"i" + (2).to_bytes(8, "little") + b"\x80\xff"),
    (-129, b"i" + (2).to_bytes(8, "little") + b"\x7f\xff"),
    (np.int64(1 << 40), _int(1 << 40)),
    ([1, "a"], b"l" + (2).to_bytes(8, "little") + _int(1) + b"s" + _lp(b"a")),
    ((), b"l" + (0).to_bytes(8, "little")),
])
def test_encoding_bytes(value, expected):
    assert encode(value) == expected


def test_int_encoding_sizes():
    for value in [0, 1, -1, 127, 128, 255, 256, 32767, 32768, -32768, -32769, 1 << 63, -(1 << 63), 3**50]:
        assert encode(value) == _int(value), value


def test_array_encoding_bytes():
    a = np.arange(6, dtype=">u4").reshape(2, 3)
    header = b"<u4|2,3"
    assert encode(a) == b"a" + _lp(header) + _lp(np.arange(6, dtype="<u4").tobytes())
    assert encode(np.zeros(0, dtype=np.uint8)) == b"a" + _lp(b"|u1|0") + _lp(b"")


def _naive_challenges(label, absorbs, challenge_label, count, bound=P):
    """The documented hash chain: SHA3-256 state, SHAKE-256 squeezes, rejection sampling with retries."""
    state = hashlib.sha3_256(b"hezk.transcript.v1" + encode(label)).digest()
    for name, value in absorbs:
        state = hashlib.sha3_256(state + b"absorb" + encode(name) + encode(value)).digest()
    limit = (1 << 64) - (1 << 64) % bound
    out, attempt = [], 0
    while len(out) < count:
        sub = f"{challenge_label}#{attempt}"
        n = count - len(out) + 4
        stream = hashlib.shake_256(state + b"squeeze" + encode(sub) + encode(n)).digest(8 * n)
        state = hashlib.sha3_256(state + b"squeezed" + encode(sub) + encode(n)).digest()
        words = [int.from_bytes(stream[8 * i: 8 * i + 8], "little") for i in range(n)]
        out += [w % bound for w in words if w < limit]
        attempt += 1
    return out[:count], state


def test_transcript_matches_the_documented_hash_chain():
    absorbs = [("x", np.arange(3, dtype=np.int64)), ("n", 7), ("s", "shape"), ("l", [1, b"b"])]
    t = Transcript("proof")
    for name, value in absorbs:
        t.absorb(name, value)
    got = t.challenge_ext("c")
    expected, state = _naive_challenges("proof", absorbs, "c", 4)
    assert got.tolist() == expected and t.state_digest() == state
    # continue the chain: squeeze "q" with bound 1000 from the state after the first challenge
    got = t.challenge_indices("q", 5, 1000)
    limit = (1 << 64) - (1 << 64) % 1000
    prev = _naive_challenges("proof", absorbs, "c", 4)[1]
    stream = hashlib.shake_256(prev + b"squeeze" + encode("q#0") + encode(9)).digest(72)
    words = [int.from_bytes(stream[8 * i: 8 * i + 8], "little") for i in range(9)]
    assert got.tolist() == [w % 1000 for w in words if w < limit][:5]
    assert t.state_digest() == hashlib.sha3_256(prev + b"squeezed" + encode("q#0") + encode(9)).digest()


def test_uniform_stops_once_it_has_enough():
    """Rejection sampling draws count + 4 words and stops as soon as count are accepted, even when exactly
    count are (a label chosen so that 4 of 5 words are rejected: bound ⌊2^64/5⌋ + 1 rejects about 1 word in 5)."""
    bound = (1 << 64) // 5 + 1
    limit = (1 << 64) - (1 << 64) % bound
    start = hashlib.sha3_256(b"hezk.transcript.v1" + encode("r")).digest()
    for i in range(5000):
        label = f"q{i}"
        stream = hashlib.shake_256(start + b"squeeze" + encode(f"{label}#0") + encode(5)).digest(40)
        words = [int.from_bytes(stream[8 * j: 8 * j + 8], "little") for j in range(5)]
        if sum(w < limit for w in words) == 1:
            break
    else:
        pytest.fail("no label found")
    t = Transcript("r")
    got = t.challenge_indices(label, 1, bound)
    assert got.tolist() == [w % bound for w in words if w < limit]
    assert t.state_digest() == hashlib.sha3_256(start + b"squeezed" + encode(f"{label}#0") + encode(5)).digest()


def test_challenge_is_one_element_or_a_vector():
    """challenge(label) is challenge_ext(label); challenge(label, n) is challenge_ext_vector(label, n)."""
    a, b = Transcript("p"), Transcript("p")
    assert np.array_equal(a.challenge("c"), b.challenge_ext("c")) and a.challenge("d").shape == (4,)
    b.challenge_ext("d")
    assert np.array_equal(a.challenge("e", 3), b.challenge_ext_vector("e", 3)) and a.state_digest() == b.state_digest()
    expected, _ = _naive_challenges("p", [], "c", 4)
    assert Transcript("p").challenge("c").tolist() == expected


def _naive_uniform(state, label, count, bound):
    limit = (1 << 64) - (1 << 64) % bound
    out, attempt = [], 0
    while len(out) < count:
        sub, n = f"{label}#{attempt}", count - len(out) + 4
        stream = hashlib.shake_256(state + b"squeeze" + encode(sub) + encode(n)).digest(8 * n)
        state = hashlib.sha3_256(state + b"squeezed" + encode(sub) + encode(n)).digest()
        out += [w % bound for w in (int.from_bytes(stream[8 * i: 8 * i + 8], "little") for i in range(n)) if w < limit]
        attempt += 1
    return out[:count], state, attempt


def test_uniform_retries_with_the_next_attempt_label():
    """Each further draw is labelled '#1', '#2', … and sized count − got + 4: 40 values with bound ⌊2^64/5⌋ + 1
    (about one word in 5 rejected), a label found by search that needs three draws."""
    bound = (1 << 64) // 5 + 1
    start = hashlib.sha3_256(b"hezk.transcript.v1" + encode("r")).digest()
    for i in range(2000):
        expected, state, attempts = _naive_uniform(start, f"w{i}", 40, bound)
        if attempts >= 3:
            break
    else:
        pytest.fail("no label found")
    t = Transcript("r")
    assert t.challenge_indices(f"w{i}", 40, bound).tolist() == expected and t.state_digest() == state
