"""Sample-per-slot ("feature-major") packing: throughput for dense networks on many samples, no rotations.

    packed = SamplePackedModel.from_sequential(model)          # public: parameters, levels, shapes
    client = SamplePackedClient(packed.spec)                   # keys: public + relinearization only
    server = SamplePackedServer(packed, client.public_context())
    replies = [server.evaluate(r) for r in client.encrypt(x)]  # x: (batch, features); one request per set
    y = client.decrypt(replies)                                # (batch, outputs) ~ model.forward(x)

Layout. Ciphertext f of a *set* holds feature f of up to N/2 samples, sample s in slot s (CKKS's slots,
Cheon-Kim-Kim-Song, ASIACRYPT 2017); a batch larger than N/2 is split into several sets, evaluated one
after the other. Every slot-wise operation then acts on all the samples at once:

* a dense layer y_j = sum_i W[j, i] x_i + b_j is, per RNS limb q and per part of the ciphertexts (both in
  NTT form, where a product by an integer is word-wise), the integer matrix product

      Y_q = (round(W * q_top) mod q) @ X_q  +  round(b * scale * q_top)   (mod q),

  X_q the (in x 2N) words of the input ciphertexts, then one rescale by q_top (the top level's primes) per
  output: exactly what ``Evaluator.mul`` by each scalar weight, ``add`` and ``rescale`` give (the same
  residues: ``dense_layer_naive`` is that naive twin, tested bit for bit). No rotation is needed, so the
  server's evaluation keys are the relinearization key alone (about 5 MB at N = 2^14);
* an activation is the model's fitted polynomial (``PolyActivation.evaluate``, the same depth-optimal schedule
  as everywhere in hezk) run on each ciphertext with ciphertext x ciphertext products, relinearization and
  rescaling.

The matrix product is exact integer arithmetic on float64 BLAS (the chunking of CROSS's BAT, Tong et al.,
"Leveraging ASIC AI Chips for Homomorphic Encryption", 2025): the input words are centred, |x| <= (q-1)/2,
and the centred weights are cut into balanced base-2^k digits A = sum_t 2^(k t) A_t with |A_t| <= 2^(k-1) and
k the largest width for which in * (q-1)/2 * 2^(k-1) < 2^53, so every partial sum of every A_t @ X is an
integer below 2^53 and float64 computes it exactly in any order; the digit products are recombined and reduced
mod q (``modular_matmul``; ``modular_matmul_naive`` is its Python-integer twin). Typically 2 digits (k = 15 for
784 inputs, weights below 2^25 once scaled).

When it wins: many samples. One set costs the same for 1 sample as for N/2 (8,192 at N = 2^14): for the
784-128-64-10 MLP with degree-4 ReLU polynomials (depth 9, N = 2^14, 128-bit) a set takes about 13 s of one core
(reading 1.2 s, first layer 4.4 s, first activation 5.3 s, the rest 1.8 s), 1.5 ms per sample when full, with
6.3 MB of keys, against ~0.18 s per sample and 333 MiB of rotation keys for the slot-blocked ``Client`` /
``Server`` path (``tensor_ops.inference``, 8 samples per ciphertext). Its costs: the input is ``features``
ciphertexts per set whatever the batch (784 x 1.4 MB = 1.1 GB at N = 2^14 for MNIST, the same for 1 sample as
for 8,192), the output ``outputs`` ciphertexts per set; for a handful of samples the slot-blocked path is far
cheaper (in time below ~50 samples, in bytes below ~6,000 for MNIST).
Residual blocks (fork/join stages) are not supported. As with any CKKS evaluation of a fitted polynomial, a
sample whose activation inputs leave the fitted interval (``Sequential.samples_outside``) gets a wrong result
and may spoil its whole set.

Paired sets (``SamplePackedClient(spec, pairs=True)``, for batches between N/2 and N): sample s and sample
L + s share slot s as the real and imaginary part of a complex slot. A dense layer with real weights acts on both
parts at once (the bias becomes b (1 + i)); before an activation it halves its outputs, z = (a + i b) / 2, so that
a = z + conj(z) and b = i (conj(z) - z) come out exactly (a conjugation, a key switch with the conjugation key,
and a product with X^(N/2), which multiplies every slot by i); the polynomial runs on a and on b and
p(a) + i p(b) goes on (``paired_activation``). The dense layers and the input are paid once for 2 x N/2
samples; the activations twice plus a conjugation. For 10,000 MNIST images: one request of 1.08 GB instead of
two, about 21 s of one core instead of 29 s, keys 11.7 MB.

Requests and replies are concatenations of the library's ciphertext records (``Ciphertext.to_bytes``; kind
``crypto.Ciphertext``, each checked: parameters, key set, residues, checksum): a request holds ``features``
ciphertexts in feature order, a reply ``outputs`` ciphertexts; every ciphertext's ``length`` is the set's
number of samples.
"""
from __future__ import annotations

import math
import os
import struct
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from crypto.context import CKKSContext, as_parameters
from crypto.errors import (ContextMismatchError, KeyMissingError, LevelError, ParameterError, ScaleError,
                           SerializationError, ShapeError)
from crypto.ring import RNSPoly
from crypto.rlwe import Ciphertext
from hezk.model.graph import activate
from hezk.record import MAGIC
from tensor_ops.model_plan import ActivationStage, AffineStage, choose_parameters, output_ranges, outputs_outside
from tensor_ops.inference import (UNCHECKED_OUTPUTS, OutputRangeError, OutputRangeWarning, require_secure,
                                  server_context, write_secret_file)

__all__ = ["SamplePackedModel", "SamplePackedSpec", "SamplePackedClient", "SamplePackedServer", "dense_layer",
           "dense_layer_naive", "paired_activation", "modular_matmul", "modular_matmul_naive", "digit_width"]

FLOAT64_EXACT = 2**53      # float64 holds every integer of magnitude below this exactly
MAX_MODULUS = 2**31        # every RNS prime is below 2^31
BLOCK_COLUMNS = 4096       # columns of X per BLAS call (25 MB of float64 for 784 rows)
_HEADER = struct.Struct("<4sHBB")   # a record's magic, version, kind, fingerprint length (hezk.record's layout)
_LENGTH = struct.Struct("<Q")
_DIGEST = 16


# --- the exact modular matrix product ----------------------------------------------------------------------
def digit_width(n_in: int, q: int) -> int:
    """The widest k with ``n_in * (q-1)/2 * 2^(k-1) < 2^53`` (at most 31): balanced base-2^k digits of the
    weights times centred words then sum exactly in float64. ParameterError when not even k = 1 fits."""
    bound = n_in * ((q - 1) // 2)
    if bound <= 0:
        return 31
    room = (FLOAT64_EXACT - 1) // bound
    if room < 1:
        raise ParameterError(f"n_in={n_in} inputs of modulus q={q}: n_in * (q-1)/2 = 2^{math.log2(bound):.1f} leaves "
                             f"no room below 2^53 for an exact float64 product "
                             f"(limit n_in < {FLOAT64_EXACT // max(1, (q - 1) // 2)})")
    return min(31, room.bit_length())


def _balanced_digits(a: np.ndarray, k: int) -> list[np.ndarray]:
    """Digits A_t (int64, |A_t| <= 2^(k-1)) with a = sum_t 2^(k t) A_t, as many as a's largest entry needs."""
    base, half = np.int64(1 << k), np.int64(1 << (k - 1))
    rest, digits = a.astype(np.int64), []
    while np.any(rest != 0):
        digit = ((rest + half) & (base - 1)) - half
        digits.append(digit)
        rest = (rest - digit) >> k
    return digits


def _centred(a, q: int) -> np.ndarray:
    """Integers (int64 or Python ints) reduced mod q into [-(q-1)/2, (q-1)/2], as int64."""
    r = np.asarray(a) % q
    r = np.asarray(r, dtype=np.int64)
    return np.where(r > (q - 1) // 2, r - q, r)


@dataclass(frozen=True)
class _LimbWeights:
    """One limb's weights: float64 digit matrices (c, out, in), the powers 2^(k t) mod q, the modulus."""

    digits: np.ndarray
    powers: np.ndarray
    q: int

    @classmethod
    def of(cls, a_centred: np.ndarray, q: int) -> "_LimbWeights":
        k = digit_width(a_centred.shape[1], q)
        digits = _balanced_digits(a_centred, k)
        stack = (np.stack(digits).astype(np.float64) if digits
                 else np.zeros((0,) + a_centred.shape, dtype=np.float64))
        powers = np.array([pow(2, k * t, q) for t in range(len(digits))], dtype=np.int64)
        return cls(stack, powers, int(q))


@numba.njit(cache=True, nogil=True)
def _centre_block(x, q, c0, c1, out):
    """out[i, c - c0] = x[i, c] centred mod q (x: words < q of one limb, rows = inputs)."""
    half = (q - 1) // 2
    for i in range(x.shape[0]):
        row = x[i]
        for c in range(c0, c1):
            v = np.int64(row[c])
            out[i, c - c0] = v - q if v > half else v


@numba.njit(cache=True, nogil=True)
def _combine_block(products, powers, q, bias, factor, out):
    """out[j, c] = (bias[j] factor[c] + sum_t products[t, j, c] powers[t]) mod q; products are exact integers
    below 2^53, bias and factor residues."""
    digits, n_out, width = products.shape
    for j in range(n_out):
        b = bias[j]
        for c in range(width):
            acc = (b * factor[c]) % q
            for t in range(digits):
                v = np.int64(products[t, j, c]) % q
                acc = (acc + v * powers[t]) % q
            out[j, c] = acc


def _limb_product(weights: _LimbWeights, x: np.ndarray, bias: np.ndarray, out: np.ndarray, period: int,
                  factor: np.ndarray | None = None) -> None:
    """out[:, c] = weights @ x[:, c] + bias * factor[c] (mod q) for every column, in blocks of ``BLOCK_COLUMNS``
    that do not straddle a multiple of ``period``; ``bias``: (out,) int64 residues (zeros: none), ``factor``:
    (columns,) int64 residues (None: ones, the same bias in every column)."""
    n_out, n_in = weights.digits.shape[1:]
    columns = x.shape[1]
    factor = np.ones(columns, dtype=np.int64) if factor is None else factor
    width = min(BLOCK_COLUMNS, period, columns)
    block = np.empty((n_in, width), dtype=np.float64)
    products = np.empty((len(weights.digits), n_out, width), dtype=np.float64)
    start = 0
    while start < columns:
        stop = min(start + width, columns, (start // period + 1) * period)
        w = stop - start
        _centre_block(x, weights.q, start, stop, block)
        for t in range(len(weights.digits)):
            np.matmul(weights.digits[t], block[:, :w], out=products[t, :, :w])
        _combine_block(products[:, :, :w], weights.powers, weights.q, bias, factor[start:stop], out[:, start:stop])
        start = stop


def modular_matmul(a, x, q: int) -> np.ndarray:
    """(a @ x) mod q exactly: ``a`` (out, in) integers (any size: Python ints or int64), ``x`` (in, cols)
    integers in [0, q), q < 2^31. Returns uint64 (out, cols). Float64 BLAS on balanced digits of a (module
    docstring); ``modular_matmul_naive`` is the Python-integer reference."""
    q = _check_modulus(q)
    x = np.asarray(x)
    a = np.asarray(a)
    if a.ndim != 2 or x.ndim != 2 or a.shape[1] != x.shape[0]:
        raise ShapeError(f"a {a.shape} @ x {x.shape}: need (out, in) and (in, cols)")
    if x.size and (x.min() < 0 or x.max() >= q):
        raise ParameterError(f"x must hold residues in [0, q={q}); found [{x.min()}, {x.max()}]")
    weights = _LimbWeights.of(_centred(a, q), q)
    out = np.empty((a.shape[0], x.shape[1]), dtype=np.int64)
    _limb_product(weights, np.ascontiguousarray(x, dtype=np.uint32), np.zeros(a.shape[0], dtype=np.int64), out,
                  max(1, x.shape[1]))
    return out.astype(np.uint64)


def modular_matmul_naive(a, x, q: int) -> np.ndarray:
    """The naive twin of ``modular_matmul``: Python integers, one multiply-accumulate at a time."""
    q = _check_modulus(q)
    a, x = np.asarray(a), np.asarray(x)
    out = np.zeros((a.shape[0], x.shape[1]), dtype=np.uint64)
    for j in range(a.shape[0]):
        for c in range(x.shape[1]):
            out[j, c] = sum(int(a[j, i]) * int(x[i, c]) for i in range(a.shape[1])) % q
    return out


def _check_modulus(q) -> int:
    if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or not 2 < int(q) < MAX_MODULUS:
        raise ParameterError(f"q={q!r} must be an integer modulus in (2, 2^31)")
    return int(q)


# --- dense layers on feature-major ciphertexts ----------------------------------------------------------------
def _integer_weights(weights: np.ndarray, factor: int) -> np.ndarray:
    """round(w * float(factor)) for each weight, as ``Evaluator.mul`` encodes a scalar at scale q_top (int64, or
    Python ints when a product reaches 2^62)."""
    products = np.rint(weights * float(factor))
    if products.size and np.max(np.abs(products)) >= 2.0**62:
        return np.vectorize(int, otypes=[object])(products)
    return products.astype(np.int64)


def _check_scale(largest: float, level: int, modulus_bits: float, what: str) -> None:
    if largest > 0 and math.log2(largest) >= modulus_bits - 1:
        raise ScaleError(f"{what}: max |value| x scale = 2^{math.log2(largest):.1f} does not fit the modulus at level "
                         f"{level} (limit 2^{modulus_bits - 1:.1f})")


class _Stack:
    """Feature-major ciphertexts as one array: words[i, l, p*N:(p+1)*N] = part p, limb l of ciphertext i (uint32:
    every residue is below 2^31), with the metadata they share."""

    def __init__(self, words, level, scale, length, key_id, evaluator, is_complex=False):
        self.words, self.level, self.scale, self.length = words, level, scale, length
        self.key_id, self.evaluator, self.is_complex = key_id, evaluator, bool(is_complex)

    @classmethod
    def empty(cls, count: int, first: Ciphertext, level: int, evaluator, buffer: np.ndarray | None = None):
        """A stack for ``count`` ciphertexts like ``first`` at ``level`` (in ``buffer`` when it has the shape)."""
        shape = (count, evaluator.params.limbs_at(level), 2 * evaluator.params.n)
        words = buffer if buffer is not None and buffer.shape == shape else np.empty(shape, dtype=np.uint32)
        return cls(words, level, first.scale, first.length, first.key_id, evaluator, first.is_complex)

    def put(self, i: int, ct: Ciphertext, what: str) -> None:
        if ct.level < self.level:
            raise LevelError(f"{what} is at level {ct.level}, below the level {self.level} of the others")
        if (ct.scale != self.scale or ct.length != self.length or ct.key_id != self.key_id or len(ct.parts) != 2
                or ct.is_complex != self.is_complex):
            raise ParameterError(f"{what} differs from the first ciphertext in scale ({ct.scale} vs {self.scale}), "
                                 f"length ({ct.length} vs {self.length}), pairing (complex {ct.is_complex} vs "
                                 f"{self.is_complex}) or key set: one set must come from one encryption call")
        n, limbs = self.evaluator.params.n, self.words.shape[1]
        for p, part in enumerate(ct.parts):
            self.words[i, :, p * n:(p + 1) * n] = part.data[:limbs]

    @classmethod
    def of(cls, ciphertexts, evaluator) -> "_Stack":
        cts = list(ciphertexts)
        if not cts:
            raise ShapeError("no ciphertexts: a dense layer needs at least one input")
        for i, ct in enumerate(cts):
            if not isinstance(ct, Ciphertext):
                raise ParameterError(f"ciphertexts[{i}] must be a Ciphertext, got {type(ct).__name__}")
            if ct.fingerprint != evaluator.params.fingerprint or ct.key_id != evaluator.key_id:
                raise ContextMismatchError(f"ciphertexts[{i}] was made under another key set or parameters than "
                                           f"the evaluator's")
        level = min(ct.level for ct in cts)
        stack = cls.empty(len(cts), cts[0], level, evaluator)
        for i, ct in enumerate(cts):
            stack.put(i, ct, f"ciphertexts[{i}]")
        return stack


def _dense_stack(stack: _Stack, weights: np.ndarray, bias: np.ndarray, cache: dict | None = None,
                 rescale: bool = True) -> list:
    """The dense layer on a stack: one ciphertext per output, rescaled unless ``rescale`` is False (module
    docstring)."""
    ev, level = stack.evaluator, stack.level
    params = ev.params
    if level < 1:
        raise LevelError(f"a dense layer needs a level to rescale: the inputs are at level {level} (minimum 1)")
    n_out, n_in = weights.shape
    if stack.words.shape[0] != n_in:
        raise ShapeError(f"{stack.words.shape[0]} input ciphertexts for a layer of {n_in} inputs")
    factor = math.prod(params.q_levels[level])
    moduli = params.q_moduli[:params.limbs_at(level)]
    modulus_bits = sum(math.log2(q) for q in moduli)
    product_scale = stack.scale * float(factor)
    _check_scale(float(np.max(np.abs(weights))) * float(factor) if weights.size else 0.0, level, modulus_bits,
                 "weights")
    _check_scale(float(np.max(np.abs(bias))) * product_scale if bias.size else 0.0, level, modulus_bits, "bias")
    if product_scale >= 2.0 ** (modulus_bits - 1):
        raise ScaleError(f"product scale 2^{math.log2(product_scale):.1f} does not fit the modulus at level {level}")
    key = (level,)
    limb_weights = None if cache is None else cache.get(key)
    if limb_weights is None:
        integers = _integer_weights(weights, factor)
        limb_weights = [_LimbWeights.of(_centred(integers, q), q) for q in moduli]
        if cache is not None:
            cache[key] = limb_weights
    bias_ints = [round(float(b) * product_scale) for b in bias]
    n = params.n
    out = np.empty((n_out, 2, len(moduli), n), dtype=np.uint64)
    zeros = np.zeros(n_out, dtype=np.int64)
    result = np.empty((n_out, 2 * n), dtype=np.int64)
    idx = tuple(range(len(moduli)))
    # a paired (complex) set: the bias is b (1 + i) in every slot, the polynomial round(b s q_top) (1 + X^(N/2)),
    # as Evaluator.add encodes the complex constant
    half_turn = _monomial(ev, idx).data if stack.is_complex else None
    for limb, q in enumerate(moduli):
        bias_res = np.array([b % q for b in bias_ints], dtype=np.int64)
        columns = None if half_turn is None else (half_turn[limb].astype(np.int64) + 1) % q
        x = stack.words[:, limb]
        _limb_product(limb_weights[limb], x[:, :n], bias_res, result[:, :n], n, columns)
        _limb_product(limb_weights[limb], x[:, n:], zeros, result[:, n:], n)
        out[:, 0, limb] = result[:, :n]
        out[:, 1, limb] = result[:, n:]
    outputs = []
    for j in range(n_out):
        parts = tuple(RNSPoly(ev.ring, out[j, p], idx, True) for p in range(2))
        product = Ciphertext(parts, level, product_scale, stack.length, stack.is_complex, params.fingerprint,
                             stack.key_id, ev)
        outputs.append(ev.rescale(product) if rescale else product)
    return outputs


def _monomial(ev, idx) -> RNSPoly:
    """X^(N/2) in NTT form over the limbs ``idx``: its product with a ciphertext multiplies every slot by i
    (exactly: a signed permutation of the coefficients, no level, no scale)."""
    coefficients = np.zeros(ev.params.n, dtype=np.int64)
    coefficients[ev.params.n // 2] = 1
    return RNSPoly.from_ints(ev.ring, coefficients, idx, is_ntt=True)


def _times_i(ct: Ciphertext, monomial: RNSPoly) -> Ciphertext:
    """i ct (every slot times i): ``monomial`` X^(N/2) over the limbs of ct's level or more."""
    monomial = monomial if monomial.idx == ct.parts[0].idx else monomial.keep(ct.parts[0].idx)
    return Ciphertext(tuple(part * monomial for part in ct.parts), ct.level, ct.scale, ct.length, True,
                      ct.fingerprint, ct.key_id, ct.evaluator)


def paired_activation(poly, z: Ciphertext) -> Ciphertext:
    """p(a) + i p(b) from z = (a + i b) / 2 (a paired set, two samples per slot: the dense layer before halves its
    outputs): a = z + conj(z), b = i (conj(z) - z), each through ``poly.evaluate``, recombined by a product with
    X^(N/2). One conjugation (a key switch: the conjugation key) and two evaluations of the polynomial; no
    level beyond the polynomial's."""
    ev = z.evaluator
    conjugate = ev.conjugate(z)
    monomial = _monomial(ev, z.parts[0].idx)
    real = poly.evaluate(ev.add(z, conjugate))
    imaginary = poly.evaluate(_times_i(ev.sub(conjugate, z), monomial))
    return ev.add(real, _times_i(imaginary, monomial))


def _as_layer(weights, bias):
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2:
        raise ShapeError(f"weights of shape {weights.shape} must be a matrix (outputs, inputs)")
    bias = np.zeros(weights.shape[0]) if bias is None else np.asarray(bias, dtype=np.float64)
    if bias.shape != (weights.shape[0],):
        raise ShapeError(f"bias of shape {bias.shape} must be ({weights.shape[0]},), one per output")
    if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(bias))):
        raise ParameterError("weights and bias must be finite")
    return weights, bias


def _evaluator_of(ciphertexts):
    cts = list(ciphertexts)
    if not cts or not isinstance(cts[0], Ciphertext) or cts[0].evaluator is None:
        raise ParameterError("ciphertexts must be a non-empty list of Ciphertexts that know their evaluator")
    return cts, cts[0].evaluator


def dense_layer(ciphertexts, weights, bias=None, rescale: bool = True) -> list:
    """y_j = sum_i weights[j, i] x_i + bias[j] on feature-major ciphertexts (x_i: ``ciphertexts[i]``, all at one
    level and scale, of one key set; complex ones, a paired set, get bias[j] (1 + i): both samples of a slot get
    the bias): a list of ``outputs`` ciphertexts one level lower, at the inputs' scale
    (``rescale=False``: at the inputs' level and the product scale, scale x q_top, before the rescale).
    The exact modular matrix product of the module docstring; the same residues as ``dense_layer_naive``."""
    cts, ev = _evaluator_of(ciphertexts)
    weights, bias = _as_layer(weights, bias)
    if len(cts) != weights.shape[1]:
        raise ShapeError(f"{len(cts)} ciphertexts for weights of {weights.shape[1]} inputs")
    return _dense_stack(_Stack.of(cts, ev), weights, bias, rescale=bool(rescale))


def dense_layer_naive(ciphertexts, weights, bias=None, rescale: bool = True) -> list:
    """The naive twin of ``dense_layer``: per output, ``Evaluator.mul`` of each input by its scalar weight, ``add``,
    ``add`` of the bias, ``rescale`` (one library call per weight)."""
    cts, ev = _evaluator_of(ciphertexts)
    weights, bias = _as_layer(weights, bias)
    if len(cts) != weights.shape[1]:
        raise ShapeError(f"{len(cts)} ciphertexts for weights of {weights.shape[1]} inputs")
    level = min(ct.level for ct in cts)
    cts = [ev.to_level(ct, level) for ct in cts]
    outputs = []
    for row, b in zip(weights, bias):
        acc = None
        for ct, w in zip(cts, row):
            term = ev.mul(ct, float(w))
            acc = term if acc is None else ev.add(acc, term)
        acc = ev.add(acc, complex(b, b) if cts[0].is_complex else float(b))
        outputs.append(ev.rescale(acc) if rescale else acc)
    return outputs


# --- the model, its public spec, client and server -------------------------------------------------------------
@dataclass(frozen=True)
class SamplePackedSpec:
    """What the client needs (public): the parameters, the level to encrypt at, the input and output widths,
    the model's identity and activation fit (hex digests, for the record), its exact last step (``finish``),
    the calibrated ``input_range`` (low, high) the client holds every input value to, and the ``output_range``
    (lows, highs per output, ``model_plan.output_ranges``) widened by ``output_margin`` that every decrypted
    sample must meet (None: only finiteness is checked)."""

    params: object
    level: int
    features: int
    outputs: int
    model: str = ""
    fit: str = ""
    finish: str = ""
    input_range: tuple[float, float] | None = None
    output_range: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    output_margin: float = 0.0

    def __post_init__(self):
        if not (self.features >= 1 and self.outputs >= 1 and 0 <= self.level <= self.params.max_level):
            raise ParameterError(f"spec with features={self.features}, outputs={self.outputs} (each >= 1) and "
                                 f"level={self.level} (0 to the parameters' max_level={self.params.max_level})")
        if self.input_range is not None:
            low, high = (float(v) for v in self.input_range)
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ParameterError(f"input_range={self.input_range} must be finite (low, high) with low < high")
            object.__setattr__(self, "input_range", (low, high))
        if self.output_range is not None:
            lows, highs = (tuple(float(v) for v in side) for side in self.output_range)
            if not (len(lows) == len(highs) == self.outputs) or not all(
                    math.isfinite(lo) and math.isfinite(hi) and lo <= hi for lo, hi in zip(lows, highs)):
                raise ParameterError(f"output_range must hold outputs={self.outputs} finite (low <= high) bounds")
            object.__setattr__(self, "output_range", (lows, highs))
        if not (math.isfinite(self.output_margin) and self.output_margin >= 0.0):
            raise ParameterError(f"output_margin={self.output_margin} must be finite and >= 0")

    def to_dict(self) -> dict:
        return {"packing": "samples-per-slot", "params": self.params.to_dict(), "level": self.level,
                "features": self.features, "outputs": self.outputs, "model": self.model, "fit": self.fit,
                "finish": self.finish, "input_range": self.input_range, "output_range": self.output_range,
                "output_margin": self.output_margin}

    @classmethod
    def from_dict(cls, d: dict) -> "SamplePackedSpec":
        if not isinstance(d, dict) or d.get("packing") != "samples-per-slot":
            raise ParameterError("spec must be a dict made by SamplePackedSpec.to_dict (packing='samples-per-slot')")
        from crypto.params import CKKSParameters

        try:
            params = CKKSParameters.from_dict(d["params"])
            return cls(params, int(d["level"]), int(d["features"]), int(d["outputs"]), str(d.get("model", "")),
                       str(d.get("fit", "")), str(d.get("finish", "")), d.get("input_range"), d.get("output_range"),
                       float(d.get("output_margin", 0.0)))
        except (KeyError, TypeError, ValueError) as error:
            raise ParameterError(f"spec is incomplete or malformed: {error}") from None


class SamplePackedModel:
    """A network of dense layers and polynomial activations, evaluated on feature-major ciphertexts."""

    def __init__(self, stages, features: int, params=None, model_id: str = "", fit: str = "", finish: str = "",
                 input_range=None):
        self.stages = tuple(stages)
        self.features = int(features)
        self.depth = sum(stage.depth for stage in self.stages)
        self.params = choose_parameters(self.depth) if params is None else as_parameters(params)
        if self.params.max_level < self.depth:
            raise LevelError(f"the network needs {self.depth} levels, params={self.params!r} have "
                             f"{self.params.max_level}")
        width = self.features
        for stage in self.stages:
            if isinstance(stage, AffineStage):
                if stage.shape[1] != width:
                    raise ShapeError(f"an affine stage of {stage.shape[1]} inputs follows {width} values")
                width = stage.shape[0]
        self.outputs = width
        self.spec = SamplePackedSpec(self.params, self.depth, self.features, self.outputs, model_id, fit, finish,
                                     input_range, **output_ranges(self.stages, self.features, input_range))
        self._dense = [(stage.matrix, stage.bias) if isinstance(stage, AffineStage) else None for stage in self.stages]

    @classmethod
    def from_sequential(cls, model, params=None) -> "SamplePackedModel":
        """The compiled stages of a ``tensor_ops.nn.Sequential`` (affine layers folded, each activation's
        normalisation folded into the affine stage before it; ``params``: default ``choose_parameters(depth)``,
        128-bit). Residual blocks are refused."""
        stages = model.stages()
        for i, stage in enumerate(stages):
            if type(stage) not in (AffineStage, ActivationStage):
                raise ParameterError(f"stage {i} is a {type(stage).__name__}: sample packing evaluates dense and "
                                     f"activation stages only (no residual blocks)")
            if isinstance(stage, ActivationStage) and stage.depth == 0:
                raise ParameterError(f"stage {i}: a constant activation polynomial is not supported")
        features = math.prod(model.input_shape) if model.input_shape else stages[0].shape[1]
        return cls(stages, features, params, model.identity().hex(), model.activation_fit(), model.finish,
                   getattr(model, "input_range", None))

    def forward(self, x) -> np.ndarray:
        """The plaintext reference of the encrypted evaluation (the same stages, in float64): (batch, outputs)."""
        y = np.asarray(x, dtype=np.float64)
        for stage in self.stages:
            y = stage.apply(y)
        return activate(self.spec.finish, y) if self.spec.finish else y


def _split_records(source):
    """The ciphertext records of a request or reply: bytes (any buffer), a file path (read record by record), or
    an iterable of the records themselves (``encrypt_set``'s generator: streamed, never joined)."""
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)) and hasattr(source, "__iter__"):
        yield from source
        return
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as stream:
            while True:
                head = stream.read(_HEADER.size)
                if not head:
                    return
                yield _read_record(head, stream.read, source)
    else:
        view = memoryview(source).cast("B")
        offset = 0
        while offset < len(view):
            cursor = [offset]

            def take(size):
                chunk = bytes(view[cursor[0]:cursor[0] + size])
                cursor[0] += size
                return chunk

            record = _read_record(take(_HEADER.size), take, "bytes")
            offset += len(record)
            yield record


def _read_record(head: bytes, read, where) -> bytes:
    if len(head) < _HEADER.size or head[:4] != MAGIC:
        raise SerializationError(f"{where}: not a sequence of hezk ciphertext records (bad or truncated header)")
    fingerprint_length = head[7]
    middle = read(fingerprint_length + _LENGTH.size)
    if len(middle) != fingerprint_length + _LENGTH.size:
        raise SerializationError(f"{where}: truncated ciphertext record")
    (payload,) = _LENGTH.unpack_from(middle, fingerprint_length)
    rest = read(payload + _DIGEST)
    if len(rest) != payload + _DIGEST:
        raise SerializationError(f"{where}: truncated ciphertext record ({len(rest)} of {payload + _DIGEST} bytes)")
    return head + middle + rest


class SamplePackedServer:
    """Evaluates requests (one set each) with a public context holding the relinearization key."""

    def __init__(self, model: SamplePackedModel, public_context):
        if not isinstance(model, SamplePackedModel):
            raise ParameterError(f"model must be a SamplePackedModel, got {type(model).__name__}")
        ctx = server_context(public_context)
        if ctx.params != model.params:
            raise ContextMismatchError(f"the context's parameters {ctx.params!r} are not the model's {model.params!r} "
                                       f"(keys made for another model or parameter set)")
        self.model, self.context = model, ctx
        self.evaluator = self.context.evaluator
        self._caches = [dict() for _ in model.stages]
        self._buffer = None   # the last request's words, reused by the next (no new pages to fault in)

    def _read(self, source) -> _Stack:
        n_in, stack = self.model.features, None
        for i, record in enumerate(_split_records(source)):
            if i >= n_in:
                raise ShapeError(f"the request holds more than {n_in} ciphertexts (one per feature)")
            ct = Ciphertext.from_bytes(record, self.context)
            if stack is None:
                if ct.level < self.model.depth:
                    raise LevelError(f"the request is at level {ct.level}; the network needs {self.model.depth}")
                stack = _Stack.empty(n_in, ct, self.model.depth, self.evaluator, self._buffer)
                self._buffer = stack.words
            stack.put(i, ct, f"ciphertext {i} of the request")
        count = 0 if stack is None else i + 1
        if count != n_in:
            raise ShapeError(f"the request holds {count} ciphertexts; the model takes {n_in} (one per feature)")
        return stack

    def evaluate_ciphertexts(self, inputs) -> list:
        """The network on a stack (``_Stack``) or a list of feature ciphertexts: the output ciphertexts. A paired
        set (complex ciphertexts, two samples per slot) needs the conjugation key: each dense layer before an
        activation halves its outputs and the activation is ``paired_activation``."""
        x = inputs
        stages = self.model.stages
        for k, (stage, dense, cache) in enumerate(zip(stages, self.model._dense, self._caches)):
            if dense is not None:
                stack = x if isinstance(x, _Stack) else _Stack.of(x, self.evaluator)
                halve = stack.is_complex and k + 1 < len(stages) and isinstance(stages[k + 1], ActivationStage)
                if halve and not self.context.has_conjugation_key:
                    raise KeyMissingError("a paired set (complex ciphertexts) needs the conjugation key: make the "
                                          "keys with SamplePackedClient(spec, pairs=True)")
                weights, bias = (dense[0] / 2, dense[1] / 2) if halve else dense
                x = _dense_stack(stack, weights, bias, cache.setdefault(halve, {}))
            else:
                cts = x if isinstance(x, list) else _unstack(x)
                if cts and cts[0].is_complex:
                    if not self.context.has_conjugation_key:
                        raise KeyMissingError("a paired set (complex ciphertexts) needs the conjugation key")
                    x = [paired_activation(stage.poly, ct) for ct in cts]
                else:
                    x = [stage.poly.evaluate(ct) for ct in cts]
        return x if isinstance(x, list) else _unstack(x)

    def evaluate(self, request) -> bytes:
        """One request (bytes, the path of a file holding them, or an iterable of its ciphertext records, e.g.
        ``SamplePackedClient.encrypt_set``: a local caller then never holds the request whole) -> the reply's
        bytes."""
        outputs = self.evaluate_ciphertexts(self._read(request))
        return b"".join(ct.to_bytes() for ct in outputs)


def _unstack(stack: _Stack) -> list:
    ev, n = stack.evaluator, stack.evaluator.params.n
    idx = tuple(range(stack.words.shape[1]))
    return [Ciphertext(tuple(RNSPoly(ev.ring, np.ascontiguousarray(stack.words[i, :, p * n:(p + 1) * n],
                                                                    dtype=np.uint64), idx, True) for p in range(2)),
                       stack.level, stack.scale, stack.length, stack.is_complex, ev.params.fingerprint, stack.key_id,
                       ev)
            for i in range(stack.words.shape[0])]


class SamplePackedClient:
    """Keys (secret, public, relinearization; the conjugation key too with ``pairs``, no rotation key), encryption
    of (batch, features) arrays into requests of one set each, decryption of the replies. ``seed``: reproducible
    keys, for tests only. Parameters below 128 bits are refused before any key is made unless
    ``allow_insecure``.

    ``pairs=True``: a set of more than N/2 samples (up to N) is *paired*: sample s and sample L + s share slot s as
    real and imaginary part (complex ciphertexts, L = ceil(n/2)); the server then runs each activation twice per
    ciphertext after a conjugation (``paired_activation``) but each dense layer once for both halves, and the
    request is one set of ``features`` ciphertexts instead of two. Worth it when a batch would take two sets
    (slots < batch <= N): half the input bytes and encryption time, and less server time."""

    def __init__(self, spec, *, seed=None, context: CKKSContext | None = None, pairs: bool = False,
                 allow_insecure: bool = False):
        self.spec = spec if isinstance(spec, SamplePackedSpec) else SamplePackedSpec.from_dict(spec)
        if context is None:
            if not allow_insecure:  # the spec comes from the server: as Client and ReplicatedClient refuse
                require_secure(self.spec.params, "the spec's parameters", "allow_insecure=True")
            context = CKKSContext.keygen(self.spec.params, conjugation=bool(pairs), seed=seed)
        elif not context.has_secret_key or context.params != self.spec.params:
            raise ContextMismatchError("context must hold the secret key and the spec's parameters")
        self.context = context

    @property
    def slots(self) -> int:
        """Slots per ciphertext (N/2): the samples of an unpaired set."""
        return self.spec.params.slots

    @property
    def pairs(self) -> bool:
        """Whether sets of more than N/2 samples are paired (the keys include the conjugation key)."""
        return self.context.has_conjugation_key

    @property
    def set_size(self) -> int:
        """The most samples one request holds: N with ``pairs``, else N/2."""
        return self.slots * (2 if self.pairs else 1)

    def public_context(self) -> bytes:
        """The server's keys: the public and relinearization keys (and the conjugation key with ``pairs``; no
        secret, no rotation key)."""
        return self.context.public_context().to_bytes()

    def save(self, path) -> None:
        """The secret context to ``path`` (mode 0600)."""
        write_secret_file(path, self.context.to_bytes(include_secret_key=True))

    @classmethod
    def load(cls, path, spec) -> "SamplePackedClient":
        with open(path, "rb") as stream:
            context = CKKSContext.from_bytes(stream.read())
        return cls(spec, context=context)

    def _check_batch(self, x, clip: bool = False) -> np.ndarray:
        """``x`` as (batch, features) float64 within the spec's input range (clipped to it with ``clip``)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.spec.features or x.shape[0] == 0:
            raise ShapeError(f"x of shape {x.shape} must be (batch >= 1, {self.spec.features}): one row per sample")
        if self.spec.input_range is not None:
            low, high = self.spec.input_range
            if clip:
                x = np.clip(x, low, high)
            else:
                outside = np.flatnonzero(~np.all((x >= low) & (x <= high), axis=1))
                if outside.size:
                    raise ParameterError(f"samples {outside[:20].tolist()} (of {len(outside)}) have values outside "
                                         f"the calibrated input range [{low:.6g}, {high:.6g}]: the fitted "
                                         f"activations are wrong there and one such sample can spoil its whole "
                                         f"set (clip=True clips them, or calibrate on inputs like them)")
        return x

    def encrypt_set(self, x, *, clip: bool = False):
        """The ciphertext records of one request (a generator, one feature at a time): ``x`` (batch, features)
        with batch <= ``set_size`` (ShapeError otherwise: ``encrypt`` splits larger batches); paired when
        batch > ``slots``. Values outside the spec's input range are refused (ParameterError, before any
        encryption) or clipped with ``clip=True``."""
        x = self._check_batch(x, clip)
        return self._encrypt_columns(x)

    def _encrypt_columns(self, x):
        n = x.shape[0]
        if n > self.set_size:
            raise ShapeError(f"a set holds at most {self.set_size} samples ({'N, paired' if self.pairs else 'N/2'}), "
                             f"x has {n}: use encrypt, which splits the batch into sets")
        if n > self.slots:  # paired: samples 0..L-1 real, L..n-1 imaginary (one zero sample pads an odd n)
            half = (n + 1) // 2
            imaginary = np.zeros((half, x.shape[1]))
            imaginary[:n - half] = x[half:]
            columns = np.ascontiguousarray((x[:half] + 1j * imaginary).T)
        else:
            columns = np.ascontiguousarray(x.T)
        for f in range(self.spec.features):
            yield self.context.encrypt(columns[f], level=self.spec.level).to_bytes()

    def encrypt(self, x, *, clip: bool = False) -> list:
        """Requests for (batch, features) samples: ceil(batch / set_size) sets, each the bytes of ``features``
        ciphertexts (one feature of up to ``set_size`` samples each); the input range as ``encrypt_set``."""
        x = self._check_batch(x, clip)
        return [b"".join(self._encrypt_columns(x[s:s + self.set_size])) for s in range(0, len(x), self.set_size)]

    def decrypt(self, replies, count: int | None = None) -> np.ndarray:
        """(batch, outputs) from the replies of ``encrypt``'s requests, in order (bytes, paths, or a list).
        ``count``: the batch that was encrypted; needed only where a paired set held an odd number of samples
        (without it such a set gives one extra row, its padding sample, at its end)."""
        replies = [replies] if isinstance(replies, (bytes, bytearray, memoryview, str, os.PathLike)) else replies
        blocks = []
        for k, reply in enumerate(replies):
            cts = [Ciphertext.from_bytes(record, self.context) for record in _split_records(reply)]
            if len(cts) != self.spec.outputs:
                raise ShapeError(f"reply {k} holds {len(cts)} ciphertexts; the model has {self.spec.outputs} "
                                 f"outputs")
            values = np.stack([self.context.decrypt(ct) for ct in cts], axis=1)
            if cts[0].is_complex:
                n = 2 * len(values) if count is None else min(self.set_size, count - k * self.set_size)
                values = np.concatenate([values.real, values.imag[:n - len(values)]], axis=0)
            blocks.append(values)
        if not blocks:
            raise ShapeError("no replies to decrypt")
        y = np.concatenate(blocks, axis=0)
        if count is not None and len(y) != count:
            raise ShapeError(f"the replies hold {len(y)} samples, count={count}")
        self._check_outputs(y)
        return activate(self.spec.finish, y) if self.spec.finish else y

    def _check_outputs(self, y) -> None:
        """OutputRangeError when a decrypted sample is not finite or leaves the spec's output range (+- margin):
        an activation input left its interval there, and a polynomial far outside its interval can overflow the
        modulus, which corrupts every slot of the set, so every sample of that set is untrusted."""
        if self.spec.output_range is None:  # as Client.decrypt: only non-finite values are caught
            warnings.warn(OutputRangeWarning(UNCHECKED_OUTPUTS), stacklevel=3)
        invalid = outputs_outside(y, self.spec.output_range, self.spec.output_margin)
        if not invalid.size:
            return
        sets = np.unique(invalid // self.set_size)
        untrusted = np.flatnonzero(np.isin(np.arange(len(y)) // self.set_size, sets))
        raise OutputRangeError(f"invalid result: samples {invalid[:20].tolist()} (of {len(invalid)}) decrypt to "
                               f"values outside the spec's output range or not finite: an activation input left "
                               f"its fitted interval there, so sets {sets.tolist()} (samples {untrusted[0]}.."
                               f"{untrusted[-1]}) are untrustworthy; encrypt such samples clipped or calibrate on "
                               f"inputs like them", invalid, sets, untrusted, y)
