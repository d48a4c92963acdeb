"""One random edit of a serialized proof, drawn by hypothesis: a flipped bit, a truncation or an insertion."""
from __future__ import annotations

from hypothesis import strategies as st


def mutated(blob: bytes, data, position: int) -> bytes:
    """``blob`` with one edit at ``position`` (a bit flipped, the tail cut, or 1-8 bytes inserted)."""
    raw = bytearray(blob)
    kind = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
    if kind == "flip":
        raw[position] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        del raw[position:]
    else:
        raw[position:position] = bytes(data.draw(st.binary(min_size=1, max_size=8)))
    return bytes(raw)
