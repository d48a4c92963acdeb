"""Fiat-Shamir transcript: determinism, binding to every absorbed byte, canonical encodings, unbiased challenges."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from proofs import field as F
from proofs.errors import ProofError
from proofs.transcript import Transcript, encode


def run(label, items, challenge_label="c"):
    t = Transcript(label)
    for name, value in items:
        t.absorb(name, value)
    return t.challenge_ext(challenge_label)


def test_same_inputs_same_challenges():
    items = [("x", np.arange(5)), ("s", "shape"), ("n", 7), ("b", b"\x00\x01"), ("l", [1, "a", b"b"])]
    assert np.array_equal(run("proof", items), run("proof", items))


@pytest.mark.parametrize("first, second", [
    ([("x", np.arange(4, dtype=np.int64))], [("x", np.arange(4, dtype=np.int32))]),  # dtype
    ([("x", np.zeros((2, 1)))], [("x", np.zeros((1, 2)))]),  # shape
    ([("x", ["ab", "c"])], [("x", ["a", "bc"])]),  # list boundaries
    ([("x", "ab")], [("x", b"ab")]),  # type tag
    ([("x", 1)], [("x", -1)]),  # sign
    ([("x", 1), ("y", 2)], [("y", 2), ("x", 1)]),  # order
    ([("x", 1)], [("y", 1)]),  # label
    ([("x", 255)], [("x", 256)]),
])
def test_distinct_statements_give_distinct_challenges(first, second):
    assert not np.array_equal(run("p", first), run("p", second))


def test_transcript_label_and_challenge_label_matter():
    assert not np.array_equal(run("p", []), run("q", []))
    assert not np.array_equal(run("p", [], "a"), run("p", [], "b"))


def test_successive_challenges_differ_and_are_canonical():
    t = Transcript("p")
    a, b = t.challenge_ext("r"), t.challenge_ext("r")
    assert a.shape == (4,) and not np.array_equal(a, b)
    v = t.challenge_ext_vector("v", 1000)
    assert v.shape == (1000, 4) and F.is_canonical(v)
    assert len({tuple(row) for row in v}) == 1000


@given(st.binary(max_size=64), st.integers(0, 63))
def test_any_absorbed_bit_changes_the_challenge(data, bit):
    data = data or b"\x00"
    flipped = bytearray(data)
    flipped[(bit // 8) % len(data)] ^= 1 << (bit % 8)
    assert not np.array_equal(run("p", [("d", data)]), run("p", [("d", bytes(flipped))]))


def test_endianness_is_canonical():
    little = np.arange(6, dtype="<u4")
    big = little.astype(">u4")
    assert encode(little) == encode(big)


@pytest.mark.parametrize("bound", [1, 2, 3, 10, 1000, 2 ** 40])
def test_indices_in_range_and_roughly_uniform(bound):
    idx = Transcript("p").challenge_indices("q", 30000, bound)
    assert idx.dtype == np.int64 and idx.min() >= 0 and idx.max() < bound
    if bound <= 10:
        counts = np.bincount(idx, minlength=bound)
        expected = 30000 / bound
        assert np.all(np.abs(counts - expected) < 6 * np.sqrt(expected))


def test_bad_requests_raise():
    t = Transcript("p")
    with pytest.raises(ProofError, match="bound=0"):
        t.challenge_indices("q", 3, 0)
    with pytest.raises(ProofError, match="float"):
        t.absorb("x", 1.5)
    with pytest.raises(ProofError, match="object"):
        t.absorb("x", np.array([1, "a"], dtype=object))


def test_array_encoding_is_the_little_endian_bytes_whatever_the_layout():
    """The fast path (no conversion for arrays already little-endian) gives the bytes of the conversion."""
    from proofs.transcript import _length_prefixed, encode

    def reference(value):
        canonical = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        header = canonical.dtype.str.encode() + b"|" + b",".join(str(n).encode() for n in value.shape)
        return b"a" + _length_prefixed(header) + _length_prefixed(canonical.tobytes())

    for value in (np.arange(12, dtype=np.uint64).reshape(3, 4), np.arange(12, dtype=np.uint64).reshape(3, 4)[:, ::2],
                  np.arange(6, dtype=">u8"), np.arange(6, dtype=">i4"), np.arange(3, dtype="=u8"),
                  np.zeros((0, 4), dtype=np.uint64), np.frombuffer(b"xyz", dtype=np.uint8), np.array([True, False]),
                  np.arange(4, dtype=np.float64)):
        assert encode(value) == reference(value)
