"""CKKS bootstrapping: ModRaise, CoeffToSlot, EvalMod, SlotToCoeff (Cheon, Han, Kim, Kim, Song,
"Bootstrapping for approximate homomorphic encryption", EUROCRYPT 2018).

A ciphertext at level 0 decrypts to m(X) modulo q_0 (the base level's modulus).  The pipeline:

1. **ModRaise**: the centred residues of (c0, c1) mod q_0 are lifted exactly to every prime of the top
   level; the result decrypts to m + q_0·I over Q_L, with I an integer polynomial, |I_k| < K
   (``k_bound``).  Its scale is declared q_0·K, so the coefficients read as t/K, t = I + m/q_0.
   A multiplication by an integer and one rescale bring the scale down to the working scale (one level), or,
   where CoeffToSlot's plaintexts keep enough bits (Δ = 2^60), CoeffToSlot absorbs it (``raise_levels``).
   With sparse-secret encapsulation (``crypto.ckks.encapsulation``, the default at N = 2^16) the level-0
   ciphertext is switched to an ephemeral weight-h secret first and back after the lift: K = h/2 + 2.
2. **SubSum** (sparse slot counts n_s < N/2 only): Σ_{i<g} rot(ct, i·n_s), g = N/(2 n_s), computed in
   log2(g) rotations, is the trace onto the subring Z[X^g] (times g, removed from the scale): the
   message becomes an n_s-slot polynomial of 2·n_s coefficients and slot j holds Σ_i x_{j + i·n_s} (the
   input is zero-padded beyond n_s, as ``encrypt`` makes it: slot j holds x_{j mod n_s}); SlotToCoeff
   masks the output back to zero-padded (``BootstrapPlan.stc``).
3. **CoeffToSlot**: the inverse special FFT as log2(n_s) sparse butterfly matrices (3 diagonals each),
   merged into ``cts_levels`` groups (level collapsing: a group of k stages has 2^(k+1)-1 diagonals),
   each evaluated with baby-step giant-step rotations (Halevi, Shoup, CRYPTO 2014 and 2018; Chen,
   Chillotti, Song, "Improved bootstrapping for approximate homomorphic encryption", EUROCRYPT 2019), double
   hoisted (Bossuat, Mouchet, Troncoso-Pastoriza, Hubaux, EUROCRYPT 2021, section 4.4;
   ``Evaluator.linear_transform_hoisted``): one ModUp for the babies, their rotations and the products with the
   diagonals kept over Q·P, a ModDown per rotated giant's part a and one at the end with the rescale fused (at
   N16_BOOT's top level a 63-diagonal transform took 2.87 s of CPU instead of 3.24 s; 1.16 instead of 1.35 at
   level 10).
   The bit reversal of the FFT is skipped: the slots come out in bit-reversed order, which EvalMod (slot
   by slot) ignores and SlotToCoeff expects.  The real and imaginary parts are split with one
   conjugation (w ± conj(w), the second times -i): two ciphertexts of N/2 real slots (full slots) or one of 2·n_s (sparse).
4. **EvalMod**: t - round(t) ≈ sin(2πt)/(2π) for |t - round(t)| = |m/q_0| ≪ 1.  sin(2πt) = cos(2π(t -
   1/4)) is computed as cos(2π(t - 1/4)/2^r) by a Chebyshev interpolant on y = t/K ∈ [-1, 1], then r
   double-angle steps cos 2θ = 2cos²θ - 1 (Han, Ki, "Better bootstrapping for approximate homomorphic
   encryption", CT-RSA 2020: a scaled cosine keeps the interpolated argument range 2π·K/2^r small, so the
   degree stays low while the depth grows only by r; Bossuat, Mouchet, Troncoso-Pastoriza, Hubaux,
   "Efficient bootstrapping for approximate homomorphic encryption with non-sparse keys", EUROCRYPT 2021,
   choose the same cosine family for dense keys).  Error: the interpolant is accurate to 2^-46 on
   [-1, 1]; a double-angle step multiplies an absolute error δ by at most 4|cos θ| ≤ 4, so r steps by
   at most 4^r.  The sine itself errs by (2π ε)³/6 relative to 2πε (ε = m/q_0 ≈ 2^-10·x at the presets'
   scale ratio): about 17 bits, so by default the first two terms of arcsin, y + y³/6 (two more levels),
   are applied: their error is 3y⁵/40, relative 2^-33 (``approximation_error`` states it for the worst
   coefficient and ``precision_bits`` adds it).  The series Σ c_k T_k is evaluated by baby-step giant-step
   (``bsgs_schedule``, ``chebyshev_split``: p = q·T_n + r recursively, Paterson-Stockmeyer style as in Han
   and Ki and in Bossuat et al.): degree 39 in 6 levels and 13 products instead of 7 levels and 38.  Each
   product is one fused ``Evaluator.mul_add_rescale``: the factor 2 and the subtrahend of the recurrences
   (2·T_a·T_b - T_(a-b), 2c² - 1) and the remainder r of q·T_n + r (not rescaled on its own) join the tensor
   before the relinearization's ModDown, which also divides by the top level's primes: one rounding and one
   ModDown per product instead of a ModDown and a rescale (N16_BOOT: EvalMod ~1 s less of ~8, the same bits);
   the leaves are integer combinations of one pass per term (``Evaluator.mul_int_add``).
5. **SlotToCoeff**: the special FFT (butterflies without bit reversal), ``stc_levels`` merged groups;
   its input is recombined as t_lo + i·t_hi (multiplication by i is the exact monomial X^(N/2)).

Constants are folded into the scales (a scale is metadata: a ciphertext holding v at scale S holds c·v
at scale S/c), and every plaintext is encoded at the scale that makes its level land on the *natural
scale* of the next level (the scale a fresh top-level ciphertext reaches there by squarings), so that
scales never drift through the squarings of EvalMod.

Every stage has a plaintext numpy twin here (``apply_diagonals``, ``cts_reference``, ``stc_reference``,
``eval_mod_reference``), against which the tests check it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np
from numpy.polynomial import chebyshev as cheb

from ..errors import KeyMissingError, LevelError, ParameterError, ScaleError
from ..keyswitch import CenteredConversion
from ..ntt import bit_reverse_indices
from ..ring import RNSPoly
from ..rlwe import Ciphertext, Plaintext
from .encapsulation import DEFAULT_WEIGHT, Encapsulator, encapsulation_parameters, k_bound as encapsulated_k_bound
from .encoder import CKKSEncoder, subring_period
from .linear import bsgs_sum

#: log2 of the tolerated probability that some |I_k| reaches K in one bootstrap (Gaussian estimate)
FAILURE_LOG2 = 40
#: accuracy the Chebyshev interpolant of the scaled cosine is built to on [-1, 1]
INTERPOLATION_BITS = 46
MAX_DEGREE = 255
#: the smallest plaintext scale (bits) at which CoeffToSlot takes ModRaise's output without a rescale of its own
MERGED_PLAINTEXT_BITS = 52
#: a bootstrap refuses an input scale above 2^MAX_INPUT_SCALE_BITS · Δ (``Bootstrapper.bootstrap``)
MAX_INPUT_SCALE_BITS = 1.0


@dataclass(frozen=True)
class BootstrapConfig:
    """What a bootstrap does; ``None`` fields are derived from the parameters (``BootstrapPlan``).

    ``slots``: n_s, a power of two <= N/2 (None: N/2); ``cts_levels``/``stc_levels``: levels of the
    CoeffToSlot/SlotToCoeff transforms (level collapsing); ``k_bound``: K with |I_k| < K after ModRaise;
    ``double_angles``: r; ``degree``: the Chebyshev degree; ``arcsin``: apply y + y³/6 (two levels);
    ``encapsulation``: the Hamming weight h of an ephemeral sparse secret the level-0 ciphertext is switched
    to before ModRaise (``crypto.ckks.encapsulation``: K = ⌊h/2⌋ + 2 with no failure probability, instead of
    K ≈ 540 at N = 2^16 for the dense secret), None (ModRaise under the secret itself) or "auto" (the default:
    h = 32 where that is a cited 128-bit set, i.e. dense-secret parameters at N = 2^16; otherwise None)."""

    slots: int | None = None
    cts_levels: int = 3
    stc_levels: int = 3
    k_bound: float | None = None
    double_angles: int | None = None
    degree: int | None = None
    arcsin: bool = True
    encapsulation: int | str | None = "auto"

    def __post_init__(self):
        for name in ("cts_levels", "stc_levels"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 16:
                raise ParameterError(f"{name}={v!r} must be an integer in [1, 16]")
        for name, lo, hi in (("double_angles", 0, 16), ("degree", 2, MAX_DEGREE)):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
                raise ParameterError(f"{name}={v!r} must be None or an integer in [{lo}, {hi}]")
        if self.encapsulation not in (None, "auto") and (isinstance(self.encapsulation, bool) or not isinstance(
                self.encapsulation, int) or self.encapsulation < 1):
            raise ParameterError(f"encapsulation={self.encapsulation!r} must be None, 'auto' or a Hamming weight >= 1")
        if self.k_bound is not None and not (isinstance(self.k_bound, (int, float)) and 1 <= self.k_bound <= 2**16):
            raise ParameterError(f"k_bound={self.k_bound!r} must be None or a number in [1, 65536]")


def _encapsulation_weight(params, encapsulation) -> int | None:
    """The Hamming weight a config's ``encapsulation`` means for these parameters ("auto": the cited h = 32
    set for a dense secret of 128-bit parameters, where one exists); a given weight outside the cited sets is
    refused (``encapsulation_parameters``)."""
    if encapsulation is None:
        return None
    if encapsulation != "auto":
        encapsulation_parameters(params, encapsulation)
        return encapsulation
    if params.hamming_weight is not None or params.insecure:
        return None
    try:
        encapsulation_parameters(params, DEFAULT_WEIGHT)
    except ParameterError:
        return None
    return DEFAULT_WEIGHT


def as_config(config) -> BootstrapConfig:
    """A BootstrapConfig from None/True (defaults), an int (the slot count) or a BootstrapConfig."""
    if config is None or config is True:
        return BootstrapConfig()
    if isinstance(config, BootstrapConfig):
        return config
    if isinstance(config, (int, np.integer)) and not isinstance(config, bool):
        return BootstrapConfig(slots=int(config))
    raise ParameterError(f"bootstrap={config!r} must be True, a slot count or a BootstrapConfig")


# -- matrices in diagonal form ----------------------------------------------------------------------
# A linear map of the slot vector (length M = N/2) is {k: d_k}: v -> Σ_k d_k ⊙ rot_k(v), rot_k(v)[j] =
# v[(j + k) mod M] (``Evaluator.rotate`` by k).

def apply_diagonals(diags: dict, v: np.ndarray) -> np.ndarray:
    """Σ_k d_k ⊙ rot_k(v) (plaintext twin of the homomorphic linear transform)."""
    v = np.asarray(v, dtype=np.complex128)
    out = np.zeros_like(v)
    for k, d in diags.items():
        out += d * np.roll(v, -k)
    return out


def compose(a: dict, b: dict, length: int) -> dict:
    """The diagonals of a∘b (b applied first): d_k = Σ_{i+j=k} a_i ⊙ rot_i(b_j)."""
    out: dict = {}
    for i, da in a.items():
        for j, db in b.items():
            k = (i + j) % length
            term = da * np.roll(db, -i)
            out[k] = out[k] + term if k in out else term
    return {k: d for k, d in out.items() if np.any(d != 0)}


def _stage(slots: int, length: int, half: int, w_low, w_high_diag, w_plus, w_minus, total: int) -> dict:
    """A butterfly stage on blocks of ``length`` (within each n_s chunk, tiled to ``total``)."""
    d0 = np.empty(slots, dtype=np.complex128)
    dp = np.zeros(slots, dtype=np.complex128)
    dm = np.zeros(slots, dtype=np.complex128)
    blocks = slots // length
    d0.reshape(blocks, length)[:, :half] = w_low
    d0.reshape(blocks, length)[:, half:] = w_high_diag
    dp.reshape(blocks, length)[:, :half] = w_plus
    dm.reshape(blocks, length)[:, half:] = w_minus
    reps = total // slots
    out = {0: np.tile(d0, reps), half % total: np.tile(dp, reps)}
    minus = (-half) % total                      # = +half when half = total/2: the two diagonals add
    out[minus] = out[minus] + np.tile(dm, reps) if minus in out else np.tile(dm, reps)
    return out


def inverse_stages(slots: int, total: int) -> list[dict]:
    """The inverse special FFT of ``slots`` values without its bit reversal, as butterfly stages in the
    order applied, each with a factor 1/2 (so that their product is embed_inverse up to bit reversal)."""
    enc = CKKSEncoder(2 * slots)
    stages, length = [], slots
    for tw in reversed(enc._inverse_twiddles):
        half = length // 2
        stages.append(_stage(slots, length, half, 0.5, -0.5 * tw, 0.5, 0.5 * tw, total))
        length //= 2
    return stages


def forward_stages(slots: int, total: int) -> list[dict]:
    """The special FFT of ``slots`` values after its bit reversal, as butterfly stages in the order applied."""
    enc = CKKSEncoder(2 * slots)
    stages, length = [], 2
    for tw in enc._forward_twiddles:
        half = length // 2
        stages.append(_stage(slots, length, half, 1.0, -tw, tw, 1.0, total))
        length *= 2
    return stages


def _groups(stages: list[dict], count: int, total: int, larger_last: bool = False) -> list[dict]:
    """Merge consecutive stages into ``count`` matrices (level collapsing), sizes as even as possible, the larger
    groups first (``larger_last``: last)."""
    count = min(count, len(stages))
    sizes = [len(stages) // count + (i < len(stages) % count) for i in range(count)]
    if larger_last:
        sizes.reverse()
    out, start = [], 0
    for size in sizes:
        m = stages[start]
        for s in stages[start + 1: start + size]:
            m = compose(s, m, total)
        out.append(m)
        start += size
    return out


@dataclass(frozen=True)
class _Transform:
    """One level of a linear transform: diagonals and their BSGS split {giant shift: [(baby, k)]}."""

    diags: dict
    split: dict

    @property
    def steps(self) -> set[int]:
        return {b for terms in self.split.values() for b, _ in terms if b} | {s for s in self.split if s}

    @cached_property
    def full_period(self) -> frozenset:
        """The offsets k whose diagonal (rotated or not: a roll keeps the period) takes the full encoding."""
        return frozenset(k for k, d in self.diags.items() if subring_period(d) is None)


def bsgs_split(offsets, total: int) -> dict:
    """{giant shift: [(baby step, offset)]}, offset = shift + baby (mod total); offsets are read as
    signed multiples j·h of their gcd h, babies h·(0..G-1), G the power of two at or above sqrt of the span of
    j (rounded up, not to the nearest: a giant rotation, a full ModUp, costs about five hoisted babies), giants
    at the multiples of G·h: one of them is 0 (no rotation) and shifts equal mod ``total`` share a giant, so a
    centred span of G² - 1 offsets takes G - 1 rotated giants (the lowest offset as the first giant would take
    G)."""
    signed = [k if k <= total // 2 else k - total for k in offsets]
    h = 0
    for k in signed:
        h = math.gcd(h, abs(k))
    h = h or 1
    js = [k // h for k in signed]
    span = max(js) - min(js) + 1
    g = 1 << max(0, math.ceil(math.log2(math.sqrt(span)) - 1e-9))
    split: dict = {}
    for k, j in zip(offsets, js):
        a, b = divmod(j, g)                      # floor division: j = g·a + b, 0 <= b < g, for negative j too
        split.setdefault((h * g * a) % total, []).append(((h * b) % total, k))
    return split


def _transform(diags: dict, total: int) -> _Transform:
    return _Transform(diags, bsgs_split(sorted(diags), total))


# -- plan ------------------------------------------------------------------------------------------
def natural_scales(params) -> list[float]:
    """s_L = Δ and s_(ℓ-1) = s_ℓ² / q_ℓ (q_ℓ the product of level ℓ's primes): the scale a fresh
    top-level ciphertext has at each level after squarings, the scale the presets' primes keep near Δ."""
    scales = [0.0] * (params.max_level + 1)
    s = params.scale
    for level in range(params.max_level, -1, -1):
        scales[level] = s
        s = s * s / math.prod(params.q_levels[level])
    return scales


def default_k_bound(params) -> float:
    """K such that |I_k| < K with probability about 1 - 2^-FAILURE_LOG2 over all N coefficients.

    I_k = round((c0 + c1·s)_k / q_0) with c1 uniform: a sum of h (the secret's weight) terms uniform in
    [-1/2, 1/2], plus one: variance (h + 1)/12, tail taken as Gaussian (central limit, a heuristic;
    Hoeffding's bound would be √3 larger).  Dense ternary secrets: h = 2N/3 + 6 standard deviations."""
    n = params.n
    h = params.hamming_weight
    if h is None:
        h = 2 * n / 3 + 6 * math.sqrt(n * 2 / 9)
    sigma = math.sqrt((h + 1) / 12)
    tau = math.sqrt(2 * (math.log(2 * n) + FAILURE_LOG2 * math.log(2)))
    return float(math.ceil(tau * sigma + 1))


def _cosine(k_bound: float, r: int):
    """y -> cos(2π(K·y - 1/4) / 2^r)."""
    return lambda y: np.cos(2 * np.pi * (k_bound * np.asarray(y) - 0.25) / 2**r)


def chebyshev_fit(k_bound: float, r: int, degree: int | None = None) -> np.ndarray:
    """Chebyshev coefficients of the scaled cosine on [-1, 1]: the given degree, or the smallest one
    accurate to 2^-INTERPOLATION_BITS on a dense grid."""
    f = _cosine(k_bound, r)
    if degree is not None:
        return cheb.chebinterpolate(f, degree)
    grid = np.linspace(-1, 1, 20001)
    exact = f(grid)
    tol = 2.0**-INTERPOLATION_BITS
    c = np.abs(cheb.chebinterpolate(f, MAX_DEGREE))
    # past the argument range the coefficients decay faster than geometrically (down to float64's floor):
    # the truncation error of degree d is about |c_(d+1)| + |c_(d+2)|; start there, confirm on the grid
    start = next((d for d in range(4, MAX_DEGREE - 1) if c[d + 1] + c[d + 2] <= tol / 4), None)
    for d in range(start or MAX_DEGREE + 1, MAX_DEGREE + 1):
        coeffs = cheb.chebinterpolate(f, d)
        if np.max(np.abs(cheb.chebval(grid, coeffs) - exact)) <= tol:
            return coeffs
    raise ParameterError(f"k_bound={k_bound} with double_angles={r} needs a Chebyshev degree above "
                         f"{MAX_DEGREE}: raise double_angles")


def approximation_error(params, slots: int, arcsin: bool) -> float:
    """Slot error of sin(2πε)/(2π) (or of its arcsin correction y + y³/6) against ε = m/q_0, for a
    coefficient m of the message as large as Δ (a constant input; the sparse trace divides it by g = N/(2 n_s),
    the slots multiply the error back by g): (q_0/Δ)·g/(2π)·e(2π·Δ/(g·q_0)), e(y) = y³/6 (the sine alone) or
    3y⁵/40 (arcsin's next term).  The interpolant's own 2^-46 is below both at the presets' ratios."""
    ratio = params.modulus_at(0) / params.scale
    g = params.n // (2 * slots)
    y = 2 * math.pi / (g * ratio)
    e = 3 * y**5 / 40 if arcsin else y**3 / 6
    return ratio * g / (2 * math.pi) * e


def chebyshev_split(coeffs, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(q, r) with Σ c_k T_k = q·T_n + r, deg q = deg - n, deg r < n, for deg < 2n: from T_(n+i) =
    2 T_n T_i - T_(n-i) (i >= 1): q_0 = c_n, q_i = 2 c_(n+i), r_k = c_k - c_(2n-k)."""
    c = np.asarray(coeffs, dtype=np.float64)
    d = len(c) - 1
    if not n <= d < 2 * n:
        raise ParameterError(f"degree {d} must be in [n, 2n) for n={n}")
    q = 2 * c[n:].copy()
    q[0] = c[n]
    r = c[:n].copy()
    for i in range(1, d - n + 1):
        r[n - i] -= c[n + i]
    return q, r


def _depth(degree: int) -> int:
    return max(1, math.ceil(math.log2(degree)))


def bsgs_schedule(degree: int) -> tuple[int, int, int]:
    """(b, levels, products) of the cheapest baby-step giant-step evaluation of a degree-d Chebyshev
    series (``Bootstrapper._poly``): babies T_1..T_(b-1) (T_k at depth ceil(log2 k)), giants T_(b·2^j) at
    depth log2(b) + j; a leaf (degree < b) needs its babies one level above its own, a split q·T_n + r
    needs T_n and q one level above.  Fewest levels first (ceil(log2 d) when some b allows it, else one
    more: the naive evaluation's), then fewest ciphertext products; b = 0: the naive evaluation."""
    depth = _depth(degree)

    def level_of(k, b):
        if k < b:
            return -math.ceil(math.log2(k)) if k > 1 else 0
        return -(int(math.log2(b)) + int(math.log2(k // b)))

    def rec(d, t, b):
        """Products of evaluating degree d at level t (relative to the input's), or None if infeasible."""
        if d < b:
            return 0 if d == 0 or level_of(d, b) >= t + 1 else None
        n = b
        while 2 * n <= d:
            n *= 2
        if level_of(n, b) < t + 1:
            return None
        q, r = rec(d - n, t + 1, b), rec(n - 1, t, b)
        return None if q is None or r is None else q + r + 1

    best = (depth + 1, degree - 1, 0)
    for levels in (depth, depth + 1):
        for log_b in range(1, depth + 1):
            b = 1 << log_b
            if 2 * b > degree:
                break
            inner = rec(degree, -levels, b)
            if inner is None:
                continue
            giants = 0
            while b << giants <= degree:
                giants += 1
            products = (b - 2) + giants + inner
            if (levels, products) < best[:2]:
                best = (levels, products, b)
    return best[2], best[0], best[1]


class BootstrapPlan:
    """Everything a bootstrap needs that depends only on the parameters and the config: the merged
    CoeffToSlot/SlotToCoeff matrices, the EvalMod polynomial, the levels and the rotation steps."""

    def __init__(self, params, config: BootstrapConfig | None = None):
        config = as_config(config)
        self.params, self.config = params, config
        n = params.n
        self.total = n // 2
        slots = self.total if config.slots is None else config.slots
        if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 2 or slots & (slots - 1) \
                or slots > self.total:
            raise ParameterError(f"slots={slots!r} must be a power of two in [2, N/2={self.total}]")
        self.slots = int(slots)
        self.sparse = self.slots < self.total
        self.encapsulation_weight = _encapsulation_weight(params, config.encapsulation)
        if config.k_bound is not None:
            self.k_bound = float(config.k_bound)
        elif self.encapsulation_weight is not None:
            self.k_bound = encapsulated_k_bound(self.encapsulation_weight)
        else:
            self.k_bound = default_k_bound(params)
        self.double_angles, self.coeffs = self._choose_polynomial()
        self.degree = len(self.coeffs) - 1
        self.poly_levels = bsgs_schedule(self.degree)[1]
        self.eval_mod_levels = self.poly_levels + self.double_angles + 2 * config.arcsin
        stages_c, stages_s = inverse_stages(self.slots, self.total), forward_stages(self.slots, self.total)
        self.cts_count = min(config.cts_levels, len(stages_c))
        self.stc_count = min(config.stc_levels, len(stages_s))
        self.cts_plaintext_scale = self._shared_plaintext_scale()
        self.raise_levels = 0 if math.log2(self.cts_plaintext_scale) >= MERGED_PLAINTEXT_BITS else 1
        self.levels_used = self.raise_levels + self.cts_count + self.eval_mod_levels + self.stc_count
        self.levels_left = params.max_level - self.levels_used
        if self.levels_left < 0:
            raise LevelError(f"bootstrapping needs {self.levels_used} levels ({self.raise_levels} + CoeffToSlot "
                             f"{self.cts_count} + "
                             f"EvalMod {self.eval_mod_levels} + SlotToCoeff {self.stc_count}); the parameters "
                             f"have {params.max_level}: use more levels or fewer transform levels")
        # CoeffToSlot: its last group also takes the factor 1/2 of Re(w) = (w + conj w)/2 and, for sparse
        # slots, e = [1 | -i] (period 2 n_s), so that y + conj(y) = [Re w | Im w].
        cts = _groups(stages_c, self.cts_count, self.total)
        e = np.full(self.total, 0.5, dtype=np.complex128)
        if self.sparse:
            e = np.tile(np.concatenate([np.full(self.slots, 0.5), np.full(self.slots, -0.5j)]),
                        self.total // (2 * self.slots))
        cts[-1] = compose({0: e}, cts[-1], self.total)
        self.cts = [_transform(m, self.total) for m in cts]
        # SlotToCoeff: for sparse slots the first group also recombines [a | b] into a + i·b on both halves.
        # the larger groups last: SlotToCoeff's groups mirror CoeffToSlot's (the same butterfly spans, so the same
        # diagonal offsets and rotation keys) where the stages do not split evenly (4/4 levels at N16_BOOT: 32
        # rotation keys instead of 45), and its first group, at the highest level, is the smaller
        stc = _groups(stages_s, self.stc_count, self.total, larger_last=True)
        if self.sparse:
            ns, reps = self.slots, self.total // (2 * self.slots)
            ones, zeros = np.ones(ns), np.zeros(ns)
            combine = {0: np.tile(np.concatenate([ones, 1j * ones]), reps)}
            plus = np.tile(np.concatenate([1j * ones, zeros]), reps)
            minus = np.tile(np.concatenate([zeros, ones]), reps)
            for k, d in ((ns % self.total, plus), ((-ns) % self.total, minus)):
                combine[k] = combine[k] + d if k in combine else d
            stc[0] = compose(stc[0], combine, self.total)
            # and the last group keeps slots [0, n_s) only (a free diagonal mask): the output is zero-padded
            # like a fresh encryption, so a bootstrapped ciphertext can be bootstrapped again (SubSum sums
            # the g blocks: a periodic input would come back multiplied by g)
            mask = np.zeros(self.total)
            mask[:ns] = 1.0
            stc[-1] = compose({0: mask}, stc[-1], self.total)
        self.stc = [_transform(m, self.total) for m in stc]

    def _shared_plaintext_scale(self) -> float:
        """The scale each CoeffToSlot plaintext gets when CoeffToSlot takes ModRaise's output (scale q_0·K·g) as
        it is: the ratio (natural scale after CoeffToSlot)·Π q_ℓ / (q_0·K·g), shared equally.  ``raise_levels``
        is 0 (no rescale of ModRaise's own) when it keeps >= 2^MERGED_PLAINTEXT_BITS (Δ = 2^60 parameters: a
        level saved; at Δ = 2^50 their rounding would cost bits, and the separate level stays); 1 otherwise, and
        at parameters too shallow for a bootstrap (the plan refuses them below)."""
        p, top = self.params, self.params.max_level
        if top - self.cts_count < 0:
            return 1.0
        log_tops = sum(math.log2(math.prod(p.q_levels[lv])) for lv in range(top, top - self.cts_count, -1))
        log_in = math.log2(p.modulus_at(0) * self.k_bound * (self.total // self.slots))
        return 2.0 ** ((math.log2(natural_scales(p)[top - self.cts_count]) + log_tops - log_in) / self.cts_count)

    def _choose_polynomial(self):
        cfg = self.config
        if cfg.double_angles is not None:
            return cfg.double_angles, chebyshev_fit(self.k_bound, cfg.double_angles, cfg.degree)
        best = None
        for r in range(0, 13):
            try:
                coeffs = chebyshev_fit(self.k_bound, r, cfg.degree)
            except ParameterError:
                continue
            _, levels, products = bsgs_schedule(len(coeffs) - 1)
            # fewest levels, then fewest ciphertext products (a double angle is one): at N16_BOOT r = 4 and
            # degree 28 (15 products) instead of r = 3 and degree 40 (17), ~1 s less for 0.05 bit
            key = (levels + r, products + r, r)
            if best is None or key < best[0]:
                best = (key, r, coeffs)
        return best[1], best[2]

    @property
    def precision_bits(self) -> float:
        """The precision this library states for the bootstrap (bits, worst slot, |x| <= 1, input scale Δ;
        tests/crypto/test_bootstrap.py asserts it).  An error δ in the EvalMod variable y = t/K is an error
        K·δ·q_0/Δ per coefficient and about sqrt(2 n_s) times that per slot (the sparse trace divides the
        message by g first: g times more); δ ≈ 2^12·sqrt(N/2^12)·sqrt((h + 1)/33)/Δ_EvalMod, the noise of a
        few rotations and products at the working scale (a rescale's rounding r_0 + r_1·s grows with the
        secret's weight h: dense ternary h ≈ 2N/3).  EvalMod's own rounding noise, amplified by its
        Chebyshev series (argument range 2πK/2^r) and the double angles, grows faster than K: measured
        about K^1.6 above K = 16, counted as 0.6·log2(K/16) bits.  Calibrated on N = 2^12 with h = 32
        (K = 16, measured 1.5-2 bits above) and dense (K = 135: measured 11.0 bits, stated 9.6), and on the
        dense N = 2^16 bootstrap of benchmarks/bootstrap.py --n16 (K = 542: measured 1.6 bits, stated 0.7).

        Plus the approximation error of EvalMod (``approximation_error``), the worst case of a coefficient
        as large as Δ (a constant input): the two add."""
        return -math.log2(2.0**-self.noise_bits + self.approximation_error)

    @property
    def noise_bits(self) -> float:
        """The noise term of ``precision_bits`` alone: the precision of inputs whose coefficients are small
        against Δ, as those of independent random slots are (~Δ/sqrt(N)), where the sine's cubic error vanishes
        (``benchmarks/bootstrap.py`` measures uniform inputs in [-1, 1]: N16_BOOT 20.0 stated, 20.5 measured)."""
        p = self.params
        log_ratio = math.log2(p.modulus_at(0)) - p.log_scale
        g = self.total // self.slots
        h = 2 * p.n / 3 if p.hamming_weight is None else p.hamming_weight
        log_k = math.log2(self.k_bound)
        return (p.log_scale - 12 - 0.5 * (p.log_n - 12) - 0.5 * max(0.0, math.log2((h + 1) / 33))
                - log_k - 0.6 * max(0.0, log_k - 4) - log_ratio - 0.5 * math.log2(2 * self.slots) - math.log2(g))

    @property
    def approximation_error(self) -> float:
        """EvalMod's approximation error in a slot (``approximation_error``)."""
        return approximation_error(self.params, self.slots, self.config.arcsin)

    @cached_property
    def subsum_steps(self) -> tuple[int, ...]:
        steps, k = [], self.slots
        while k < self.total:
            steps.append(k)
            k *= 2
        return tuple(steps)

    @cached_property
    def rotation_steps(self) -> tuple[int, ...]:
        """Every rotation step the bootstrap uses (the keys ``keygen(bootstrap=...)`` makes, with conjugation)."""
        steps = set(self.subsum_steps)
        for t in self.cts + self.stc:
            steps |= t.steps
        return tuple(sorted(steps))

    def operation_counts(self) -> list[tuple[str, int, dict]]:
        """[(phase, level it starts at, {operation: count})] of one bootstrap (operations: "rotations"
        (key-switched, conjugations included), "hoisted_rotations" (babies sharing one decomposition),
        "ct_mults", "pt_mults", "rescales", "additions"), for pricing in a cost model."""
        top = self.params.max_level
        parts = 1 if self.sparse else 2
        start = top - self.raise_levels               # the level CoeffToSlot starts at
        raise_ops = {"rescales": 1, "pt_mults": 1} if self.raise_levels else {}
        if self.encapsulation_weight is not None:      # the switch back from s' at the top level (the one to s',
            raise_ops["rotations"] = 1                  # over q_0 P' only, is negligible): priced as a rotation
        phases = [("mod_raise", top, raise_ops)]
        if self.subsum_steps:
            phases.append(("subsum", start, {"rotations": len(self.subsum_steps),
                                             "additions": len(self.subsum_steps)}))

        def transform(name, level, transforms, copies):
            counts: dict = {}
            for i, t in enumerate(transforms):
                babies = {b for terms in t.split.values() for b, _ in terms if b}
                c = {"hoisted_rotations": len(babies), "rotations": sum(1 for s in t.split if s),
                     "pt_mults": len(t.diags), "additions": len(t.diags), "rescales": 1}
                for k, v in c.items():
                    counts[k] = counts.get(k, 0) + v * copies
            phases.append((name, level, counts))

        transform("coeff_to_slot", start, self.cts, 1)
        phases[-1][2]["rotations"] += 1                            # the conjugation (both parts share it)
        level = start - self.cts_count
        mults = (self.degree - 1) + self.double_angles + 2 * self.config.arcsin
        phases.append(("eval_mod", level, {"ct_mults": parts * mults, "rescales": parts * (mults + 1),
                                           "additions": parts * (self.degree + mults)}))
        transform("slot_to_coeff", level - self.eval_mod_levels, self.stc, 1)
        return phases

    def __repr__(self):
        encapsulation = "" if self.encapsulation_weight is None else f"encapsulation h={self.encapsulation_weight}, "
        return (f"BootstrapPlan(slots={self.slots}, {encapsulation}K={self.k_bound:g}, degree={self.degree}, "
                f"double_angles={self.double_angles}, arcsin={self.config.arcsin}, levels used={self.levels_used}, "
                f"levels left={self.levels_left}, precision={self.precision_bits:.1f} bits "
                f"({self.noise_bits:.1f} for random slots), "
                f"rotation keys={len(self.rotation_steps)})")

    # -- plaintext twins ---------------------------------------------------------------------------
    def cts_reference(self, z: np.ndarray) -> np.ndarray:
        """The slots after CoeffToSlot (before the conjugation split) for input slots z."""
        v = np.asarray(z, dtype=np.complex128)
        for t in self.cts:
            v = apply_diagonals(t.diags, v)
        return v

    def stc_reference(self, v: np.ndarray) -> np.ndarray:
        """The slots after SlotToCoeff for input slots v (full slots: v = t_lo + i·t_hi)."""
        v = np.asarray(v, dtype=np.complex128)
        for t in self.stc:
            v = apply_diagonals(t.diags, v)
        return v

    def eval_mod_reference(self, y: np.ndarray) -> np.ndarray:
        """What EvalMod computes slot-wise, in float: ≈ 2π·(t - round(t)) for t = K·y."""
        c = cheb.chebval(np.asarray(y, dtype=np.float64), self.coeffs)
        for _ in range(self.double_angles):
            c = 2 * c * c - 1
        return c + c**3 / 6 if self.config.arcsin else c


# -- the homomorphic pipeline ----------------------------------------------------------------------
class Bootstrapper:
    """Runs a ``BootstrapPlan`` with an evaluator (public keys: the plan's rotation keys and conjugation)."""

    def __init__(self, evaluator, plan: BootstrapPlan):
        self.ev, self.plan, self.params = evaluator, plan, evaluator.params
        self.natural = natural_scales(self.params)
        self._mono: dict = {}
        self._encapsulator = None
        self._kept: dict = {}   # the transforms' full-period diagonals, encoded (``_diagonal``)
        self._compact: dict = {}    # the short-period ones' subring NTTs over Q·P (double hoisting: kilobytes)
        self.double_hoisting = True     # ``linear_transform``: False takes the single-hoisted path (its twin)
        self.fused_products = True      # EvalMod: one rounding per product (``Evaluator.mul_add_rescale``); False
                                        # takes the separate mul, integer products, add and rescale (its twin)

    # helpers
    def _relabel(self, ct: Ciphertext, scale: float) -> Ciphertext:
        return replace(ct, scale=float(scale))

    def _mul_int(self, ct: Ciphertext, c: int, scale: float | None = None) -> Ciphertext:
        """ct·c for an integer c (exact); the scale is unchanged unless given (one pass per part with an
        evaluator that offers ``mul_int``)."""
        fast = getattr(self.ev, "mul_int", None)
        if fast is not None:
            out = fast(ct, int(c))
            return out if scale is None else self._relabel(out, scale)
        parts = tuple(p.mul_scalars([c] * len(p.idx)) for p in ct.parts)
        return replace(ct, parts=parts, scale=float(ct.scale if scale is None else scale))

    def _times_i(self, ct: Ciphertext) -> Ciphertext:
        """i·ct exactly: the product by X^(N/2) (ζ^(5^j·N/2) = i in every slot)."""
        idx = ct.parts[0].idx
        if idx not in self._mono:
            coeffs = np.zeros(self.params.n, dtype=np.int64)
            coeffs[self.params.n // 2] = 1
            self._mono[idx] = RNSPoly.from_ints(ct.parts[0].ring, coeffs, idx, is_ntt=True)
        mono = self._mono[idx]
        return replace(ct, parts=tuple(p * mono for p in ct.parts), is_complex=True)

    def _top(self, level: int) -> int:
        return math.prod(self.params.q_levels[level])

    def _fused(self):
        """The evaluator's ``mul_add_rescale`` (rescale(f·a·b + add) with one ModDown), or None: the separate
        operations (``fused_products`` False, or an evaluator without it)."""
        return getattr(self.ev, "mul_add_rescale", None) if self.fused_products else None

    # 1. ModRaise
    def mod_raise(self, ct: Ciphertext) -> Ciphertext:
        """The level-0 ciphertext (after dropping ``ct`` to level 0) lifted to the top level: the centred
        residues mod q_0 of each part, exactly converted to every prime of Q_L.  Decrypts to m + q_0·I;
        the scale is kept (use ``raise_and_scale`` for the scale the pipeline needs)."""
        ev, params = self.ev, self.params
        ct = ev.to_level(ct, 0)
        base = tuple(range(params.limbs_at(0)))
        top = tuple(range(params.limbs_at(params.max_level)))
        rest = top[len(base):]
        ring = ct.parts[0].ring
        conv = CenteredConversion([ring.moduli[i] for i in base], [ring.moduli[i] for i in rest])
        parts = []
        for p in ct.parts:
            coeff = p.to_coeff().data
            lifted = np.concatenate([coeff, conv(coeff)])
            parts.append(RNSPoly(ring, lifted, top, False).to_ntt())
        return replace(ct, parts=tuple(parts), level=params.max_level, evaluator=ev)

    def encapsulated_raise(self, ct: Ciphertext) -> Ciphertext:
        """``mod_raise`` under the plan's ephemeral sparse secret when it has one: the level-0 parts switched
        to s', lifted, switched back to s (decrypts to m + q_0·I with |I_k| < K = h/2 + 2; module
        ``crypto.ckks.encapsulation``); plain ``mod_raise`` otherwise."""
        encapsulator = self.encapsulator()
        if encapsulator is None:
            return self.mod_raise(ct)
        low = self.ev.to_level(ct, 0)
        lifted = self.mod_raise(replace(low, parts=encapsulator.to_sparse(*low.parts)))
        return replace(lifted, parts=encapsulator.from_sparse(*lifted.parts))

    def encapsulator(self) -> Encapsulator | None:
        """The sparse-secret switcher of an encapsulating plan (None otherwise); KeyMissingError without keys."""
        weight = self.plan.encapsulation_weight
        if weight is None:
            return None
        if self._encapsulator is None:
            keys = getattr(self.ev, "encapsulation_keys", None)
            if keys is None or keys.weight != weight:
                raise KeyMissingError(f"this bootstrap encapsulates to a sparse secret of weight {weight}, but the "
                                      f"evaluator has {'no' if keys is None else f'weight-{keys.weight}'} "
                                      "encapsulation keys: make them with CKKSContext.keygen(params, "
                                      "bootstrap=BootstrapConfig(encapsulation=...))")
            self._encapsulator = Encapsulator(self.params, self.ev.ring, keys, self.ev.switcher)
        return self._encapsulator

    def raise_and_scale(self, ct: Ciphertext) -> Ciphertext:
        """ModRaise (encapsulated when the plan says), the scale declared q_0·K (slots read as y = t/K, the EvalMod
        variable), brought to the working scale by an exact integer product and a rescale (level L-1; none when
        ``plan.raise_levels`` is 0: CoeffToSlot's plaintexts absorb the scale), then SubSum for sparse slots."""
        plan, params = self.plan, self.params
        q0 = params.modulus_at(0)
        raised = self._relabel(self.encapsulated_raise(ct), q0 * plan.k_bound)
        level = params.max_level
        g = plan.total // plan.slots
        out = raised
        if plan.raise_levels:
            target = self.natural[level - 1] / g
            c = round(target * self._top(level) / raised.scale)
            out = self.ev.rescale(self._mul_int(raised, c, scale=raised.scale * c))
            out = self._relabel(out, raised.scale * c / self._top(level))
        for step in plan.subsum_steps:
            out = self.ev.add(out, self.ev.rotate(out, step))
        return self._relabel(out, out.scale * g)

    # 3. linear transforms
    def linear_transform(self, ct: Ciphertext, t: _Transform, target_scale: float) -> Ciphertext:
        """Σ_k d_k ⊙ rot_k(ct) by baby-step giant-step, one rescale; the diagonals are encoded at the scale that
        makes the result's scale ``target_scale`` (``_diagonal``).  With an evaluator that offers
        ``linear_transform_hoisted`` (the CPU one) and ``double_hoisting`` set (the default): double hoisting, the
        babies' rotations and the products kept over Q·P, one ModDown per giant step's part a and one at the end,
        the rescale fused into it; otherwise hoisted babies (a ModDown each), ``bsgs_sum`` and a rescale."""
        ev = self.ev
        p = target_scale * self._top(ct.level) / ct.scale
        babies = sorted({b for terms in t.split.values() for b, _ in terms})
        hoisted = getattr(ev, "linear_transform_hoisted", None) if self.double_hoisting else None
        if hoisted is not None:
            groups = ((shift, ((baby, self._diagonal(t, shift, k, ct.level, p, extended=True)) for baby, k in terms))
                      for shift, terms in sorted(t.split.items()))       # encoded as used
            out = hoisted(ct, babies, groups, ct.scale * p, rescale=True, length=self.params.slots, is_complex=True)
            return self._relabel(out, target_scale)
        rotated = ev.rotate_hoisted(ct, babies)
        groups = ((shift, ((baby, self._diagonal(t, shift, k, ct.level, p)) for baby, k in terms))
                  for shift, terms in sorted(t.split.items()))       # encoded as used
        out = ev.rescale(bsgs_sum(ev, rotated, groups))
        return self._relabel(out, target_scale)

    def _diagonal(self, t: _Transform, shift: int, k: int, level: int, scale: float, extended: bool = False):
        """rot_(-shift)(d_k) encoded at ``level`` and ``scale``: a Plaintext, or with ``extended`` its residues over
        Q_level ∪ P (``Evaluator.encode_extended(compact=True)``, for double hoisting: a short period's subring NTT,
        kept too, kilobytes; a full period's as uint32). Diagonals of a short period encode
        in the subring (``Evaluator.encode``: cheap); the others are kept after their first encoding, as uint32
        residues at one scale each (a new scale replaces it): N16_BOOT's 32 + 32 of 49 and 21 limbs (58 and 30
        extended), 0.58 GB (0.7 GB extended), ~0.4 s a bootstrap (OpenFHE's bootstrap setup keeps every
        plaintext). A level holds one transform: the key."""
        ev = self.ev
        key = (level, shift, k, extended)
        kept = self._kept.get(key) or self._compact.get(key)
        if kept is not None and kept[2] == scale:
            data, idx, _, template = kept
            if extended:        # the residues themselves: the fused product reads uint32 (no widening copy)
                return data
            return replace(template, poly=RNSPoly(ev.ring, data.astype(np.uint64), idx, True))
        values = np.roll(t.diags[k], shift)
        if extended:        # residues (N columns), or a short period's compact subring NTT (2·period columns)
            data = ev.encode_extended(values, level, scale, compact=True)
            if k in t.full_period:
                self._kept[key] = (data.astype(np.uint32), None, scale, None)
            else:
                self._compact[key] = (data, None, scale, None)
            return data
        pt = ev.encode(values, level, scale)
        if k in t.full_period:
            self._kept[key] = (pt.poly.data.astype(np.uint32), pt.poly.idx, scale, replace(pt, poly=None))
        return pt

    def coeff_to_slot(self, ct: Ciphertext) -> list[Ciphertext]:
        """[t_lo, t_hi] (full slots) or [ [t_lo | t_hi] ] (sparse), real slots in bit-reversed order.  After a
        rescaled ModRaise each level lands on its natural scale; taking ModRaise's output directly, the
        plaintexts share the scale ratio to the natural scale after the last level equally."""
        last = len(self.plan.cts) - 1
        for i, t in enumerate(self.plan.cts):
            shared = not self.plan.raise_levels and i < last       # the last level lands on its natural scale
            target = ct.scale * self.plan.cts_plaintext_scale / self._top(ct.level) if shared else \
                self.natural[ct.level - 1]
            ct = self.linear_transform(ct, t, target)
        ev = self.ev
        conj = ev.conjugate(ct)           # one conjugation (a key switch) serves both parts:
        out = [ev.add(ct, conj)]          # w + conj(w) = 2 Re(w)
        if not self.plan.sparse:          # -i·w + conj(-i·w) = i·(conj(w) - w) = 2 Im(w), i·x exact (X^(N/2))
            out.append(self._times_i(ev.sub(conj, ct)))
        return [replace(o, is_complex=False) for o in out]

    # 4. EvalMod
    def _chebyshev_basis(self, y: Ciphertext, degree: int) -> dict[int, Ciphertext]:
        """T_0..T_degree (T_0 omitted): T_2a = 2T_a² - 1, T_(a+b) = 2 T_a T_b - T_(a-b), a the largest
        power of two below a+b: T_k at depth ceil(log2 k).  The subtrahend is brought to the product's
        scale by an exact integer product and added before the rescale (with ``mul_add_rescale``: added to the
        tensor before the relinearization, the rescale fused into its ModDown)."""
        ev, fused = self.ev, self._fused()
        t = {1: y}
        for k in range(2, degree + 1):
            a = 1 << (k.bit_length() - 1)
            if a == k:
                a = b = k // 2
            else:
                b = k - a
            ta, tb = t[a], t[b]
            level = min(ta.level, tb.level)
            if fused is not None:
                if a == b:
                    t[k] = fused(ev.to_level(ta, level), ev.to_level(tb, level), -1.0, factor=2)
                else:
                    sub = t[a - b]
                    c = round(ta.scale * tb.scale / sub.scale)
                    sub = self._relabel(ev.to_level(sub, level), ta.scale * tb.scale)
                    t[k] = fused(ev.to_level(ta, level), ev.to_level(tb, level), sub, factor=2, add_factor=-c)
                continue
            prod = ev.mul(ev.to_level(ta, level), ev.to_level(tb, level))
            prod = self._mul_int(prod, 2)
            if a == b:
                prod = ev.sub(prod, 1.0)
            else:
                sub = t[a - b]
                c = round(prod.scale / sub.scale)
                sub = self._mul_int(ev.to_level(sub, level), c, scale=sub.scale * c)
                prod = ev.sub(prod, self._relabel(sub, prod.scale))
            t[k] = ev.rescale(prod)
        return t

    def _poly(self, y: Ciphertext, coeffs) -> Ciphertext:
        """Σ_k coeffs[k] T_k(y) by baby-step giant-step (``chebyshev_split``): babies T_1..T_(b-1),
        giants T_b, T_2b, T_4b, ...; the same level and natural scale as ``_poly_naive`` (its twin), with
        about 2·sqrt(d) + d/b products instead of d - 1."""
        degree = len(coeffs) - 1
        b, levels, _ = bsgs_schedule(degree)
        if not b:
            return self._poly_naive(y, coeffs)
        final = y.level - levels
        t = self._chebyshev_basis(y, b - 1)
        n = b
        while n <= degree:
            t[n] = self._double(t[n // 2])
            n *= 2
        return self._relabel(self._bsgs(np.asarray(coeffs, dtype=np.float64), t, b, final,
                                        self.natural[final]), self.natural[final])

    def _double(self, ta: Ciphertext) -> Ciphertext:
        """T_2a = 2 T_a² - 1."""
        fused = self._fused()
        if fused is not None:
            return fused(ta, ta, -1.0, factor=2)
        prod = self._mul_int(self.ev.mul(ta, ta), 2)
        return self.ev.rescale(self.ev.sub(prod, 1.0))

    def _bsgs(self, coeffs: np.ndarray, t: dict, b: int, level: int, scale: float, raw: bool = False) -> Ciphertext:
        """Σ coeffs[k] T_k at ``level`` and exactly ``scale``: a leaf (degree < b) is one integer
        combination of the babies and a rescale; otherwise p = q·T_n + r (``chebyshev_split``, n the
        largest giant <= degree), q evaluated one level up at the scale that makes the product land on
        ``scale``.  With ``mul_add_rescale`` (``_fused``) r is added before its rescale to the product q·T_n,
        rescaled once with it: ``raw`` asks for that form (level + 1, scale·q_(level+1), not rescaled)."""
        ev, fused = self.ev, self._fused()
        degree = len(coeffs) - 1
        if degree < b:
            top = level + 1
            big = scale * self._top(top)
            acc = self._leaf(coeffs, t, top, big)
            return acc if raw else self._relabel(ev.rescale(acc), scale)
        n = b
        while 2 * n <= degree:
            n *= 2
        q, r = chebyshev_split(coeffs, n)
        giant = ev.to_level(t[n], level + 1)
        q_ct = self._bsgs(q, t, b, level + 1, scale * self._top(level + 1) / giant.scale)
        if fused is None:
            prod = self._relabel(ev.mul_rescale(q_ct, giant), scale)
            return ev.add(prod, self._bsgs(r, t, b, level, scale))
        big = q_ct.scale * giant.scale                                    # = scale·q_(level+1)
        rest = self._relabel(self._bsgs(r, t, b, level, scale, raw=True), big)
        out = fused(q_ct, giant, rest, rescale=not raw)
        return self._relabel(out, big if raw else scale)

    def _leaf(self, coeffs: np.ndarray, t: dict, top: int, big: float) -> Ciphertext:
        """Σ round(coeffs[k]·big/s_k)·T_k + coeffs[0] at level ``top`` and scale ``big``, not rescaled: one pass
        for the whole leaf with an evaluator that offers ``mul_int_sum`` (each T_k read once, the sum written once;
        N16_BOOT: 7 terms a leaf), else one pass per term with ``mul_int_add``."""
        ev = self.ev
        summed = getattr(ev, "mul_int_sum", None) if self.fused_products else None
        if summed is not None:      # one pass per part for the whole leaf, the constant included
            terms = [(t[k], round(coeffs[k] * big / t[k].scale)) for k in range(1, len(coeffs))]
            terms = [(ct, c) for ct, c in terms if c] or [(t[1], 0)]
            return summed(terms, top, big, float(coeffs[0]))
        fused = getattr(ev, "mul_int_add", None) if self.fused_products else None
        acc = None
        if fused is None:
            acc = self._relabel(self._mul_int(ev.to_level(t[1], top), 0), big)     # an encryption of 0 to add to
        for k in range(1, len(coeffs)):
            c = round(coeffs[k] * big / t[k].scale)
            if not c:
                continue
            if fused is not None and acc is not None:
                acc = fused(acc, t[k], c)
            else:
                term = self._relabel(self._mul_int(ev.to_level(t[k], top), c), big)
                acc = term if acc is None else ev.add(acc, term)
        if acc is None:
            acc = self._relabel(self._mul_int(ev.to_level(t[1], top), 0), big)
        return ev.add(acc, float(coeffs[0]))

    def _poly_naive(self, y: Ciphertext, coeffs) -> Ciphertext:
        """Σ_k coeffs[k] T_k(y) from every T_k, landing at the natural scale of its level."""
        ev = self.ev
        degree = len(coeffs) - 1
        basis = self._chebyshev_basis(y, degree)
        level = min(ct.level for ct in basis.values())
        target = self.natural[level - 1]
        big = target * self._top(level)
        acc = None
        for k in range(1, degree + 1):
            c = round(coeffs[k] * big / basis[k].scale)
            if c == 0:
                continue
            term = self._relabel(self._mul_int(ev.to_level(basis[k], level), c), big)
            acc = term if acc is None else ev.add(acc, term)
        acc = ev.add(acc, float(coeffs[0]))
        return self._relabel(ev.rescale(acc), target)

    def eval_mod(self, y: Ciphertext) -> Ciphertext:
        """Slot-wise ≈ 2π(t - round(t)) for slots y = t/K (``eval_mod_reference``)."""
        ev, plan = self.ev, self.plan
        c = self._poly(y, plan.coeffs)
        fused = self._fused()
        for _ in range(plan.double_angles):
            c = fused(c, c, -1.0, factor=2) if fused is not None else ev.sub(self._mul_int(ev.mul_rescale(c, c), 2), 1.0)
        if plan.config.arcsin:
            sq = ev.mul_rescale(c, c)                         # y²
            sq = ev.add(self._relabel(sq, sq.scale * 6), 1.0)  # 1 + y²/6
            c = ev.mul_rescale(c, sq)
        return c

    # 5. SlotToCoeff
    def slot_to_coeff(self, parts: list[Ciphertext], scale_in: float) -> Ciphertext:
        """The special FFT of t_lo + i·t_hi (or of the sparse [t_lo | t_hi]); ``scale_in`` relabels the
        input; the output lands on the natural scale of its level."""
        ev = self.ev
        ct = parts[0] if len(parts) == 1 else ev.add(parts[0], self._times_i(parts[1]))
        ct = self._relabel(ct, scale_in)
        final_level = ct.level - len(self.plan.stc)
        ratio = self.natural[final_level] / ct.scale
        for i, t in enumerate(self.plan.stc):
            ct = self.linear_transform(ct, t, ct.scale * ratio ** (1 / len(self.plan.stc)))
        return self._relabel(ct, self.natural[final_level])

    def check_input_scale(self, scale: float) -> None:
        """ScaleError for an input scale above 2^MAX_INPUT_SCALE_BITS · Δ.  ModRaise lifts m + q_0·I and EvalMod
        reads m/q_0 through a sine whose error, y³/6 or 3y⁵/40 in y = 2π·m/q_0, is stated (``precision_bits``)
        for |m| <= Δ, q_0/Δ given by the parameters: a larger scale brings m towards q_0/2, where the sine no
        longer follows m (a scale at 2^13·Δ, where a drifting chain's natural scale lands, keeps under a bit)."""
        limit = 2.0 ** (self.params.log_scale + MAX_INPUT_SCALE_BITS)
        if not scale <= limit:
            raise ScaleError(f"bootstrap input scale 2^{math.log2(scale):.2f} exceeds 2^{math.log2(limit):.0f} "
                             f"(2^{MAX_INPUT_SCALE_BITS:g}·Δ, Δ = 2^{self.params.log_scale}): ModRaise cannot lift it "
                             "within the stated precision; bring the ciphertext to the scale Δ first")

    def bootstrap(self, ct: Ciphertext, progress=None) -> Ciphertext:
        """A ciphertext of the same values at level ``plan.levels_left`` (natural scale there); ScaleError for an
        input scale above 2Δ (``check_input_scale``). ``progress(done, total, label)`` after each of the four
        stages (the first call's transforms also encode and keep their diagonals: the setup)."""
        ev, plan = self.ev, self.plan
        setup = "" if self._kept else " (setup: encoding the diagonals)"

        def report(done: int, label: str) -> None:
            if progress is not None:
                progress(done, 4, label)
        ev._check(ct)
        s0, length, is_complex = ct.scale, ct.length, ct.is_complex
        if length > plan.slots:
            raise ParameterError(f"ciphertext length {length} exceeds the bootstrap slot count {plan.slots}")
        self.check_input_scale(s0)
        x = self.raise_and_scale(ct)
        report(1, "ModRaise")
        parts = self.coeff_to_slot(x)
        report(2, "CoeffToSlot" + setup)
        ts = [self.eval_mod(t) for t in parts]
        report(3, "EvalMod")
        # slots ≈ 2π·m'/q_0, m' the coefficients at scale s0 (sparse slots: of the trace, divided by g):
        # relabel so they read as g·m'/s0 = m/s0
        g = plan.total // plan.slots
        scale_in = ts[0].scale * 2 * math.pi * s0 / (self.params.modulus_at(0) * g)
        out = self.slot_to_coeff(ts, scale_in)
        report(4, "SlotToCoeff" + setup)
        return replace(out, length=length, is_complex=is_complex)


def bit_reversed(v: np.ndarray) -> np.ndarray:
    """v permuted by the bit reversal of its length (the order CoeffToSlot leaves the coefficients in)."""
    v = np.asarray(v)
    return v[bit_reverse_indices(len(v))]


@lru_cache(maxsize=8)
def plan_for(params, config) -> BootstrapPlan:
    """``BootstrapPlan(params, config)``, memoised: building its matrices takes seconds and a plan is immutable,
    so key generation, the evaluator and the planner share one per (parameters, configuration)."""
    return BootstrapPlan(params, config)
