"""CKKSContext: parameters, ring, keys, encoder, encryption/decryption and the evaluator in one object.

``CKKSContext.keygen`` makes a full context (secret key included); ``public_context()`` drops the
secret key: that, as bytes, is what a server gets.  Randomness comes from the OS CSPRNG unless a seed
is given (tests only: every key and encryption is then reproducible).
"""
from __future__ import annotations

import math
import warnings
from functools import cached_property

import numpy as np

import hezk.progress

from .ckks.bootstrap import BootstrapConfig, as_config, plan_for
from .ckks.encapsulation import EncapsulationKeys, make_encapsulation_keys
from .ckks.encoder import CKKSEncoder, as_slot_vector, check_scale
from .ckks.evaluator import Evaluator
from .ckks.flooding import (STATISTICAL_SECURITY, Flooded, flood, flooded_precision_bits, plan_flood,
                            warn_if_imprecise)
from .errors import (BootstrapPrecisionWarning, ContextMismatchError, ParameterError, SerializationError,
                     ValueRangeError, WrapAroundWarning)
from .key_records import (context_to_bytes, galois_keys_to_bytes, public_key_to_bytes, read_context,
                          read_key_records, relin_key_to_bytes, secret_key_to_bytes)
from .params import WRAP_MARGIN, CKKSParameters, CKKSParametersLiteral
from .ring import RingContext
from .rlwe import (Ciphertext, Decryptor, Encryptor, KeyGenerator, Plaintext, PublicKey, SecretKey,
                   centered_coefficients, check_level, check_same_context, register_public_context)
from .sampling import Sampler


def as_parameters(params) -> CKKSParameters:
    """CKKSParameters from parameters, a literal, a dict or a preset name."""
    if isinstance(params, CKKSParameters):
        return params
    if isinstance(params, str):
        return CKKSParameters.preset(params)
    if isinstance(params, (CKKSParametersLiteral, dict)):
        return CKKSParameters.from_literal(params)
    raise ParameterError(f"params of type {type(params).__name__} is not CKKSParameters, a literal, "
                         "a dict or a preset name")


_MARGIN = f"(1 - 2^{math.log2(WRAP_MARGIN):.0f})"


def check_value_bound(params: CKKSParameters, values, name: str = "values") -> None:
    """Refuse values that could not be decrypted at level 0: ValueRangeError unless every
    |x| < ``params.value_bound(0)`` = (1 - 2^-6) q_0 / (2 Δ), naming the limit and the largest value.
    Δ, not the encoding scale: rescaling keeps a computation's scale near Δ at every level, so Δ is the
    scale a ciphertext has when it reaches level 0 (a scale too large for the encoding level is refused
    by ``encode``).  One limit for ``CKKSContext.encrypt`` and ``tensor_ops`` ``Client.encrypt``.
    ``values``: any numeric array (real or complex); non-finite ones are refused."""
    arr = np.asarray(values)
    if arr.size == 0:
        return
    with np.errstate(over="ignore", invalid="ignore"):     # |1e308 + 1e308j| is inf: refused below
        magnitude = np.abs(arr).ravel()
    worst = int(np.argmax(np.where(np.isnan(magnitude), np.inf, magnitude)))
    largest = float(magnitude[worst])
    if not np.isfinite(largest):
        raise ParameterError(f"{name}[{worst}]={arr.ravel()[worst]} is not finite; every value must be finite")
    bound = params.value_bound(0)
    if largest >= bound:
        raise ValueRangeError(
            f"{name}: max|x| = {largest:.6g} (at index {worst}) is not below the limit {bound:.6g} = {_MARGIN} "
            f"q_0 / (2 scale) (level-0 modulus q_0 = 2^{math.log2(params.modulus_at(0)):.2f}, scale = "
            f"2^{params.log_scale}): a larger value would wrap when decrypted at level 0; scale the inputs down")


def _warn_if_wrapped(coeffs: np.ndarray, params: CKKSParameters, level: int, scale: float) -> None:
    """WrapAroundWarning when a decrypted (centred) coefficient lies in the top WRAP_MARGIN of
    (-Q_level/2, Q_level/2], i.e. |c| / scale >= ``params.value_bound(level, scale)``.  Encryption keeps
    that band free; a result that wrapped mod Q_level fills the range about uniformly, and escapes with
    probability about (1 - WRAP_MARGIN)^N.  (Slot magnitudes would not do: a large value in a few slots
    has small coefficients.)  A wrap onto small coefficients passes unnoticed: a heuristic, not a proof."""
    with np.errstate(invalid="ignore"):
        largest = float(np.max(np.abs(coeffs))) / scale if coeffs.size else 0.0
    bound = params.value_bound(level, scale)
    if largest >= bound:
        warnings.warn(f"decrypted coefficient max|c| / scale = {largest:.6g} at level {level} reaches the band "
                      f"kept free by encryption (>= {bound:.6g} = {_MARGIN} Q_{level} / (2 scale)): "
                      f"the result has most likely wrapped modulo Q_{level}; scale the inputs down",
                      WrapAroundWarning, stacklevel=3)


def _check_rotations(rotations) -> tuple[int, ...]:
    try:
        steps = list(rotations)
    except TypeError:
        raise ParameterError(f"rotations={rotations!r} must be a list of integers") from None
    for k in steps:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise ParameterError(f"rotation step {k!r} in rotations must be an integer")
    return tuple(int(k) for k in steps)


#: a bootstrap stated to keep fewer bits (worst slot, ``BootstrapPlan.precision_bits``) warns at key generation
LOW_BOOTSTRAP_BITS = 12.0
#: the preset made for bootstrapping (Δ = 2^60, q_0/Δ ≈ 2^8.5), named by that warning
BOOTSTRAP_PRESET = "N16_BOOT"


def warn_low_bootstrap_precision(bits: float) -> None:
    """``BootstrapPrecisionWarning`` when a bootstrap's stated precision ``bits`` is below ``LOW_BOOTSTRAP_BITS``
    (the stock N16 preset: Δ = 2^50 and q_0 = 2^60 leave about 8.5 bits; N16_BOOT about 20)."""
    if bits < LOW_BOOTSTRAP_BITS:
        warnings.warn(f"bootstrapping with these parameters keeps {bits:.1f} bits (stated, worst slot; below "
                      f"{LOW_BOOTSTRAP_BITS:g}): for bootstrapping use the preset {BOOTSTRAP_PRESET!r} "
                      f"(CKKSParameters.preset({BOOTSTRAP_PRESET!r}))", BootstrapPrecisionWarning, stacklevel=3)


class CKKSContext:
    """Everything needed to encode, encrypt, evaluate and (with the secret key) decrypt."""

    def __init__(self, params: CKKSParameters, ring: RingContext, public_key: PublicKey, relin_key,
                 galois_keys, secret_key: SecretKey | None = None, sampler: Sampler | None = None,
                 bootstrap_config: BootstrapConfig | None = None, encapsulation_keys: EncapsulationKeys | None = None):
        self.params, self.ring = params, ring
        self.bootstrap_config = bootstrap_config
        self.encapsulation_keys = encapsulation_keys
        self.public_key, self.relin_key, self.galois_keys = public_key, relin_key, galois_keys
        self._secret_key = secret_key
        self._sampler = sampler if sampler is not None else Sampler()
        self.key_id = public_key.key_id
        self.encoder = CKKSEncoder(params.n)
        if secret_key is None:
            register_public_context(self)  # unpickled ciphertexts of this key set find its evaluator

    @classmethod
    def keygen(cls, params, rotations=(), conjugation: bool = False, seed=None,
               backend="auto", ring: RingContext | None = None, progress=None, bootstrap=False) -> "CKKSContext":
        """Secret, public, relinearization and Galois keys (for ``rotations`` and, optionally, conjugation).

        ``seed`` makes every key and encryption reproducible: for tests only (default: OS CSPRNG).
        ``backend`` picks the NTT backend ("auto", "numpy", "numba", "cross", "fourstep", "jax"); ``ring``
        reuses the RingContext (NTT tables) of another context with the same parameters. ``progress``: None or
        False (silent), True (a tqdm bar on stderr) or a callable ``progress(done, total, label)`` called after
        each Galois key (the slow part; :func:`hezk.progress.as_progress`).
        ``bootstrap``: True (full slots), a slot count or a ``BootstrapConfig``: adds the rotation keys and
        the conjugation key ``evaluator.bootstrap`` needs (LevelError if the parameters have too few levels).
        """
        params = as_parameters(params)
        progress = hezk.progress.as_progress(progress, "keys", ParameterError)
        steps = _check_rotations(rotations)
        boot = None
        if bootstrap is not False and bootstrap is not None:
            boot = as_config(bootstrap)
            warn_low_bootstrap_precision(plan_for(params, boot).precision_bits)
            steps = tuple(sorted(set(steps) | set(plan_for(params, boot).rotation_steps)))
            conjugation = True
        if ring is None:
            ring = RingContext(params.n, params.moduli, backend)
        elif tuple(ring.moduli) != tuple(params.moduli) or ring.n != params.n:
            raise ContextMismatchError(f"ring={ring!r} does not match the parameters {params!r}")
        sampler = Sampler(seed)
        gen = KeyGenerator(params, ring, sampler)
        sk = gen.secret_key()
        weight = None if boot is None else plan_for(params, boot).encapsulation_weight
        encapsulation = None if weight is None else make_encapsulation_keys(params, ring, sampler, sk, weight)
        return cls(params, ring, gen.public_key(sk), gen.relin_key(sk),
                   gen.galois_keys(sk, steps, conjugation, progress=progress), sk, sampler, boot, encapsulation)

    # -- properties ---------------------------------------------------------------------------------
    @property
    def has_secret_key(self) -> bool:
        return self._secret_key is not None

    @property
    def backend(self) -> str:
        """Name of the NTT backend ("auto", "radix2"/"numba", "numpy", "cross", "fourstep")."""
        return self.ring.backend.name

    def with_backend(self, backend) -> "CKKSContext":
        """The same keys on another NTT backend (by name or an NTTBackend); results are bit-identical."""
        return CKKSContext(self.params, self.ring.with_backend(backend), self.public_key, self.relin_key,
                           self.galois_keys, self._secret_key, self._sampler, self.bootstrap_config,
                           self.encapsulation_keys)

    @property
    def rotation_steps(self) -> tuple[int, ...]:
        """The rotation steps that have Galois keys."""
        return self.galois_keys.steps

    @property
    def has_conjugation_key(self) -> bool:
        return self.galois_keys.conjugation

    @cached_property
    def evaluator(self) -> Evaluator:
        """The evaluator, built from public material only."""
        return Evaluator(self.params, self.ring, self.relin_key, self.galois_keys, self.key_id, self.encoder,
                         bootstrap_config=self.bootstrap_config, encapsulation_keys=self.encapsulation_keys)

    def __repr__(self):
        kind = "secret" if self.has_secret_key else "public"
        return f"CKKSContext({self.params!r}, {kind}, rotations={list(self.rotation_steps)})"

    # -- encoding -----------------------------------------------------------------------------------
    def encode(self, values, level: int | None = None, scale: float | None = None) -> Plaintext:
        """Encode up to ``params.slots`` real or complex values (shorter vectors are zero-padded)."""
        level = self.params.max_level if level is None else check_level(level, self.params.max_level)
        scale = self.params.scale if scale is None else check_scale(scale)
        return self.evaluator.encode(values, level, scale)

    def decode(self, pt: Plaintext) -> np.ndarray:
        """The values of a plaintext, with the caller's length (real if encoded real)."""
        if not isinstance(pt, Plaintext):
            raise ParameterError(f"decode expects a Plaintext, got {type(pt).__name__}")
        check_same_context(pt, self.params.fingerprint, None, "plaintext")
        coeffs = centered_coefficients(pt.poly.to_coeff().data, pt.poly.moduli)
        return self._values(coeffs, pt.scale, pt.length, pt.is_complex)

    def _values(self, coeffs, scale, length, is_complex) -> np.ndarray:
        values = self.encoder.decode(coeffs, scale)[:length]
        return values if is_complex else values.real.copy()

    # -- encryption ---------------------------------------------------------------------------------
    def encrypt(self, values, level: int | None = None, scale: float | None = None,
                use_secret_key: bool | None = None) -> Ciphertext:
        """Encrypt a vector or a Plaintext at ``level`` (default: the top level) and ``scale``.

        Values must satisfy |x| < (1 - 2^-6) q_0 / (2 Δ) (``check_value_bound``; ValueRangeError otherwise):
        larger ones would wrap once the ciphertext reaches level 0.

        Uses the secret key when this context holds it (secret-key encryption: smaller noise) unless
        ``use_secret_key=False``; a public context always encrypts with the public key.
        """
        if isinstance(values, Plaintext):
            if level is not None or scale is not None:
                raise ParameterError("level and scale come from the Plaintext; do not pass them")
            check_same_context(values, self.params.fingerprint, None, "plaintext")
            check_value_bound(self.params, self.decode(values), "plaintext values")
            pt = values
        else:
            check_value_bound(self.params, as_slot_vector(values, self.params.slots)[0])
            pt = self.encode(values, level, scale)
        use_sk = self.has_secret_key if use_secret_key is None else bool(use_secret_key)
        if use_sk and not self.has_secret_key:
            raise ParameterError("use_secret_key=True but this is a public context (no secret key)")
        encryptor = Encryptor(self.params, self.ring, self._sampler, self.public_key,
                              self._secret_key if use_sk else None)
        c0, c1 = encryptor.encrypt(pt)
        return Ciphertext((c0, c1), pt.level, pt.scale, pt.length, pt.is_complex, self.params.fingerprint,
                          self.key_id, self.evaluator)

    def decrypt(self, ct: Ciphertext, flood_bits=None, *, noise_bits: float | None = None,
                statistical_security: int = STATISTICAL_SECURITY, queries: int = 1) -> np.ndarray:
        """The values of ``ct`` with the caller's length (real if encrypted real); needs the secret key.

        ``flood_bits=None`` (default): the exact decryption, for the key holder's own use ONLY: m + e reveals
        the secret key to whoever also has the ciphertext (``crypto.ckks.flooding``).  For a result that will
        be shared, ``flood_bits="auto"`` (sized from the noise: ``noise_bits``, or measured for a real
        ciphertext) or a number (log2 of the flood's standard deviation): see ``decrypt_flooded``, which
        also reports the precision the flood leaves.

        Warns (WrapAroundWarning) when the result has most likely wrapped modulo Q_level
        (``_warn_if_wrapped``).
        """
        if flood_bits is None:
            return self._values(self._decrypt_coefficients(ct), ct.scale, ct.length, ct.is_complex)
        return self.decrypt_flooded(ct, flood_bits, noise_bits=noise_bits, statistical_security=statistical_security,
                                    queries=queries).values

    def decrypt_flooded(self, ct: Ciphertext, flood_bits="auto", *, noise_bits: float | None = None,
                        statistical_security: int = STATISTICAL_SECURITY, queries: int = 1) -> Flooded:
        """A decryption safe to share (IND-CPA-D): fresh Gaussian noise of standard deviation 2^flood_bits
        added to m + e before decoding (Li–Micciancio, EUROCRYPT 2021; OpenFHE's NOISE_FLOODING_DECRYPT).

        ``flood_bits="auto"``: noise_bits + statistical_security/2 + log2 sqrt(12·queries), with
        ``noise_bits`` the log2 bound on the ciphertext's noise (default: measured from the imaginary slots
        of a real ciphertext; a complex one needs it given).  Returns ``Flooded`` (values, noise_bits,
        flood_bits, precision_bits = log2 scale - flood_bits - log2(N/2)/2 left per slot)."""
        coeffs = self._decrypt_coefficients(ct)
        slots = self.encoder.decode(coeffs, ct.scale)
        noise, bits = plan_flood(flood_bits, noise_bits, ct.is_complex, slots, ct.scale, self.params.n,
                                 statistical_security, queries)
        precision = flooded_precision_bits(bits, ct.scale, self.params.n)
        warn_if_imprecise(precision)
        values = self._values(flood(coeffs, bits, self._sampler), ct.scale, ct.length, ct.is_complex)
        return Flooded(values, noise, bits, precision)

    def measure_noise_bits(self, ct: Ciphertext, expected) -> float:
        """log2 max |m + e - Encode(expected)| over the coefficients: the noise of a ciphertext whose exact
        result ``expected`` is known (a noise-estimation run, as OpenFHE's EXEC_NOISE_ESTIMATION); pass it as
        ``noise_bits`` when flooding results of the same computation on other inputs."""
        coeffs = self._decrypt_coefficients(ct)
        error = np.abs(coeffs - self.encoder.coefficients(expected, ct.scale))
        return float(max(0.0, math.log2(max(float(np.max(error)), 1.0))))

    def _decrypt_coefficients(self, ct: Ciphertext) -> np.ndarray:
        """m + e as centred float64 coefficients (warns when they have most likely wrapped)."""
        if not isinstance(ct, Ciphertext):
            raise ParameterError(f"decrypt expects a Ciphertext, got {type(ct).__name__}")
        check_same_context(ct, self.params.fingerprint, self.key_id, "ciphertext")
        coeffs = Decryptor(self.params, self.ring, self._secret_key).decrypt(ct.parts)
        _warn_if_wrapped(coeffs, self.params, ct.level, ct.scale)
        return coeffs

    # -- keys and bytes -----------------------------------------------------------------------------
    def public_context(self) -> "CKKSContext":
        """The same context without the secret key (what a server gets)."""
        return CKKSContext(self.params, self.ring, self.public_key, self.relin_key, self.galois_keys,
                           None, self._sampler if self._sampler.seeded else Sampler(), self.bootstrap_config,
                           self.encapsulation_keys)

    def with_rotations(self, rotations=(), conjugation: bool = False) -> "CKKSContext":
        """A context with Galois keys for more rotation steps (needs the secret key)."""
        if not self.has_secret_key:
            raise ParameterError("new Galois keys need the secret key; this is a public context")
        steps = tuple(sorted(set(self.rotation_steps) | set(_check_rotations(rotations))))
        gen = KeyGenerator(self.params, self.ring, self._sampler)
        keys = gen.galois_keys(self._secret_key, steps, conjugation or self.has_conjugation_key)
        return CKKSContext(self.params, self.ring, self.public_key, self.relin_key, keys,
                           self._secret_key, self._sampler, self.bootstrap_config, self.encapsulation_keys)

    def to_bytes(self, include_secret_key: bool = False) -> bytes:
        """Parameters, public key, relinearization and Galois keys; the secret key only if asked."""
        return context_to_bytes(self, include_secret_key)

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through ``to_bytes()``: public material only. A
        context holding the secret key refuses: its key travels only as ``to_bytes(include_secret_key=True)``
        (or ``secret_key_bytes()``), sent explicitly."""
        if self.has_secret_key:
            raise SerializationError(
                "pickling a CKKSContext that holds the secret key is refused (it would copy the key to every "
                "process that receives it): pickle ctx.public_context(), or send the bytes of "
                "ctx.to_bytes(include_secret_key=True) explicitly and read them with CKKSContext.from_bytes")
        return _public_context_from_pickle, (self.to_bytes(),)

    def public_key_bytes(self) -> bytes:
        """The public key alone (enough to encrypt, with the parameters it carries)."""
        return public_key_to_bytes(self)

    def relin_key_bytes(self) -> bytes:
        return relin_key_to_bytes(self)

    def galois_keys_bytes(self) -> bytes:
        return galois_keys_to_bytes(self)

    @classmethod
    def from_key_bytes(cls, public_key: bytes, relin_key: bytes, galois_keys: bytes | None = None,
                       backend="auto") -> "CKKSContext":
        """A public context from separate key records (``public_key_bytes`` and friends)."""
        *parts, encapsulation = read_key_records(public_key, relin_key, galois_keys, backend)
        return cls(*parts, encapsulation_keys=encapsulation)

    def secret_key_bytes(self) -> bytes:
        """The secret key alone (explicit call; keep these bytes private)."""
        return secret_key_to_bytes(self)

    @classmethod
    def from_bytes(cls, blob, backend="auto", secret_key: bytes | None = None) -> "CKKSContext":
        """A context from ``to_bytes`` output; ``secret_key`` optionally adds ``secret_key_bytes()`` output."""
        *parts, config, encapsulation = read_context(blob, backend, secret_key, with_config=True)
        return cls(*parts, bootstrap_config=config, encapsulation_keys=encapsulation)


def _public_context_from_pickle(blob) -> CKKSContext:
    """Inverse of ``CKKSContext.__reduce__`` (the receiving process picks its own NTT backend: results are
    bit-identical)."""
    return CKKSContext.from_bytes(blob)
