"""CKKS parameters: a loose literal validated once into a frozen, 128-bit-checked ``CKKSParameters``.

Moduli are word-size NTT primes (< 2^31, ≡ 1 mod 2N). A *level* may hold several primes, so the scale
Δ ≈ 2^log_scale can exceed one prime (docs/architecture.md, and the design notes: precision from more primes per level, not wider words).
A ciphertext at level ℓ lives modulo the primes of levels 0..ℓ; rescaling divides by the primes of
level ℓ, the scale becoming Δ·Δ / Π q_ℓ.

Security: log2(Q·P) must not exceed the 128-bit classical bound for a uniform ternary secret, error
σ = 3.2 (``HE_STANDARD_128``).  N = 2^10..2^15: the HomomorphicEncryption.org standard (Albrecht et al.,
"Homomorphic Encryption Security Standard", 2018, Table 1; "Homomorphic Encryption Standard", 2021).
N = 2^16, 2^17, beyond that table: OpenFHE's extension of it (HEStd_ternary, HEStd_128_classic in
openfhe-development, src/core/lib/lattice/stdlatticeparms.cpp: 1747 and 3523; earlier releases listed
1772 for 2^16, since lowered).  Sparse secrets (``hamming_weight`` h) are weaker (hybrid and
meet-in-the-middle attacks): they are accepted only within ``SPARSE_STANDARD_128``, otherwise they need
``insecure=True``.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import ParameterError, SerializationError
from .modarith import MAX_MODULUS_BITS, is_prime_u31, ntt_primes_of_bits
from .record import field as record_field, pack, unpack

#: log2(n) -> the largest log2(QP) at 128-bit classical security, uniform ternary secret (sources above:
#: HE standard for 10..15, OpenFHE's std128 ternary rows for 16 and 17).
HE_STANDARD_128 = {10: 27, 11: 54, 12: 109, 13: 218, 14: 438, 15: 881, 16: 1747, 17: 3523}
#: log2(n) -> ((h, largest log2(QP)), ...) for sparse ternary secrets of Hamming weight >= h, error σ = 3.2:
#: the parameter sets of HomomorphicEncryption.org's sparseLWEkit (github.com/HomomorphicEncryption/
#: SparseLWEkit, src/data/lattice_estimator_estimates.csv, lattice-estimator commit 6019056) whose cheapest
#: estimated attack (usvp, bdd, bdd_hybrid, bdd_mitm_hybrid, dual, dual_hybrid) costs >= 2^128: HEaaN's and
#: Lattigo's encapsulation sets (n = 2^16, h = 32, log q 117 and 121: 172.9 and 171.9 bits), DESILO's
#: (2^16, 128, 300: 326.9), OpenFHE's and Lattigo's (2^15/2^16/2^17, 192, 767/1553/3104: 134.1/134.0/
#: 135.7) and HEaaN's (2^17, 128, 2341: 158.9).  A larger weight or a smaller modulus only costs an attack more.
SPARSE_STANDARD_128 = {15: ((192, 767),), 16: ((32, 121), (128, 300), (192, 1553)),
                       17: ((128, 2341), (192, 3104))}
MIN_LOG_N, MAX_LOG_N = 3, 17
#: the most moduli (Q and P together) a parameter set may name: the deepest 128-bit set the planner builds (N = 2^17,
#: 67 levels of two primes plus base and special primes) has about 145; checked before any derivation, so a record
#: naming thousands of moduli is refused at once instead of costing minutes (the digit split is quadratic in them)
MAX_MODULI = 256
#: the most key-switching digits (dnum): each digit is one more copy of every switching key
MAX_DNUM = 64
#: the top fraction of the centred range (-Q/2, Q/2] that encryption keeps free (see ``value_bound``)
WRAP_MARGIN = 2.0**-6

PRESETS = {
    # base level of two 30-bit primes (headroom over Δ); every other level pairs an a-bit prime with a
    # (51-a)-bit one whose product is ≈ the scale that level rescales (≈ Δ = 2^50, see from_literal);
    # special primes cover the largest key-switching digit.
    "N13": dict(log_n=13, log_q=[[30, 30]] + [[25, 26]] * 2, log_p=[29, 28], log_scale=50, dnum=3),
    "N14": dict(log_n=14, log_q=[[30, 30]] + [[25, 26]] * 6, log_p=[26, 26, 25], log_scale=50, dnum=5),
    "N15": dict(log_n=15, log_q=[[30, 30]] + [[25, 26]] * 14, log_p=[30, 30, 30, 30], log_scale=50, dnum=8),
    # N16: only 5, 12 and 18 NTT primes of 23, 24 and 25 bits exist (≡ 1 mod 2^17): spread the levels
    # over all three pairings so that every level keeps a choice of pairs near its target.  Seven
    # special primes and dnum=8 (digits <= 200 bits < log2(P) = 217) keep all 29 levels within 1747.
    "N16": dict(log_n=16, log_q=[[30, 30]] + [[25, 26]] * 12 + [[24, 27]] * 12 + [[23, 28]] * 5,
                log_p=[31] * 7, log_scale=50, dnum=8),
    # N16_BOOT, for bootstrapping: Δ = 2^60 on levels of a 30- and a 31-bit prime (two 30-bit primes fall short
    # of 2^60 and the natural scales would drift), q_0 of three 23-bit primes (q_0/Δ ≈ 2^8.5: the bootstrap's
    # output error is EvalMod's times q_0/Δ), 23 levels; nine special primes and dnum=6 (digits <= 249 bits <
    # log2(P) = 279) keep log2(QP) at 1727.5 <= 1747.  A bootstrap with sparse-secret encapsulation (the
    # default here) and arcsin=False uses 15 levels and leaves 8 at about 20 bits (benchmarks/bootstrap.py).
    "N16_BOOT": dict(log_n=16, log_q=[[23, 23, 23]] + [[30, 31]] * 23, log_p=[31] * 9, log_scale=60, dnum=6),
    # tiny ring for fast tests only: NOT secure.
    "TOY": dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 4, log_p=[30, 30, 30], log_scale=50, dnum=4,
                insecure=True),
}


@dataclass
class CKKSParametersLiteral:
    """Loose user input. ``log_q[0]`` is the base level; an entry is a prime size or a list of sizes."""

    log_n: int
    log_q: list
    log_p: list
    log_scale: int
    dnum: int | None = None
    hamming_weight: int | None = None
    insecure: bool = False


@dataclass(frozen=True)
class CKKSParameters:
    """Validated, immutable CKKS parameters (construct through ``from_literal`` or ``preset``)."""

    log_n: int
    q_levels: tuple[tuple[int, ...], ...]
    p_moduli: tuple[int, ...]
    log_scale: int
    dnum: int
    hamming_weight: int | None = None
    insecure: bool = False
    n: int = field(init=False)
    slots: int = field(init=False)
    q_moduli: tuple[int, ...] = field(init=False)
    moduli: tuple[int, ...] = field(init=False)
    digits: tuple[tuple[int, ...], ...] = field(init=False)

    def __post_init__(self):
        _validate(self)
        n = 1 << self.log_n
        q_moduli = tuple(q for level in self.q_levels for q in level)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "slots", n // 2)
        object.__setattr__(self, "q_moduli", q_moduli)
        object.__setattr__(self, "moduli", q_moduli + self.p_moduli)
        _check_security(self)           # cheap (a sum of logarithms): before the digit split
        object.__setattr__(self, "digits", _balanced_digits([math.log2(q) for q in q_moduli], self.dnum))
        _check_digits(self)

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_literal(cls, literal: CKKSParametersLiteral | dict | None = None, **fields) -> "CKKSParameters":
        """Generate primes for a literal (a CKKSParametersLiteral, a dict, or its fields as keywords):
        distinct NTT primes of the requested sizes, each level's product as close to the scale it
        rescales as the available primes allow (≈ 2^log_scale, see below)."""
        if literal is None:
            literal = fields
        elif fields:
            raise ParameterError(f"pass a literal or keyword fields, not both (got {sorted(fields)} too)")
        lit = literal if isinstance(literal, CKKSParametersLiteral) else _literal_from_dict(literal)
        log_n = _check_int("log_n", lit.log_n, MIN_LOG_N, MAX_LOG_N)
        n = 1 << log_n
        log_scale = _check_int("log_scale", lit.log_scale, 1, 2 * MAX_MODULUS_BITS * 4)
        if not isinstance(lit.log_q, (list, tuple)) or not lit.log_q:
            raise ParameterError(f"log_q={lit.log_q!r} must be a non-empty list of prime sizes")
        _check_count(len(lit.log_q))
        level_sizes = []
        for i, entry in enumerate(lit.log_q):
            sizes = list(entry) if isinstance(entry, (list, tuple)) else [entry]
            if not sizes:
                raise ParameterError(f"log_q[{i}] is an empty level")
            level_sizes.append([_check_int(f"log_q[{i}]", b, 2, MAX_MODULUS_BITS) for b in sizes])
        if not isinstance(lit.log_p, (list, tuple)) or not lit.log_p:
            raise ParameterError(f"log_p={lit.log_p!r} must be a non-empty list of special prime sizes")
        p_sizes = [_check_int(f"log_p[{i}]", b, 2, MAX_MODULUS_BITS) for i, b in enumerate(lit.log_p)]
        _check_count(sum(map(len, level_sizes)) + len(p_sizes))
        used: set[int] = set()
        q_levels = [_pick_level(level_sizes[0], None, n, used, "log_q[0]")]
        # Levels are chosen from the top down along the squaring chain: a fresh ciphertext has scale
        # Δ = 2^log_scale; after x·x and a rescale by level ℓ its scale is s_ℓ²/Q_ℓ. Aiming each Q_ℓ at
        # s_ℓ²/Δ (not at Δ) keeps every level's scale within one prime choice of Δ, instead of letting
        # the deviations double at each level (Kim, Papadimitriou, Polyakov, "Approximate homomorphic
        # encryption with reduced approximation error", CT-RSA 2022: level-specific scaling factors).
        log_s, upper = float(log_scale), []
        for i in range(len(level_sizes) - 1, 0, -1):
            level = _pick_level(level_sizes[i], 2 * log_s - log_scale, n, used, f"log_q[{i}]")
            log_s = 2 * log_s - sum(math.log2(q) for q in level)
            upper.append(level)
        q_levels += upper[::-1]
        p_moduli = tuple(_pick_level(p_sizes, None, n, used, "log_p"))
        n_q = sum(len(s) for s in level_sizes)
        dnum = min(n_q, MAX_DNUM) if lit.dnum is None else _check_int("dnum", lit.dnum, 1, min(n_q, MAX_DNUM))
        return cls(log_n=log_n, q_levels=tuple(q_levels), p_moduli=p_moduli, log_scale=log_scale,
                   dnum=dnum, hamming_weight=lit.hamming_weight, insecure=bool(lit.insecure))

    @classmethod
    def preset(cls, name: str) -> "CKKSParameters":
        """One of ``PRESETS``: "N13", "N14", "N15", "N16", "N16_BOOT" (128-bit secure; the last made for
        bootstrapping) or "TOY" (tests only, insecure)."""
        if isinstance(name, str) and name.upper() in PRESETS:
            name = name.upper()
        if name not in PRESETS:
            raise ParameterError(f"preset {name!r} not one of {sorted(PRESETS)}")
        return cls.from_literal(CKKSParametersLiteral(**PRESETS[name]))

    # --- derived quantities -------------------------------------------------------------------
    @property
    def max_level(self) -> int:
        return len(self.q_levels) - 1

    @property
    def levels(self) -> int:
        """Multiplicative levels (rescales) available: ``max_level``, as printed in the repr."""
        return self.max_level

    @property
    def scale(self) -> float:
        """The default encoding scale Δ = 2^log_scale."""
        return float(2**self.log_scale)

    def limbs_at(self, level: int) -> int:
        """Number of Q limbs of a ciphertext at ``level``."""
        if not 0 <= level <= self.max_level:
            raise ParameterError(f"level={level} not in [0, {self.max_level}]")
        return sum(len(lv) for lv in self.q_levels[: level + 1])

    def level_of(self, num_limbs: int) -> int:
        """The level whose ciphertexts have ``num_limbs`` Q limbs."""
        total = 0
        for level, primes in enumerate(self.q_levels):
            total += len(primes)
            if total == num_limbs:
                return level
        raise ParameterError(f"{num_limbs} limbs is not a level boundary of {self.limb_counts()}")

    def limb_counts(self) -> tuple[int, ...]:
        return tuple(self.limbs_at(lv) for lv in range(self.max_level + 1))

    def modulus_at(self, level: int) -> int:
        """Q_ℓ = product of the primes of levels 0..ℓ."""
        return math.prod(self.q_moduli[: self.limbs_at(level)])

    @property
    def log_q(self) -> float:
        return sum(math.log2(q) for q in self.q_moduli)

    @property
    def log_qp(self) -> float:
        return sum(math.log2(q) for q in self.moduli)

    def value_bound(self, level: int = 0, scale: float | None = None) -> float:
        """(1 - WRAP_MARGIN) · Q_level / (2 scale) (default scale Δ): the slot magnitude a ciphertext at
        ``level`` can hold.  Decryption centres coefficients mod Q_level and the inverse embedding averages
        the slots, so every coefficient is at most scale · max|x| (plus noise); the margin keeps the top
        1/64 of the centred range free, where ``CKKSContext.decrypt`` reads a coefficient as wrapped."""
        scale = self.scale if scale is None else float(scale)
        log_bound = math.log2(self.modulus_at(level)) - 1 - math.log2(scale) + math.log2(1 - WRAP_MARGIN)
        return 2.0 ** log_bound if log_bound < 1023 else math.inf

    @property
    def security(self) -> str:
        """What the parameters claim: "128-bit" (dense ternary secret within ``HE_STANDARD_128``, or a sparse
        one within ``SPARSE_STANDARD_128``) or "INSECURE" (``insecure=True``: test rings, sparse secrets)."""
        sparse = "" if self.hamming_weight is None else f" (sparse secret h={self.hamming_weight})"
        return ("INSECURE" if self.insecure else "128-bit") + sparse

    @property
    def security_bits(self) -> int | None:
        """The classical security level the parameters are checked to: 128 (dense ternary secret within
        ``HE_STANDARD_128``, sparse within ``SPARSE_STANDARD_128``), or None for ``insecure=True`` (no claim: a
        test ring, or a sparse secret outside the cited sets, may fall to an attack in seconds)."""
        return None if self.insecure else 128

    @property
    def scale_drift_bits(self) -> float:
        """The largest |log2(s_ℓ / Δ)| over the natural scales s_L = Δ, s_(ℓ-1) = s_ℓ² / q_ℓ (q_ℓ the product of
        level ℓ's primes): how far the scale of a fresh top-level ciphertext strays from Δ = 2^log_scale by
        squarings (the chain ``from_literal`` aims every level at, and the one the bootstrap lands on).
        About 0 for the presets; a literal whose primes cannot reach 2^log_scale (e.g. 31-bit primes for
        log_scale=27) drifts by bits per level, doubling at each one."""
        log_s, drift = float(self.log_scale), 0.0
        for level in range(self.max_level, 0, -1):
            log_s = 2 * log_s - sum(math.log2(q) for q in self.q_levels[level])
            drift = max(drift, abs(log_s - self.log_scale))
        return drift

    @property
    def security_bound(self) -> int | None:
        """The 128-bit bound on log2(QP) for this ring degree and secret (None if not tabulated): the HE
        standard's for a dense ternary secret, ``SPARSE_STANDARD_128``'s for a sparse one."""
        if self.hamming_weight is not None:
            return sparse_bound(self.log_n, self.hamming_weight)
        return HE_STANDARD_128.get(self.log_n)

    def to_dict(self) -> dict:
        d = asdict(self)
        keep = ("log_n", "q_levels", "p_moduli", "log_scale", "dnum", "hamming_weight", "insecure")
        return {k: d[k] for k in keep}

    @classmethod
    def from_dict(cls, d: dict) -> "CKKSParameters":
        """Rebuild from ``to_dict`` output (explicit primes; validated again)."""
        return cls(**canonical_fields(d))

    def to_bytes(self) -> bytes:
        """Versioned, checksummed bytes (one ``crypto.record`` record)."""
        return parameters_to_bytes(self)

    @classmethod
    def from_bytes(cls, blob: bytes) -> "CKKSParameters":
        """Inverse of ``to_bytes``; malformed bytes raise SerializationError."""
        return parameters_from_bytes(blob)

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return parameters_from_bytes, (self.to_bytes(),)

    @property
    def fingerprint(self) -> bytes:
        """SHA-256 of the canonical parameter description: equal iff the parameter sets are equal."""
        return fingerprint_of(self.to_dict())

    def __repr__(self):
        sec = self.security
        return (f"CKKSParameters(N=2^{self.log_n}, levels={self.max_level}, log_scale={self.log_scale}, "
                f"logQP={self.log_qp:.1f}, Q limbs={len(self.q_moduli)}, P limbs={len(self.p_moduli)}, "
                f"dnum={self.dnum}, {sec})")


# -- bytes -------------------------------------------------------------------------------------------
def parameters_to_bytes(params) -> bytes:
    """One ``parameters`` record."""
    return pack("parameters", params.fingerprint, {"params": params.to_dict()})


def parameters_from_bytes(blob) -> CKKSParameters:
    """Inverse of ``parameters_to_bytes`` (SerializationError on malformed bytes)."""
    fp, meta, _ = unpack(blob, "parameters")
    return parameters_from_meta(meta, fp)


def parameters_from_meta(meta: dict, fp: bytes) -> CKKSParameters:
    """The parameters stored in a record's meta, checked against the record's fingerprint ``fp``.

    Cheap checks first: the fields' types and counts (``MAX_MODULI``, ``MAX_DNUM``) and the fingerprint of
    their canonical form, before any derivation (the primes' checks, the security bound, the digit split)."""
    try:
        fields = canonical_fields(record_field(meta, "params", dict))
    except ParameterError as exc:
        raise SerializationError(f"stored parameters are invalid: {exc}") from None
    if fingerprint_of(_as_dict(fields)) != fp:
        raise SerializationError("stored parameters do not match the record's fingerprint")
    try:
        return CKKSParameters(**fields)
    except ParameterError as exc:
        raise SerializationError(f"stored parameters are invalid: {exc}") from None


def fingerprint_of(description: dict) -> bytes:
    """SHA-256 of a canonical parameter description (``to_dict``'s form)."""
    blob = json.dumps(description, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(b"hezk/ckks-params/v1" + blob).digest()


def _as_dict(fields: dict) -> dict:
    """``to_dict``'s form of ``canonical_fields`` output (tuples as lists, as JSON writes them)."""
    return dict(fields, q_levels=[list(lv) for lv in fields["q_levels"]], p_moduli=list(fields["p_moduli"]))


def canonical_fields(d: dict) -> dict:
    """The constructor's fields from a ``to_dict`` description, with only cheap checks: types, the number of
    moduli (``MAX_MODULI``) and of digits (``MAX_DNUM``), each modulus a positive integer below
    2^MAX_MODULUS_BITS; ParameterError otherwise. The rest is ``CKKSParameters``' own validation."""
    if not isinstance(d, dict):
        raise ParameterError(f"parameters must be a dictionary, got {type(d).__name__}")
    try:
        levels, specials = d["q_levels"], d["p_moduli"]
        if not isinstance(levels, (list, tuple)) or not isinstance(specials, (list, tuple)):
            raise ParameterError("q_levels and p_moduli must be lists")
        _check_count(len(levels) + len(specials))
        if not all(isinstance(lv, (list, tuple)) for lv in levels):
            raise ParameterError("every entry of q_levels must be a list of primes")
        _check_count(sum(map(len, levels)) + len(specials))
        fields = dict(log_n=_integer("log_n", d["log_n"]),
                      q_levels=tuple(tuple(_modulus(q) for q in lv) for lv in levels),
                      p_moduli=tuple(_modulus(q) for q in specials), log_scale=_integer("log_scale", d["log_scale"]),
                      dnum=_check_int("dnum", _integer("dnum", d["dnum"]), 1, MAX_DNUM),
                      hamming_weight=None if d.get("hamming_weight") is None
                      else _integer("hamming_weight", d["hamming_weight"]), insecure=d.get("insecure", False))
    except KeyError as exc:
        raise ParameterError(f"malformed parameter dictionary: missing {exc}") from None
    if not isinstance(fields["insecure"], bool):
        raise ParameterError(f"insecure={fields['insecure']!r:.40} must be true or false")
    return fields


def _integer(name, value) -> int:
    """An integer field as JSON carries it (an int, or a float with an integer value); ParameterError otherwise."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{name}={value!r:.40} must be an integer")
    return value


def _modulus(q) -> int:
    q = _integer("modulus", q)
    if not 2 < q < 2**MAX_MODULUS_BITS:
        raise ParameterError(f"modulus {q} is not in (2, 2^{MAX_MODULUS_BITS})")
    return q


def _check_count(count: int):
    if count > MAX_MODULI:
        raise ParameterError(f"{count} moduli exceed MAX_MODULI={MAX_MODULI} (Q and P primes together)")


#: other spellings of the literal's fields (compared without case and underscores), e.g. Lattigo's LogN
_FIELD_ALIASES = {"logdefaultscale": "log_scale", "h": "hamming_weight"}


def _literal_from_dict(d: dict) -> CKKSParametersLiteral:
    if not isinstance(d, dict):
        raise ParameterError(f"parameters must be a CKKSParametersLiteral or a dict, got {type(d).__name__}")
    allowed = set(CKKSParametersLiteral.__dataclass_fields__)
    spellings = {f.replace("_", ""): f for f in allowed} | _FIELD_ALIASES
    fields = {}
    for key, value in d.items():
        name = spellings.get(str(key).lower().replace("_", ""))
        if name is None:
            raise ParameterError(f"unknown parameter {key!r}; allowed: {sorted(allowed)}")
        if name in fields:
            raise ParameterError(f"parameter {name} given twice (as {key!r})")
        fields[name] = value
    try:
        return CKKSParametersLiteral(**fields)
    except TypeError as exc:
        raise ParameterError(f"missing parameter: {exc}") from None


def _check_int(name, value, lo, hi) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{name}={value!r} must be an integer in [{lo}, {hi}]")
    if not lo <= value <= hi:
        raise ParameterError(f"{name}={value} not in [{lo}, {hi}]")
    return value


def _primes_just_above(bits: int, n: int, used, count: int) -> list[int]:
    """Up to ``count`` primes q ≡ 1 (mod 2n) just above 2^bits (smallest first), not in ``used``."""
    step, found = 2 * n, []
    q = (2 ** bits // step + 1) * step + 1
    while q < 2 ** min(bits + 1, MAX_MODULUS_BITS) and len(found) < count:
        if q not in used and is_prime_u31(q):
            found.append(q)
        q += step
    return found


def _pick_level(sizes, log_target, n, used, name) -> tuple[int, ...]:
    """Distinct primes of the given bit sizes (largest unused first); with ``log_target``, the last two
    are chosen as the pair whose product brings the level's product nearest 2^log_target."""
    def pool(bits, count):
        found = [q for _, q in zip(range(count), ntt_primes_of_bits(bits, n, used))]
        if not found:
            raise ParameterError(f"{name}: no unused {bits}-bit prime ≡ 1 mod 2N={2 * n} left")
        return found

    free = min(len(sizes), 2) if log_target is not None else 0
    chosen = []
    for bits in sizes[:len(sizes) - free]:
        chosen.append(pool(bits, 1)[0])
        used.add(chosen[-1])
    if free:
        rest = log_target - sum(math.log2(q) for q in chosen)
        candidates = pool(sizes[-1], 4096)
        if free == 1 and rest > sizes[-1] and sizes[-1] < MAX_MODULUS_BITS:
            # a single-prime level whose target lies above 2^bits: every prime of the requested size is below
            # it, so the scale would drift up and double at each level below; the smallest primes just above
            # 2^bits (still word-size) bring the level back to its target
            candidates += _primes_just_above(sizes[-1], n, used, 64)
        lasts = np.array(candidates, dtype=np.float64)
        firsts = np.array(pool(sizes[-2], 64) if free == 2 else [1], dtype=np.float64)
        err = np.abs(np.log2(firsts)[:, None] + np.log2(lasts)[None, :] - rest)
        err[firsts[:, None] == lasts[None, :]] = np.inf          # two distinct primes
        i, j = np.unravel_index(int(np.argmin(err)), err.shape)
        for q in ([int(firsts[i])] if free == 2 else []) + [int(lasts[j])]:
            chosen.append(q)
            used.add(q)
    return tuple(chosen)


def _balanced_digits(bits, dnum) -> tuple[tuple[int, ...], ...]:
    """Split the Q primes into ``dnum`` contiguous key-switching digits minimizing the largest digit's
    bit size (linear-partition dynamic programme), since key-switching noise grows with digit/P.

    best[k][i], the smallest possible largest digit when the first i primes form k digits, is
    min_j max(best[k-1][j], bits[j:i]); ties within 1e-9 keep the first j that improved by more
    (``_first_record``). Each k is one array operation over every (i, j): O(dnum·n²) work in numpy."""
    n = len(bits)
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(bits, dtype=np.float64))])
    inf = float("inf")
    best = np.full((dnum + 1, n + 1), inf)
    cut = np.zeros((dnum + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    i_idx, j_idx = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    last = prefix[:, None] - prefix[None, :]                      # bits of primes j..i-1
    for k in range(1, dnum + 1):
        cand = np.maximum(best[k - 1][None, :], last)
        cand[(j_idx < k - 1) | (j_idx >= i_idx)] = inf
        low = cand.min(axis=1)
        near = (cand <= low[:, None] + 1e-9).sum(axis=1)
        first = cand.argmin(axis=1)
        for i in range(k, n + 1):
            if near[i] == 1:                                      # one clear minimum: the scan keeps it
                best[k, i], cut[k, i] = low[i], first[i]
            else:
                best[k, i], cut[k, i] = _first_record(cand[i, k - 1:i], k - 1)
    bounds, i = [], n
    for k in range(dnum, 0, -1):
        bounds.append((int(cut[k, i]), i))
        i = int(cut[k, i])
    return tuple(tuple(range(a, b)) for a, b in reversed(bounds))


def _first_record(values, offset: int) -> tuple[float, int]:
    """(value, offset + index) of the last entry that improved on every earlier one by more than 1e-9."""
    value, index = float("inf"), 0
    for j, v in enumerate(values.tolist()):
        if v < value - 1e-9:
            value, index = v, j
    return value, offset + index


def _validate(p: CKKSParameters):
    """Cheap checks, in time linear in the moduli: before any derivation."""
    _check_int("log_n", p.log_n, MIN_LOG_N, MAX_LOG_N)
    if not p.q_levels or not p.p_moduli:
        raise ParameterError("q_levels and p_moduli must be non-empty")
    _check_count(sum(map(len, p.q_levels)) + len(p.p_moduli))
    _check_int("log_scale", p.log_scale, 1, 2 * MAX_MODULUS_BITS * 4)
    if not all(p.q_levels):
        raise ParameterError("every level of q_levels needs a prime")
    n = 1 << p.log_n
    all_moduli = [q for lv in p.q_levels for q in lv] + list(p.p_moduli)
    if len(set(all_moduli)) != len(all_moduli):
        raise ParameterError("moduli must be distinct")
    for q in all_moduli:
        if not (2 < q < 2**MAX_MODULUS_BITS and q % (2 * n) == 1):
            raise ParameterError(f"modulus {q} is not < 2^{MAX_MODULUS_BITS} and ≡ 1 mod 2N={2 * n}")
    n_q = len(all_moduli) - len(p.p_moduli)
    _check_int("dnum", p.dnum, 1, min(n_q, MAX_DNUM))
    base_bits = sum(math.log2(q) for q in p.q_levels[0])
    if base_bits < p.log_scale + 1:
        raise ParameterError(f"base level of {base_bits:.1f} bits must exceed log_scale={p.log_scale} "
                             "(decryption needs headroom over the scale)")
    if p.hamming_weight is not None:
        _check_int("hamming_weight", p.hamming_weight, 1, n)


def sparse_bound(log_n: int, hamming_weight: int) -> int | None:
    """The largest log2(QP) of ``SPARSE_STANDARD_128`` for a sparse secret of this weight (None: no cited set)."""
    bounds = [q for h, q in SPARSE_STANDARD_128.get(log_n, ()) if hamming_weight >= h]
    return max(bounds) if bounds else None


def _check_security(p: CKKSParameters):
    bound = HE_STANDARD_128.get(p.log_n)
    if p.insecure:
        if p.log_n > 12:
            raise ParameterError(f"insecure=True is only allowed for test rings (log_n <= 12), got log_n={p.log_n}")
        return
    if bound is None:
        raise ParameterError(f"log_n={p.log_n} has no 128-bit entry in the HE standard (needs log_n >= 10); "
                             "use insecure=True for tiny test rings")
    if p.hamming_weight is not None:
        _check_sparse(p)
    if p.log_qp > bound:
        raise ParameterError(f"log2(QP)={p.log_qp:.1f} exceeds the 128-bit HE-standard bound {bound} "
                             f"for N=2^{p.log_n}")


def _check_sparse(p: CKKSParameters):
    """A sparse secret is 128-bit only within a cited set of ``SPARSE_STANDARD_128`` (weight and log2(QP))."""
    h, sparse = p.hamming_weight, sparse_bound(p.log_n, p.hamming_weight)
    if sparse is None:
        weights = [w for w, _ in SPARSE_STANDARD_128.get(p.log_n, ())]
        raise ParameterError(f"hamming_weight={h}: a sparse secret is weaker than the dense ternary secret of the "
                             "128-bit table (hybrid and meet-in-the-middle attacks); the cited sparse sets at "
                             f"log_n={p.log_n} need h >= {min(weights) if weights else 'none (no set)'} "
                             "(SPARSE_STANDARD_128); only insecure=True (test rings) allows others")
    if p.log_qp > sparse:
        raise ParameterError(f"hamming_weight={h}: a sparse secret at N=2^{p.log_n} is 128-bit only up to log2(QP) "
                             f"= {sparse} (the cited sets of SPARSE_STANDARD_128); log2(QP)={p.log_qp:.1f} exceeds "
                             f"{sparse}; only insecure=True (test rings) allows more")


def _check_digits(p: CKKSParameters):
    """Hybrid key switching multiplies noise by (largest digit)/P: refuse digits far above P."""
    log_p = sum(math.log2(q) for q in p.p_moduli)
    worst = max(sum(math.log2(p.q_moduli[i]) for i in d) for d in p.digits)
    if worst > log_p + 20:
        raise ParameterError(f"dnum={p.dnum} gives key-switching digits of {worst:.0f} bits, more than "
                             f"log2(P)={log_p:.0f} + 20: raise dnum or add special primes (log_p)")
