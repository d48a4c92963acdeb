"""Parameter validation, presets and the 128-bit security check."""
import dataclasses
import math

import pytest

from crypto.errors import ParameterError
from crypto.params import HE_STANDARD_128, PRESETS, CKKSParameters, CKKSParametersLiteral, sparse_bound


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
    assert CKKSParameters.preset("N16").max_level == 29
    boot = CKKSParameters.preset("N16_BOOT")
    assert boot.max_level == 23 and boot.log_scale == 60 and boot.log_qp <= 1747 and boot.dnum == 6


def test_security_table_is_the_cited_one():
    """HE standard (2018, Table 1) for 2^10..2^15, OpenFHE's ternary std128 rows for 2^16 and 2^17."""
    assert HE_STANDARD_128 == {10: 27, 11: 54, 12: 109, 13: 218, 14: 438, 15: 881, 16: 1747, 17: 3523}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_within_the_cited_bound(name):
    p = CKKSParameters.preset(name)
    assert p.security_bound == HE_STANDARD_128[p.log_n]
    if p.insecure:                                   # TOY: above the bound, and says so
        assert p.log_qp > p.security_bound and repr(p).endswith("INSECURE)")
    else:
        assert p.log_qp <= p.security_bound and repr(p).endswith("128-bit)")


def test_n16_recut_under_1747_keeps_its_levels():
    p = CKKSParameters.preset("N16")
    assert 1700 < p.log_qp <= 1747 and p.max_level == 29 and p.dnum == 8 and len(p.p_moduli) == 7
    assert all(len(level) == 2 and abs(math.log2(math.prod(level)) - 50) < 0.05 for level in p.q_levels[1:])
    literal = dict(PRESETS["N16"], log_p=[31] * 8, dnum=7)      # the old cut: logQP 1758
    with pytest.raises(ParameterError, match=r"log2\(QP\)=1758\.0 exceeds the 128-bit HE-standard bound 1747"):
        CKKSParameters.from_literal(literal)


@pytest.mark.parametrize("log_n, h", [(16, 31), (14, 192), (13, 8192), (12, 64)])
def test_sparse_secret_refused_without_insecure(log_n, h):
    """A sparse secret is weaker than the dense ternary secret the table assumes: never labelled 128-bit
    outside the cited sparse sets (none at N <= 2^14; at 2^16 none below h = 32)."""
    literal = dict(PRESETS[f"N{log_n}"] if f"N{log_n}" in PRESETS else PRESETS["TOY"], hamming_weight=h,
                   insecure=False)
    with pytest.raises(ParameterError, match=rf"hamming_weight={h}: a sparse secret .* insecure=True"):
        CKKSParameters.from_literal(literal)


def test_sparse_secret_within_the_cited_sets():
    """SPARSE_STANDARD_128: h >= 192 at N16 up to log2(QP) 1553, h >= 32 up to 121 (the encapsulation sets)."""
    with pytest.raises(ParameterError, match=r"hamming_weight=192: a sparse secret .* exceeds 1553; only "
                                             r"insecure=True"):
        CKKSParameters.from_literal(dict(PRESETS["N16"], hamming_weight=192))     # log2(QP) 1747
    cut = dict(PRESETS["N16"], log_q=PRESETS["N16"]["log_q"][:-4], hamming_weight=192)
    p = CKKSParameters.from_literal(cut)
    assert p.log_qp <= 1553 and p.security == "128-bit (sparse secret h=192)" and p.security_bound == 1553
    small = dict(log_n=16, log_q=[[30, 30]], log_p=[31], log_scale=50, dnum=2)
    assert CKKSParameters.from_literal(dict(small, hamming_weight=32)).security_bound == 121
    with pytest.raises(ParameterError, match="exceeds 121"):
        CKKSParameters.from_literal(dict(small, log_p=[31, 31], hamming_weight=32))    # 122 bits
    assert sparse_bound(16, 31) is None and sparse_bound(16, 200) == 1553 and sparse_bound(14, 192) is None


def test_sparse_secret_with_insecure_is_labelled_insecure():
    p = CKKSParameters.from_literal(dict(PRESETS["TOY"], hamming_weight=64))
    assert p.insecure and p.security == "INSECURE (sparse secret h=64)"
    assert "128-bit" not in repr(p) and "sparse secret h=64" in repr(p)
    with pytest.raises(ParameterError, match="only allowed for test rings"):   # no insecure escape at N16
        CKKSParameters.from_literal(dict(PRESETS["N16"], hamming_weight=192, insecure=True))
    with pytest.raises(ParameterError, match="hamming_weight"):                 # nor through bytes
        CKKSParameters.from_dict(dict(CKKSParameters.preset("N14").to_dict(), hamming_weight=192))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_value_bound(name):
    """(1 - 2^-6) Q_l / (2 scale), the same figure Client.encrypt and CKKSContext.encrypt refuse at."""
    p = CKKSParameters.preset(name)
    assert p.value_bound() == pytest.approx((1 - 2**-6) * p.modulus_at(0) / 2**(p.log_scale + 1), rel=1e-12)
    if name == "N16_BOOT":                       # q_0 of three 23-bit primes, Δ = 2^60: q_0/Δ ≈ 2^8.5
        assert 179 < p.value_bound() < 181
    else:
        assert 502 < p.value_bound() < 504       # base level of two ~30-bit primes, Δ = 2^50
    assert p.value_bound(1, 2.0**40) == pytest.approx((1 - 2**-6) * p.modulus_at(1) / 2**41, rel=1e-12)
    assert p.value_bound(p.max_level) > p.value_bound(0)


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
