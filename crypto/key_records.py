"""Byte records of a context's key material (public, relinearization, Galois and secret keys).

Writers take a CKKSContext; readers return the parts a CKKSContext is made of (``CKKSContext.from_bytes``
and ``from_key_bytes`` assemble them), so this module sits below ``crypto.context``.

A switching key is stored as its ``b`` half plus the 32-byte seed of its uniform ``a`` half (meta
``a_seeds``, one hex string per switching key in the record's order: relinearization key, then Galois keys
by element), which the reader expands again (``keyswitch.uniform_part``): half the bytes.  A key without a
seed (``null``) stores ``a`` after ``b``.  Records without ``a_seeds`` (the earlier format) hold both
halves of every key and are still read.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .ckks.bootstrap import BootstrapConfig
from .ckks.encapsulation import EncapsulationKeys, encapsulation_parameters
from .errors import ParameterError, SerializationError
from .keyswitch import GaloisKeys, SwitchingKey, uniform_part
from .params import parameters_from_meta
from .record import check_key_id, checked_residues, field, key_id_of, pack, peek_kind, residue_array, unpack
from .ring import RingContext, RNSPoly
from .rlwe import KeyGenerator, PublicKey
from .sampling import SEED_BYTES

#: the largest |coefficient| of a public key's error b + a·s (its Gaussian is cut at 6·sigma = 20)
KEY_NOISE_BOUND = 1 << 10


def _key_meta(ctx) -> dict:
    return {"params": ctx.params.to_dict(), "key_id": ctx.key_id.hex()}


def _switching_arrays(keys) -> tuple[dict, list]:
    """Meta ``a_seeds`` and the arrays of switching keys: b, and a only for a key without a seed."""
    seeds, arrays = [], []
    for key in keys:
        seeds.append(None if key.a_seed is None else key.a_seed.hex())
        arrays.append(residue_array(key.b))
        if key.a_seed is None:
            arrays.append(residue_array(key.a))
    return {"a_seeds": seeds}, arrays


def _galois_meta(ctx) -> tuple[dict, list]:
    gk = ctx.galois_keys
    elements = sorted(gk.keys)
    meta = {"steps": list(gk.steps), "conjugation": gk.conjugation, "galois_elements": elements}
    return meta, [gk.keys[g] for g in elements]


def _key_arrays(ctx) -> tuple[dict, list]:
    """Meta and arrays of the public material: public key, relinearization key, Galois keys."""
    galois_meta, galois_keys = _galois_meta(ctx)
    seeds, arrays = _switching_arrays([ctx.relin_key] + galois_keys)
    arrays = [residue_array(ctx.public_key.b.data), residue_array(ctx.public_key.a.data)] + arrays
    return {**_key_meta(ctx), **galois_meta, **seeds}, arrays


def public_key_to_bytes(ctx) -> bytes:
    return pack("public_key", ctx.params.fingerprint, _key_meta(ctx),
                [residue_array(ctx.public_key.b.data), residue_array(ctx.public_key.a.data)])


def relin_key_to_bytes(ctx) -> bytes:
    seeds, arrays = _switching_arrays([ctx.relin_key])
    return pack("relin_key", ctx.params.fingerprint, {**_key_meta(ctx), **seeds}, arrays)


def galois_keys_to_bytes(ctx) -> bytes:
    """The Galois keys and, when the context has them, the bootstrap's encapsulation keys (after them)."""
    galois_meta, keys = _galois_meta(ctx)
    seeds, arrays = _switching_arrays(keys)
    meta, extra = _encapsulation_part(ctx)
    return pack("galois_keys", ctx.params.fingerprint, {**_key_meta(ctx), **galois_meta, **seeds, **meta},
                arrays + extra)


def _encapsulation_part(ctx) -> tuple[dict, list]:
    """Meta ``encapsulation`` (weight, seeds) and the arrays of the encapsulation keys (to_sparse, then
    from_sparse), or nothing for a context without them."""
    keys = getattr(ctx, "encapsulation_keys", None)
    if keys is None:
        return {}, []
    seeds, arrays = _switching_arrays([keys.to_sparse, keys.from_sparse])
    return {"encapsulation": {"weight": keys.weight, **seeds}}, arrays


def context_to_bytes(ctx, include_secret_key: bool = False) -> bytes:
    meta, arrays = _key_arrays(ctx)
    if getattr(ctx, "bootstrap_config", None) is not None:
        meta = {**meta, "bootstrap": dataclasses.asdict(ctx.bootstrap_config)}
    encapsulation, extra = _encapsulation_part(ctx)     # after the Galois keys
    meta, arrays = {**meta, **encapsulation}, arrays + extra
    if not include_secret_key:
        return pack("public_context", ctx.params.fingerprint, meta, arrays)
    if not ctx.has_secret_key:
        raise SerializationError("include_secret_key=True but this is a public context (no secret key)")
    return pack("full_context", ctx.params.fingerprint, meta,
                arrays + [np.asarray(ctx._secret_key.coeffs, dtype="<i8")])


def secret_key_to_bytes(ctx) -> bytes:
    if not ctx.has_secret_key:
        raise SerializationError("this is a public context: it has no secret key to serialize")
    return pack("secret_key", ctx.params.fingerprint, {"key_id": ctx.key_id.hex()},
                [np.asarray(ctx._secret_key.coeffs, dtype="<i8")])


class _KeyReader:
    """Parses the key arrays of one parameter set (shapes and residue ranges checked)."""

    def __init__(self, params, backend):
        self.params = params
        self.ring = RingContext(params.n, params.moduli, backend)

    def public_key(self, arrays, key_id: bytes):
        params = self.params
        q_idx = tuple(range(len(params.q_moduli)))
        pk = PublicKey(*(RNSPoly(self.ring, checked_residues(a, (len(q_idx), params.n), params.q_moduli,
                                                              "public key"), q_idx, True) for a in arrays))
        if pk.key_id != key_id:
            raise SerializationError("the public key does not match the stored key-set id: corrupted record")
        return pk

    def switching_key(self, arrays: "_Arrays", seed: bytes | None, what: str, params=None):
        """The next key of ``arrays`` (over ``params``' moduli, default this reader's): b, then a (stored, or
        expanded from ``seed``)."""
        params = self.params if params is None else params
        shape = (len(params.digits), len(params.moduli), params.n)
        b = checked_residues(arrays.next(what), shape, params.moduli, what, np.uint32)
        if seed is None:
            a = checked_residues(arrays.next(what), shape, params.moduli, what, np.uint32)
        else:
            a = uniform_part(params, seed)
        return SwitchingKey(b, a, params.moduli, seed)

    def galois_keys(self, meta: dict, arrays: "_Arrays", seeds: list):
        n = self.params.n
        elements = field(meta, "galois_elements", list)
        steps = field(meta, "steps", list)
        conjugation = field(meta, "conjugation", bool)
        if len(seeds) != len(elements):
            raise SerializationError(f"{len(seeds)} key seeds for {len(elements)} Galois elements")
        keys = {}
        for g, seed in zip(elements, seeds):
            if not isinstance(g, int) or isinstance(g, bool) or g % 2 == 0 or not 0 < g < 2 * n or g in keys:
                raise SerializationError(f"Galois element {g!r} is not a new odd integer in (0, {2 * n})")
            keys[g] = self.switching_key(arrays, seed, f"Galois key {g}")
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in steps):
            raise SerializationError("field 'steps' must hold integers")
        if conjugation and 2 * n - 1 not in keys:
            raise SerializationError("the record claims a conjugation key but holds none")
        return GaloisKeys(keys, tuple(steps), conjugation)

    def encapsulation_keys(self, record_meta: dict, arrays: "_Arrays") -> EncapsulationKeys | None:
        """The encapsulation keys a record's meta announces (field ``encapsulation``), or None."""
        meta = record_meta.get("encapsulation")
        if meta is None:
            return None
        if not isinstance(meta, dict):
            raise SerializationError("field 'encapsulation' must be a mapping")
        weight = field(meta, "weight", int)
        try:
            small = encapsulation_parameters(self.params, weight)
        except ParameterError as exc:
            raise SerializationError(f"invalid encapsulation keys: {exc}") from None
        to_seed, from_seed = _seeds(meta, 2, "encapsulation keys")
        to_sparse = self.switching_key(arrays, to_seed, "encapsulation key to the sparse secret", small)
        from_sparse = self.switching_key(arrays, from_seed, "encapsulation key from the sparse secret")
        return EncapsulationKeys(weight, to_sparse, from_sparse)

    def secret_key(self, coeffs, pk: PublicKey):
        """The secret key of ``coeffs`` after checking it is the secret of ``pk``: b + a·s = e, the public
        key's error, has every centred coefficient within ``KEY_NOISE_BOUND`` modulo every Q prime (a secret
        of another key set leaves values spread over [-q/2, q/2): a record relabelled with another key id)."""
        n = self.params.n
        if coeffs.shape != (n,) or np.abs(coeffs).max(initial=0) > 1:
            raise SerializationError(f"secret key must be {n} ternary coefficients")
        sk = KeyGenerator(self.params, self.ring, None).secret_key_from_coeffs(coeffs)
        error = (pk.b + pk.a * sk.poly.keep(pk.a.idx)).to_coeff()
        q = error.q
        centred = np.where(error.data > q // 2, q - error.data, error.data)  # |e| mod each prime
        if centred.max(initial=0) > KEY_NOISE_BOUND:
            raise SerializationError("the secret key does not belong to this key set's public key (b + a·s is "
                                     f"not small: its coefficients reach {int(centred.max())} > {KEY_NOISE_BOUND}): "
                                     "a secret key record of another key set")
        return sk


class _Arrays:
    """A record's arrays read in order; ``done`` refuses leftovers."""

    def __init__(self, arrays, start: int = 0, stop: int | None = None):
        self._arrays, self._next = arrays, start
        self._stop = len(arrays) if stop is None else stop

    def next(self, what: str) -> np.ndarray:
        if self._next >= self._stop:
            raise SerializationError(f"the record ends before the arrays of {what}")
        self._next += 1
        return self._arrays[self._next - 1]

    def done(self, what: str) -> None:
        if self._next != self._stop:
            raise SerializationError(f"{what}: {self._stop - self._next} arrays left over")


def _seeds(meta: dict, count: int, what: str) -> list:
    """The ``a_seeds`` of a record holding ``count`` switching keys (all None in the earlier format)."""
    if "a_seeds" not in meta:
        return [None] * count
    seeds = field(meta, "a_seeds", list)
    if len(seeds) != count:
        raise SerializationError(f"{what}: {len(seeds)} key seeds for {count} switching keys")
    out = []
    for seed in seeds:
        if seed is None:
            out.append(None)
            continue
        try:
            raw = bytes.fromhex(seed) if isinstance(seed, str) else None
        except ValueError:
            raw = None
        if raw is None or len(raw) != SEED_BYTES:
            raise SerializationError(f"{what}: key seed {seed!r} is not {SEED_BYTES} bytes of hex")
        out.append(raw)
    return out


def _read_secret_key(blob, params, key_id: bytes) -> np.ndarray:
    _, meta, arrays = unpack(blob, "secret_key", params.fingerprint)
    check_key_id(key_id_of(meta), key_id, "secret key")
    if len(arrays) != 1:
        raise SerializationError("a secret key record holds exactly one array")
    return arrays[0]


def read_context(blob, backend="auto", secret_key=None, with_config: bool = False):
    """The parts of a CKKSContext stored by ``context_to_bytes`` (plus optional ``secret_key_to_bytes`` output):
    (parameters, ring, public key, relinearization key, Galois keys, secret key or None), and with
    ``with_config`` the BootstrapConfig the keys were made for (or None) and the encapsulation keys (or None)."""
    fp, meta, arrays = unpack(blob, ("public_context", "full_context"))
    kind = peek_kind(blob)
    params = parameters_from_meta(meta, fp)
    key_id = key_id_of(meta)
    has_secret = kind == "full_context"
    if len(arrays) < 3 + has_secret:
        raise SerializationError(f"context record holds {len(arrays)} arrays, expected at least {3 + has_secret}")
    reader = _KeyReader(params, backend)
    pk = reader.public_key(arrays[:2], key_id)
    seeds = _seeds(meta, 1 + len(field(meta, "galois_elements", list)), "context record")
    keys = _Arrays(arrays, 2, len(arrays) - has_secret)
    relin = reader.switching_key(keys, seeds[0], "relinearization key")
    galois = reader.galois_keys(meta, keys, seeds[1:])
    encapsulation = reader.encapsulation_keys(meta, keys)
    keys.done("context record")
    coeffs = arrays[-1] if has_secret else None
    if secret_key is not None:
        if coeffs is not None:
            raise SerializationError("the record already holds a secret key; do not pass secret_key too")
        coeffs = _read_secret_key(secret_key, params, key_id)
    sk = None if coeffs is None else reader.secret_key(coeffs, pk)
    if with_config:
        return params, reader.ring, pk, relin, galois, sk, _bootstrap_config(meta), encapsulation
    return params, reader.ring, pk, relin, galois, sk


def _bootstrap_config(meta: dict):
    """The BootstrapConfig stored in a context record's meta (None when absent: records before it)."""
    stored = meta.get("bootstrap")
    if stored is None:
        return None
    try:
        return BootstrapConfig(**stored)
    except (TypeError, ParameterError) as exc:
        raise SerializationError(f"context record: invalid bootstrap config {stored!r}: {exc}") from None


def read_key_records(public_key, relin_key, galois_keys=None, backend="auto"):
    """The parts of a public CKKSContext from separate key records (``public_key_to_bytes`` and friends;
    they must share parameters and key set): (parameters, ring, public key, relinearization key, Galois keys,
    encapsulation keys or None)."""
    fp, meta, pk_arrays = unpack(public_key, "public_key")
    params = parameters_from_meta(meta, fp)
    key_id = key_id_of(meta)
    _, rk_meta, rk_arrays = unpack(relin_key, "relin_key", fp)
    check_key_id(key_id_of(rk_meta), key_id, "relinearization key")
    if len(pk_arrays) != 2:
        raise SerializationError("a public key holds two arrays")
    reader = _KeyReader(params, backend)
    galois, encapsulation = GaloisKeys({}, (), False), None
    if galois_keys is not None:
        _, gk_meta, gk_arrays = unpack(galois_keys, "galois_keys", fp)
        check_key_id(key_id_of(gk_meta), key_id, "Galois keys")
        arrays = _Arrays(gk_arrays)
        galois = reader.galois_keys(gk_meta, arrays,
                                    _seeds(gk_meta, len(field(gk_meta, "galois_elements", list)), "Galois keys"))
        encapsulation = reader.encapsulation_keys(gk_meta, arrays)
        arrays.done("Galois keys record")
    arrays = _Arrays(rk_arrays)
    relin = reader.switching_key(arrays, _seeds(rk_meta, 1, "relinearization key")[0], "relinearization key")
    arrays.done("relinearization key record")
    return params, reader.ring, reader.public_key(pk_arrays, key_id), relin, galois, encapsulation
