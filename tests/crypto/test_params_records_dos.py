"""Parameter records from untrusted bytes: counts capped and the fingerprint checked before any derivation.

The key-switching digit split is a dynamic programme over the Q primes (quadratic in them per digit); a record
naming hundreds of moduli with dnum as large cost tens of seconds per request before the caps (MAX_MODULI,
MAX_DNUM), which are checked on the raw fields, as is the record's fingerprint."""
import math
import random
import time

import pytest

import crypto.params as params_module
from crypto import serialize
from crypto.errors import ParameterError, SerializationError
from crypto.params import MAX_DNUM, MAX_MODULI, CKKSParameters, _balanced_digits, fingerprint_of
from crypto.record import pack


def _many_moduli(count: int, log_n: int = 12) -> dict:
    """A ``to_dict`` description naming ``count`` distinct moduli ≡ 1 mod 2N below 2^31, dnum = all Q primes."""
    step = 2 << log_n
    moduli = [(2**30 // step + i) * step + 1 for i in range(count)]
    return {"log_n": log_n, "q_levels": [[q] for q in moduli[:-1]], "p_moduli": moduli[-1:], "log_scale": 20,
            "dnum": count - 1, "hamming_weight": None, "insecure": True}


def _record(description: dict, fingerprint: bytes | None = None) -> bytes:
    """A parameters record with the description's own fingerprint (what an attacker can compute) or another."""
    return pack("parameters", fingerprint_of(description) if fingerprint is None else fingerprint,
                {"params": description})


def _elapsed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


@pytest.mark.parametrize("count", [500, 5000])
def test_a_record_naming_thousands_of_moduli_is_refused_at_once(count):
    """500 moduli with dnum = 499 took ~35 s before the caps (5000: hours); now refused in well under a second."""
    blob = _record(_many_moduli(count))

    def parse():
        with pytest.raises(SerializationError, match=f"{count} moduli exceed MAX_MODULI={MAX_MODULI}"):
            CKKSParameters.from_bytes(blob)
    assert _elapsed(parse) < 1.0


def test_a_context_record_naming_many_moduli_is_refused_at_once():
    """The HTTP path: a public context's parameters are parsed through the same capped reader."""
    description = _many_moduli(500)
    blob = pack("public_context", fingerprint_of(description), {"params": description, "key_id": "00" * 16})

    def parse():
        with pytest.raises(SerializationError, match="MAX_MODULI"):
            serialize.context_from_bytes(blob)
    assert _elapsed(parse) < 1.0


def test_dnum_is_capped_before_the_digit_split():
    description = dict(_many_moduli(MAX_DNUM + 10), insecure=True)
    with pytest.raises(SerializationError, match=f"dnum={MAX_DNUM + 9} not in \\[1, {MAX_DNUM}\\]"):
        CKKSParameters.from_bytes(_record(description))
    with pytest.raises(ParameterError, match="MAX_MODULI"):
        CKKSParameters.from_literal(log_n=12, log_q=[30] * MAX_MODULI, log_p=[30], log_scale=20, insecure=True)


def test_a_wrong_fingerprint_is_refused_before_any_derivation(monkeypatch):
    """The record's fingerprint is compared with the raw description's before the parameters are built."""
    genuine = CKKSParameters.preset("TOY")
    forged = _record(genuine.to_dict(), fingerprint=bytes(32))

    def never(*args):
        raise AssertionError("the digit split ran before the fingerprint check")
    monkeypatch.setattr(params_module, "_balanced_digits", never)
    with pytest.raises(SerializationError, match="fingerprint"):
        CKKSParameters.from_bytes(forged)


def test_genuine_records_still_round_trip_quickly():
    """Positive control: every preset's record parses to equal parameters with the same fingerprint."""
    for name in ("TOY", "N13", "N16_BOOT"):
        params = CKKSParameters.preset(name)
        blob = params.to_bytes()
        assert _elapsed(lambda: CKKSParameters.from_bytes(blob)) < 1.0
        back = CKKSParameters.from_bytes(blob)
        assert back == params and back.fingerprint == params.fingerprint and back.digits == params.digits


def _reference_digits(bits, dnum):
    """The digit split as first written (pure Python, O(dnum·n²) steps): the vectorised one must equal it."""
    n, inf = len(bits), float("inf")
    prefix = [0.0]
    for b in bits:
        prefix.append(prefix[-1] + b)
    best = [[inf] * (n + 1) for _ in range(dnum + 1)]
    cut = [[0] * (n + 1) for _ in range(dnum + 1)]
    best[0][0] = 0.0
    for k in range(1, dnum + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cand = max(best[k - 1][j], prefix[i] - prefix[j])
                if cand < best[k][i] - 1e-9:
                    best[k][i], cut[k][i] = cand, j
    bounds, i = [], n
    for k in range(dnum, 0, -1):
        bounds.append((cut[k][i], i))
        i = cut[k][i]
    return tuple(tuple(range(a, b)) for a, b in reversed(bounds))


def test_digit_split_is_unchanged_and_fast():
    """Same digits as the first implementation (ties included: equal prime sizes), so keys made before still fit;
    the largest split the caps allow takes well under a second."""
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 24)
        kind = rng.random()
        bits = ([30.0] * n if kind < 0.3 else [float(rng.choice([25, 26, 30])) for _ in range(n)] if kind < 0.6
                else [math.log2(rng.randrange(2**20, 2**31)) for _ in range(n)])
        dnum = rng.randint(1, n)
        assert _balanced_digits(bits, dnum) == _reference_digits(bits, dnum), (bits, dnum)
    assert _elapsed(lambda: _balanced_digits([30.0] * (MAX_MODULI - 1), MAX_DNUM)) < 1.0
