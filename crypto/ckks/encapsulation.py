"""Sparse-secret encapsulation for bootstrapping (Bossuat, Troncoso-Pastoriza, Hubaux, "Bootstrapping for
approximate homomorphic encryption with negligible failure-probability by using sparse-secret
encapsulation", ACNS 2022).

ModRaise turns a level-0 ciphertext into one that decrypts to m + q_0·I, and EvalMod must remove q_0·I for
every |I_k| < K.  Under the dense ternary secret s, I_k sums about 2N/3 uniform terms (K ≈ 540 at
N = 2^16): a long cosine series and many double angles, whose noise costs most of the precision.  Here the
level-0 ciphertext is first switched to an ephemeral sparse secret s' of Hamming weight h:

    (c0, c1) under s, mod q_0   ->   (c0 + ⌊c1·k/P'⌉, ...) under s', mod q_0

with a switching key k from s to s' over the small modulus q_0·P' only (P' one special prime, the q_0 primes
as digits), raised, and switched back from s' to s at the top level with an ordinary key (an encryption of
s' under s: as secure as every other evaluation key).  Under s', |c0 + c1·s'| <= (1 + h)·q_0/2 in every
coefficient, so |I_k| <= (h + 1)/2 + 1/2 always: ``k_bound`` = ⌊h/2⌋ + 2 with no failure probability at all.

Security: the key to s' is an RLWE sample with a sparse secret, published only over q_0·P' (about 91 bits);
``encapsulation_parameters`` is checked against the cited sparse-secret sets (``params.SPARSE_STANDARD_128``:
at N = 2^16, h = 32 up to 121 bits, 172 bits of estimated security) and refused outside them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ParameterError
from ..keyswitch import KeySwitcher, SwitchingKey, make_switching_key
from ..params import CKKSParameters
from ..ring import RingContext, RNSPoly
from ..rlwe import KeyGenerator, SecretKey

#: the ephemeral secret's Hamming weight when a config asks for encapsulation without one (Lattigo's and
#: HEaaN's choice; the cited set at N = 2^16)
DEFAULT_WEIGHT = 32


def encapsulation_parameters(params, weight: int) -> CKKSParameters:
    """The small parameter set the key to the sparse secret lives in: the base level's primes (one digit
    each) and the largest special prime (P' about one digit: key-switching noise of a few bits), Hamming
    weight ``weight``; checked against the cited 128-bit sparse sets unless ``params`` are insecure."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= params.n // 2:
        raise ParameterError(f"encapsulation={weight!r} (the sparse secret's Hamming weight) must be an "
                             f"integer in [1, N/2={params.n // 2}]")
    base = params.q_levels[0]
    try:
        return CKKSParameters(log_n=params.log_n, q_levels=(tuple(base),), p_moduli=(max(params.p_moduli),),
                              log_scale=params.log_scale, dnum=len(base), hamming_weight=weight,
                              insecure=params.insecure)
    except ParameterError as exc:
        raise ParameterError(f"encapsulation={weight}: the key to the sparse secret (modulus q_0·P', "
                             f"{params.log_n=}) is not within a cited 128-bit sparse-secret set: {exc}") from None


def k_bound(weight: int) -> float:
    """K with |I_k| < K for every coefficient after ModRaise under a secret of Hamming weight ``weight``."""
    return float(weight // 2 + 2)


@dataclass(frozen=True, eq=False)
class EncapsulationKeys:
    """The two keys of sparse-secret encapsulation: ``to_sparse`` (s -> s', over ``small.moduli``) and
    ``from_sparse`` (s' -> s, over the full moduli); ``weight`` is the Hamming weight of s'."""

    weight: int
    to_sparse: SwitchingKey = field(repr=False)
    from_sparse: SwitchingKey = field(repr=False)

    @property
    def nbytes(self) -> int:
        return self.to_sparse.nbytes + self.from_sparse.nbytes


def make_encapsulation_keys(params, ring, sampler, sk: SecretKey, weight: int,
                            sparse_coeffs=None) -> EncapsulationKeys:
    """A fresh ephemeral sparse secret s' (OS CSPRNG unless the sampler is seeded) and the two keys; s' itself
    is dropped.  ``sparse_coeffs``: s' given instead (tests, which decrypt under it)."""
    small = encapsulation_parameters(params, weight)
    small_ring = RingContext(small.n, small.moduli, ring.backend)
    small_gen = KeyGenerator(small, small_ring, sampler)
    if sparse_coeffs is None:
        sparse = small_gen.secret_key()                                   # weight-h ternary, NTT over q_0·P'
    else:
        sparse = small_gen.secret_key_from_coeffs(sparse_coeffs)
        if np.count_nonzero(sparse.coeffs) != weight or np.abs(sparse.coeffs).max() > 1:
            raise ParameterError(f"sparse_coeffs must be ternary with exactly {weight} nonzero coefficients")
    dense_small = RNSPoly.from_ints(small_ring, sk.coeffs, tuple(range(len(small.moduli))), is_ntt=True)
    to_sparse = make_switching_key(small, small_ring, sampler, sparse.poly.data, dense_small.data)
    sparse_full = KeyGenerator(params, ring, sampler).secret_key_from_coeffs(sparse.coeffs)
    from_sparse = make_switching_key(params, ring, sampler, sk.poly.data, sparse_full.poly.data)
    return EncapsulationKeys(weight, to_sparse, from_sparse)


class Encapsulator:
    """Switches level-0 parts to the sparse secret and raised parts back (one per evaluator and key set)."""

    def __init__(self, params, ring, keys: EncapsulationKeys, switcher: KeySwitcher):
        self.params, self.ring, self.keys, self.switcher = params, ring, keys, switcher
        self.small = encapsulation_parameters(params, keys.weight)
        self.small_ring = RingContext(self.small.n, self.small.moduli, ring.backend)
        self.small_switcher = KeySwitcher(self.small, self.small_ring)
        if keys.to_sparse.moduli != self.small.moduli or keys.from_sparse.moduli != tuple(params.moduli):
            raise ParameterError("encapsulation keys were made for other parameters")

    def to_sparse(self, c0: RNSPoly, c1: RNSPoly) -> tuple[RNSPoly, RNSPoly]:
        """(c0, c1) at level 0 under s -> the same plaintext under s' (NTT form over the base primes)."""
        base = tuple(range(self.params.limbs_at(0)))
        if c0.idx != base or c1.idx != base:
            raise ParameterError(f"encapsulation switches level-0 parts (limbs {base}), got {c1.idx}")
        d0, d1 = self.small_switcher.switch(RNSPoly(self.small_ring, c1.to_ntt().data, base, True),
                                            self.keys.to_sparse)
        return c0.to_ntt() + RNSPoly(self.ring, d0.data, base, True), RNSPoly(self.ring, d1.data, base, True)

    def from_sparse(self, c0: RNSPoly, c1: RNSPoly) -> tuple[RNSPoly, RNSPoly]:
        """(c0, c1) under s' at any level -> the same plaintext under s (plus key-switching noise): c0 lifted by P
        into the key switch's part b, its digits all at once in the switcher's transient scratch (the one the
        bootstrap's double-hoisted babies fill next; ``KeySwitcher.switch`` streams them, the same residues)."""
        switcher = self.switcher
        digits = switcher.decompose(c1.to_ntt(), transient=True)
        b, a = switcher.inner_product(digits, self.keys.from_sparse, lift=(c0.to_ntt(), None), transient=True)
        return switcher.mod_down(b), switcher.mod_down(a)
