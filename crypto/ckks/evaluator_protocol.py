"""The one CKKS evaluator interface: what the model path (``tensor_ops.inference.EncryptedModel``, the BSGS
accumulation ``crypto.ckks.linear.bsgs_sum``, the activations' power series) and bootstrapping call.

Two evaluators implement it: the host one (``crypto.ckks.evaluator.Evaluator``, numba kernels, host
``Ciphertext``) and the device one (``crypto.ckks.jax_device.DeviceEvaluator``, JAX, device-resident
``DeviceCiphertext``).  A caller moves a host ciphertext in with ``from_host`` once, runs the operations
below on the evaluator's own ciphertexts, and takes the result out with ``to_host`` (both the identity on
the host evaluator).  Results agree limb for limb: the device runs the host's arithmetic step for step.

Operand rules (the host evaluator's module docstring; Cheon, Kim, Kim, Song, ASIACRYPT 2017; RNS variant:
Cheon, Han, Kim, Kim, Song, SAC 2018):

* ``a``/``b`` of ``add``/``sub``/``mul``/``mul_rescale``: one of them the evaluator's ciphertext, the other a
  ciphertext of the same evaluator, a plaintext (``encode``'s, or a host ``Plaintext``), a numpy vector or a
  scalar.  A host ciphertext given to the device evaluator is refused (``ParameterError``: upload it first).
* Levels: the operand at the higher level is dropped to the lower one (free).
* Scales in add/sub: within a relative 2^-45 they count as equal; otherwise the operand at the higher level
  (at equal levels the smaller scale) is multiplied by round(ratio · q_top) and rescaled (one level).  A
  plaintext must be at the ciphertext's scale (``ScaleError``); vectors and scalars are encoded at it.
* mul: scales multiply (no rescale); vectors and scalars are encoded at q_top, the product of the top
  level's primes, so ``rescale`` gives back the ciphertext's scale exactly.  A product scale past the
  modulus is refused (``ScaleError``, ``LevelError`` at level 0).

Every operation returns a new ciphertext and never mutates its inputs.  Positional parameter names are not
part of the interface (the methods below are positional-only where the implementations name them apart).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class CKKSEvaluator(Protocol):
    """Homomorphic CKKS operations over public material (relinearisation and Galois keys)."""

    params: Any       # crypto.params.CKKSParameters: the chain, the slots, the default scale Δ
    key_id: bytes     # the key set the evaluator's keys belong to
    fingerprint: bytes  # the parameters' fingerprint

    # -- moving ciphertexts in and out; plaintexts --------------------------------------------------------
    def from_host(self, ct, /):
        """The evaluator's ciphertext of a host ``Ciphertext`` of its context (same level and scale)."""

    def to_host(self, ct, /):
        """The host ``Ciphertext`` of one of the evaluator's ciphertexts (same level and scale)."""

    def encode(self, values, level: int, scale: float, /):
        """A plaintext the evaluator multiplies and adds: ``values`` encoded at ``level`` and exactly
        ``scale`` (``ScaleError`` if it does not fit Q_level)."""

    # -- addition ------------------------------------------------------------------------------------------
    def add(self, a, b, /):
        """a + b at the lower level and the aligned scale (module rules)."""

    def sub(self, a, b, /):
        """a − b, aligned as ``add``."""

    def neg(self, a, /):
        """−a; level and scale unchanged."""

    # -- multiplication ------------------------------------------------------------------------------------
    def mul(self, a, b, /):
        """a·b relinearised, not rescaled: level the lower one, scale the product of the scales."""

    def mul_rescale(self, a, b, /):
        """rescale(mul(a, b)): level − 1, scale (a.scale · b.scale) / q_top (for two ciphertexts the
        relinearisation's ModDown and the rescale share one division)."""

    # -- levels and scales ---------------------------------------------------------------------------------
    def rescale(self, ct, /):
        """Exact division by the top level's primes: level ℓ -> ℓ − 1, scale / Π q_ℓ (``LevelError`` at level 0,
        ``ScaleError`` below 2^10)."""

    def to_level(self, ct, level: int, /):
        """``ct`` at ``level`` ≤ its own: primes dropped, scale unchanged (``LevelError`` above its level)."""

    def drop_level(self, ct, levels: int = 1, /):
        """``ct`` ``levels`` levels lower (``to_level(ct, ct.level − levels)``)."""

    # -- automorphisms -------------------------------------------------------------------------------------
    def rotate(self, ct, step: int, /):
        """Cyclic left rotation of the slots by ``step`` (np.roll(x, −step)); level and scale unchanged; a
        step without a Galois key raises ``KeyMissingError``."""

    def rotate_hoisted(self, ct, steps, /) -> dict:
        """{step: rotate(ct, step)} sharing one ModUp of c1 (hoisting)."""

    def conjugate(self, ct, /):
        """Complex conjugation of every slot; level and scale unchanged."""

    # -- bootstrapping -------------------------------------------------------------------------------------
    def bootstrap(self, ct, config=None, /, *, progress=None):
        """The values of ``ct`` at level ``bootstrap_plan(config).levels_left`` (``crypto.ckks.bootstrap``);
        ``config``: a BootstrapConfig, a slot count or None (the keys' configuration); ``progress``: as
        ``hezk.progress.as_progress`` takes it."""
