"""Parameter validation, presets and the 128-bit security check."""
import dataclasses
import math

import pytest

from crypto.errors import ParameterError
from crypto.params import HE_STANDARD_128, PRESETS, CKKSParameters, CKKSParametersLiteral


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_valid(name):
    p = CKKSParameters.preset(name)
    assert p.n == 2**p.log_n and p.slots == p.n // 2
    if not p.insecure:
        assert p.log_qp <= HE_STANDARD_128[p.log_n]
    for q in p.moduli:
        assert q < 2**31 and q % (2 * p.n) == 1
    assert len(set(p.moduli)) == len(p.moduli)
    for level in range(1, p.max_level + 1):  # level products stay close to the scale
        assert abs(math.log2(math.prod(p.q_levels[level])) - p.log_scale) < 0.5
    assert sum(len(d) for d in p.digits) == len(p.q_moduli) and len(p.digits) == p.dnum
    assert CKKSParameters.from_dict(p.to_dict()) == p
    assert CKKSParameters.from_bytes(p.to_bytes()) == p
    # key-switching noise grows with digit/P: digits stay within a few bits of P (N13 has 3 over:
    # its 218-bit budget leaves no room for a larger P)
    log_p = sum(math.log2(q) for q in p.p_moduli)
    assert max(sum(math.log2(p.q_moduli[i]) for i in d) for d in p.digits) <= log_p + 4
    assert p.fingerprint == CKKSParameters.from_dict(p.to_dict()).fingerprint


def test_preset_levels():
    assert CKKSParameters.preset("N14").max_level == 6
    assert CKKSParameters.preset("N16").max_level >= 25


def test_security_bound_refused():
    lit = CKKSParametersLiteral(log_n=13, log_q=[[30, 30]] + [[25, 26]] * 3, log_p=[30, 30], log_scale=50)
    with pytest.raises(ParameterError, match="218"):
        CKKSParameters.from_literal(lit)
    with pytest.raises(ParameterError, match="insecure"):
        CKKSParameters.from_literal(dataclasses.replace(lit, insecure=True))


@pytest.mark.parametrize("bad, match", [
    (dict(log_q=[[30, 70]]), r"log_q\[0\]=70 not in \[2, 31\]"),
    (dict(log_n=20), r"log_n=20 not in"),
    (dict(log_p=[]), r"log_p"),
    (dict(dnum=0), r"dnum=0"),
    (dict(log_q=[[20]]), r"headroom"),
    (dict(hamming_weight=10, insecure=False), r"hamming_weight=10"),
])
def test_bad_literals_name_the_parameter(bad, match):
    base = dict(log_n=12, log_q=[[30, 30], [25, 26]], log_p=[30], log_scale=50, insecure=True)
    base.update(bad)
    with pytest.raises(ParameterError, match=match):
        CKKSParameters.from_literal(base)


def test_unknown_field_and_preset():
    with pytest.raises(ParameterError, match="unknown parameter"):
        CKKSParameters.from_literal(dict(log_n=12, log_q=[30], log_p=[30], log_scale=20, colour=1))
    with pytest.raises(ParameterError, match="preset"):
        CKKSParameters.preset("N99")


def test_frozen():
    p = CKKSParameters.preset("TOY")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.log_n = 3
    assert p.limbs_at(0) == 2 and p.limbs_at(p.max_level) == len(p.q_moduli)
    assert p.level_of(p.limbs_at(2)) == 2


def test_malformed_parameter_bytes():
    from crypto.errors import SerializationError
    blob = CKKSParameters.preset("TOY").to_bytes()
    for bad in (blob[:-3], b"garbage", blob[:10] + bytes([blob[10] ^ 1]) + blob[11:]):
        with pytest.raises(SerializationError):
            CKKSParameters.from_bytes(bad)
