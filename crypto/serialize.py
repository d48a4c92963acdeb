"""Versioned, magic-tagged, length-checked bytes for every public object of the scheme.

Layout of one record (all integers little-endian)::

    b"HEZK" | version u16 | kind u8 | fingerprint length u8 | fingerprint | payload length u64 |
    payload | SHA-256(everything before)[:16]

The payload is ``meta length u32 | meta (UTF-8 JSON) | arrays``; the meta lists each array's dtype
and shape, so every length is checked before a byte is read.  The fingerprint is the parameter
set's, so bytes made under other parameters raise ContextMismatchError; truncated, corrupted, foreign
or future-version bytes raise SerializationError.  Residues are stored as uint32 (all primes < 2^31).
"""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from .errors import ContextMismatchError, SerializationError

MAGIC = b"HEZK"
VERSION = 1
_DIGEST = 16
_HEAD = struct.Struct("<4sHBB")
_LEN64 = struct.Struct("<Q")
_LEN32 = struct.Struct("<I")
_DTYPES = {"u4": np.dtype("<u4"), "u8": np.dtype("<u8"), "i8": np.dtype("<i8"), "f8": np.dtype("<f8"),
           "u1": np.dtype("u1")}

KINDS = {
    "parameters": 1, "plaintext": 2, "ciphertext": 3, "public_key": 4, "relin_key": 5,
    "galois_keys": 6, "public_context": 7, "secret_key": 8, "full_context": 9,
}
_KIND_NAMES = {v: k for k, v in KINDS.items()}


def _checksum(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:_DIGEST]


def pack(kind: str, fingerprint: bytes, meta: dict, arrays=()) -> bytes:
    """One record of ``kind``: JSON-serialisable ``meta`` plus numpy ``arrays`` (stored in order)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    specs = []
    for a in arrays:
        code = next((c for c, dt in _DTYPES.items() if a.dtype == dt), None)
        if code is None:
            raise SerializationError(f"array dtype {a.dtype} cannot be stored; use one of {sorted(_DTYPES)}")
        specs.append([code, list(a.shape)])
    meta_bytes = json.dumps({"meta": meta, "arrays": specs}, separators=(",", ":")).encode()
    payload = b"".join([_LEN32.pack(len(meta_bytes)), meta_bytes]
                       + [a.astype(_DTYPES[s[0]], copy=False).tobytes() for a, s in zip(arrays, specs)])
    body = b"".join([_HEAD.pack(MAGIC, VERSION, KINDS[kind], len(fingerprint)), fingerprint,
                     _LEN64.pack(len(payload)), payload])
    return body + _checksum(body)


def unpack(blob, kind: str, fingerprint: bytes | None = None) -> tuple[bytes, dict, list[np.ndarray]]:
    """Parse a record made by :func:`pack`: returns (fingerprint, meta, arrays).

    Checks magic, version, kind, every length and the checksum (SerializationError), then, when
    ``fingerprint`` is given, that the record was made under those parameters (ContextMismatchError).
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SerializationError(f"expected bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < _HEAD.size + _LEN64.size + _DIGEST:
        raise SerializationError(f"{len(blob)} bytes is too short for a hezk record "
                                 f"(at least {_HEAD.size + _LEN64.size + _DIGEST})")
    magic, version, kind_code, fp_len = _HEAD.unpack_from(blob, 0)
    if magic != MAGIC:
        raise SerializationError(f"magic={magic!r} is not a hezk record (expected {MAGIC!r})")
    if version != VERSION:
        raise SerializationError(f"version={version} is not supported (this library reads version {VERSION})")
    expected_length = _HEAD.size + fp_len + _LEN64.size
    if len(blob) < expected_length + _DIGEST:
        raise SerializationError(f"record truncated: {len(blob)} bytes, header alone needs {expected_length}")
    (payload_length,) = _LEN64.unpack_from(blob, _HEAD.size + fp_len)
    expected_length += payload_length
    if len(blob) != expected_length + _DIGEST:
        raise SerializationError(f"record length {len(blob)} bytes does not match its header "
                                 f"({expected_length + _DIGEST} bytes): truncated or padded")
    if _checksum(blob[:expected_length]) != blob[expected_length:]:
        raise SerializationError("checksum mismatch: the bytes are corrupted")
    if kind_code not in _KIND_NAMES or _KIND_NAMES[kind_code] != kind:
        found = _KIND_NAMES.get(kind_code, f"unknown kind {kind_code}")
        raise SerializationError(f"record holds a {found}, expected a {kind}")
    record_fp = blob[_HEAD.size: _HEAD.size + fp_len]
    if fingerprint is not None and record_fp != fingerprint:
        raise ContextMismatchError(f"{kind} was made under parameters with fingerprint {record_fp.hex()[:16]}…, "
                                   f"this context has {fingerprint.hex()[:16]}…")
    payload = blob[_HEAD.size + fp_len + _LEN64.size: expected_length]
    meta, arrays = _parse_payload(payload)
    return record_fp, meta, arrays


def _parse_payload(payload: bytes) -> tuple[dict, list[np.ndarray]]:
    try:
        (meta_length,) = _LEN32.unpack_from(payload, 0)
        doc = json.loads(payload[_LEN32.size: _LEN32.size + meta_length].decode())
        meta, specs = doc["meta"], doc["arrays"]
        offset = _LEN32.size + meta_length
        arrays = []
        for code, shape in specs:
            dtype = _DTYPES[code]
            count = int(np.prod(shape, dtype=np.int64))
            if count < 0 or any(int(d) < 0 for d in shape):
                raise ValueError(f"negative shape {shape}")
            end = offset + count * dtype.itemsize
            if end > len(payload):
                raise ValueError(f"array of shape {shape} runs past the payload end")
            arrays.append(np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape))
            offset = end
        if offset != len(payload):
            raise ValueError(f"{len(payload) - offset} unexpected bytes after the last array")
    except SerializationError:
        raise
    except Exception as exc:  # malformed JSON, missing fields, wrong types: all the same to the caller
        raise SerializationError(f"malformed payload: {exc}") from None
    return meta, arrays


def field(meta: dict, name: str, kind: type):
    """meta[name] checked to be of ``kind``; SerializationError otherwise."""
    value = meta.get(name) if isinstance(meta, dict) else None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SerializationError(f"field {name!r}={value!r} is missing or not a {kind.__name__}")
    return value


# -- the scheme's objects ---------------------------------------------------------------------------
def _residue_array(data: np.ndarray) -> np.ndarray:
    return np.asarray(data).astype("<u4")


def _checked_residues(arr: np.ndarray, shape: tuple, moduli, what: str) -> np.ndarray:
    """uint64 copy of ``arr`` after checking its shape and that row i is below moduli[i] (axis -2)."""
    if tuple(arr.shape) != tuple(shape):
        raise SerializationError(f"{what} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
    out = arr.astype(np.uint64)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    if out.size and (out >= q).any():
        raise SerializationError(f"{what} holds residues that are not reduced modulo their primes")
    return out


def _key_id(meta: dict) -> bytes:
    try:
        return bytes.fromhex(field(meta, "key_id", str))
    except ValueError:
        raise SerializationError(f"field 'key_id'={meta.get('key_id')!r} is not hex") from None


def _check_key_id(found: bytes, expected: bytes, what: str):
    if found != expected:
        raise ContextMismatchError(f"{what} belongs to key set {found.hex()[:12]}…, "
                                   f"this context holds key set {expected.hex()[:12]}…")


def _level(meta: dict, params) -> int:
    level = field(meta, "level", int)
    if not 0 <= level <= params.max_level:
        raise SerializationError(f"field 'level'={level} not in [0, {params.max_level}]")
    return level


def _value_meta(meta: dict, params) -> tuple[float, int, bool]:
    scale = field(meta, "scale", float)
    if not np.isfinite(scale) or scale <= 0:
        raise SerializationError(f"field 'scale'={scale} must be finite and positive")
    length = field(meta, "length", int)
    if not 0 <= length <= params.slots:
        raise SerializationError(f"field 'length'={length} not in [0, {params.slots}]")
    return scale, length, field(meta, "is_complex", bool)


def parameters_to_bytes(params) -> bytes:
    return pack("parameters", params.fingerprint, {"params": params.to_dict()})


def parameters_from_bytes(blob):
    fp, meta, _ = unpack(blob, "parameters")
    return _parameters(meta, fp)


def _parameters(meta: dict, fp: bytes):
    from .errors import ParameterError
    from .params import CKKSParameters
    try:
        params = CKKSParameters.from_dict(field(meta, "params", dict))
    except ParameterError as exc:
        raise SerializationError(f"stored parameters are invalid: {exc}") from None
    if params.fingerprint != fp:
        raise SerializationError("stored parameters do not match the record's fingerprint")
    return params


def ciphertext_to_bytes(ct) -> bytes:
    meta = {"level": ct.level, "scale": ct.scale, "length": ct.length, "is_complex": ct.is_complex,
            "key_id": ct.key_id.hex()}
    return pack("ciphertext", ct.fingerprint, meta, [_residue_array(np.stack([p.data for p in ct.parts]))])


def _check_context(ctx):
    from .context import CKKSContext
    from .errors import ParameterError
    if not isinstance(ctx, CKKSContext):
        raise ParameterError(f"ctx must be a CKKSContext, got {type(ctx).__name__}")


def ciphertext_from_bytes(blob, ctx):
    """A ciphertext for ``ctx`` (a CKKSContext); its evaluator is attached."""
    from .ring import RNSPoly
    from .rlwe import Ciphertext
    _check_context(ctx)
    params = ctx.params
    _, meta, arrays = unpack(blob, "ciphertext", params.fingerprint)
    _check_key_id(_key_id(meta), ctx.key_id, "ciphertext")
    level = _level(meta, params)
    scale, length, is_complex = _value_meta(meta, params)
    if len(arrays) != 1 or arrays[0].ndim != 3 or arrays[0].shape[0] not in (2, 3):
        raise SerializationError("a ciphertext holds one array of 2 or 3 parts")
    idx = tuple(range(params.limbs_at(level)))
    shape = (arrays[0].shape[0], len(idx), params.n)
    data = _checked_residues(arrays[0], shape, params.q_moduli[: len(idx)], "ciphertext data")
    parts = tuple(RNSPoly(ctx.ring, d, idx, True) for d in data)
    return Ciphertext(parts, level, scale, length, is_complex, params.fingerprint, ctx.key_id, ctx.evaluator)


def plaintext_to_bytes(pt) -> bytes:
    meta = {"level": pt.level, "scale": pt.scale, "length": pt.length, "is_complex": pt.is_complex}
    return pack("plaintext", pt.fingerprint, meta, [_residue_array(pt.poly.data)])


def plaintext_from_bytes(blob, ctx):
    from .ring import RNSPoly
    from .rlwe import Plaintext
    _check_context(ctx)
    params = ctx.params
    _, meta, arrays = unpack(blob, "plaintext", params.fingerprint)
    level = _level(meta, params)
    scale, length, is_complex = _value_meta(meta, params)
    if len(arrays) != 1:
        raise SerializationError("a plaintext holds exactly one array")
    idx = tuple(range(params.limbs_at(level)))
    data = _checked_residues(arrays[0], (len(idx), params.n), params.q_moduli[: len(idx)], "plaintext data")
    return Plaintext(RNSPoly(ctx.ring, data, idx, True), level, scale, length, is_complex, params.fingerprint)


def _key_meta(ctx) -> dict:
    return {"params": ctx.params.to_dict(), "key_id": ctx.key_id.hex()}


def _galois_meta(ctx) -> tuple[dict, list]:
    gk = ctx.galois_keys
    elements = sorted(gk.keys)
    meta = {"steps": list(gk.steps), "conjugation": gk.conjugation, "galois_elements": elements}
    return meta, [part for g in elements for part in (gk.keys[g].b, gk.keys[g].a)]


def _key_arrays(ctx) -> tuple[dict, list]:
    """Meta and arrays of the public material: public key, relinearization key, Galois keys."""
    galois_meta, galois_arrays = _galois_meta(ctx)
    arrays = [ctx.public_key.b.data, ctx.public_key.a.data, ctx.relin_key.b, ctx.relin_key.a] + galois_arrays
    return {**_key_meta(ctx), **galois_meta}, [_residue_array(a) for a in arrays]


def public_key_to_bytes(ctx) -> bytes:
    return pack("public_key", ctx.params.fingerprint, _key_meta(ctx),
                [_residue_array(ctx.public_key.b.data), _residue_array(ctx.public_key.a.data)])


def relin_key_to_bytes(ctx) -> bytes:
    return pack("relin_key", ctx.params.fingerprint, _key_meta(ctx),
                [_residue_array(ctx.relin_key.b), _residue_array(ctx.relin_key.a)])


def galois_keys_to_bytes(ctx) -> bytes:
    galois_meta, arrays = _galois_meta(ctx)
    return pack("galois_keys", ctx.params.fingerprint, {**_key_meta(ctx), **galois_meta},
                [_residue_array(a) for a in arrays])


def context_to_bytes(ctx, include_secret_key: bool = False) -> bytes:
    meta, arrays = _key_arrays(ctx)
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


def peek_kind(blob) -> str:
    """The kind of a record, after checking only its magic and version."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) < _HEAD.size:
        raise SerializationError("not a hezk record: too short or not bytes")
    magic, version, kind_code, _ = _HEAD.unpack_from(bytes(blob[: _HEAD.size]), 0)
    if magic != MAGIC:
        raise SerializationError(f"magic={magic!r} is not a hezk record (expected {MAGIC!r})")
    if kind_code not in _KIND_NAMES:
        raise SerializationError(f"unknown record kind {kind_code}")
    return _KIND_NAMES[kind_code]


class _KeyReader:
    """Parses the key arrays of one parameter set (shapes and residue ranges checked)."""

    def __init__(self, params, backend):
        from .ring import RingContext
        self.params = params
        self.ring = RingContext(params.n, params.moduli, backend)

    def public_key(self, arrays, key_id: bytes):
        from .ring import RNSPoly
        from .rlwe import PublicKey
        params = self.params
        q_idx = tuple(range(len(params.q_moduli)))
        pk = PublicKey(*(RNSPoly(self.ring, _checked_residues(a, (len(q_idx), params.n), params.q_moduli,
                                                              "public key"), q_idx, True) for a in arrays))
        if pk.key_id != key_id:
            raise SerializationError("the public key does not match the stored key-set id: corrupted record")
        return pk

    def switching_key(self, b, a, what: str):
        from .keyswitch import SwitchingKey
        params = self.params
        shape = (len(params.digits), len(params.moduli), params.n)
        return SwitchingKey(_checked_residues(b, shape, params.moduli, what),
                            _checked_residues(a, shape, params.moduli, what), params.moduli)

    def galois_keys(self, meta: dict, arrays):
        from .keyswitch import GaloisKeys
        n = self.params.n
        elements = field(meta, "galois_elements", list)
        steps = field(meta, "steps", list)
        conjugation = field(meta, "conjugation", bool)
        if len(arrays) != 2 * len(elements):
            raise SerializationError(f"{len(arrays)} Galois key arrays for {len(elements)} Galois elements")
        keys = {}
        for i, g in enumerate(elements):
            if not isinstance(g, int) or g % 2 == 0 or not 0 < g < 2 * n:
                raise SerializationError(f"Galois element {g!r} is not an odd integer in (0, {2 * n})")
            keys[g] = self.switching_key(arrays[2 * i], arrays[2 * i + 1], f"Galois key {g}")
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in steps):
            raise SerializationError("field 'steps' must hold integers")
        if conjugation and 2 * n - 1 not in keys:
            raise SerializationError("the record claims a conjugation key but holds none")
        return GaloisKeys(keys, tuple(steps), conjugation)

    def secret_key(self, coeffs):
        from .rlwe import KeyGenerator
        n = self.params.n
        if coeffs.shape != (n,) or np.abs(coeffs).max(initial=0) > 1:
            raise SerializationError(f"secret key must be {n} ternary coefficients")
        return KeyGenerator(self.params, self.ring, None).secret_key_from_coeffs(coeffs)


def _read_secret_key(blob, params, key_id: bytes) -> np.ndarray:
    _, meta, arrays = unpack(blob, "secret_key", params.fingerprint)
    _check_key_id(_key_id(meta), key_id, "secret key")
    if len(arrays) != 1:
        raise SerializationError("a secret key record holds exactly one array")
    return arrays[0]


def context_from_bytes(blob, backend="auto", secret_key=None):
    """A CKKSContext from ``context_to_bytes`` output (plus optional ``secret_key_to_bytes`` output)."""
    from .context import CKKSContext

    kind = peek_kind(blob)
    if kind not in ("public_context", "full_context"):
        raise SerializationError(f"record holds a {kind}, expected a public_context or full_context")
    fp, meta, arrays = unpack(blob, kind)
    params = _parameters(meta, fp)
    key_id = _key_id(meta)
    has_secret = kind == "full_context"
    if len(arrays) < 4 + has_secret:
        raise SerializationError(f"context record holds {len(arrays)} arrays, expected at least {4 + has_secret}")
    reader = _KeyReader(params, backend)
    pk = reader.public_key(arrays[:2], key_id)
    relin = reader.switching_key(arrays[2], arrays[3], "relinearization key")
    galois = reader.galois_keys(meta, arrays[4: len(arrays) - has_secret])
    coeffs = arrays[-1] if has_secret else None
    if secret_key is not None:
        if coeffs is not None:
            raise SerializationError("the record already holds a secret key; do not pass secret_key too")
        coeffs = _read_secret_key(secret_key, params, key_id)
    sk = None if coeffs is None else reader.secret_key(coeffs)
    return CKKSContext(params, reader.ring, pk, relin, galois, sk)


def context_from_key_bytes(public_key, relin_key, galois_keys=None, backend="auto"):
    """A public CKKSContext from separate key records (``public_key_to_bytes`` and friends); the
    records must share parameters and key set."""
    from .context import CKKSContext
    from .keyswitch import GaloisKeys

    fp, meta, pk_arrays = unpack(public_key, "public_key")
    params = _parameters(meta, fp)
    key_id = _key_id(meta)
    _, rk_meta, rk_arrays = unpack(relin_key, "relin_key", fp)
    _check_key_id(_key_id(rk_meta), key_id, "relinearization key")
    if len(pk_arrays) != 2 or len(rk_arrays) != 2:
        raise SerializationError("a public key and a relinearization key hold two arrays each")
    reader = _KeyReader(params, backend)
    galois = GaloisKeys({}, (), False)
    if galois_keys is not None:
        _, gk_meta, gk_arrays = unpack(galois_keys, "galois_keys", fp)
        _check_key_id(_key_id(gk_meta), key_id, "Galois keys")
        galois = reader.galois_keys(gk_meta, gk_arrays)
    return CKKSContext(params, reader.ring, reader.public_key(pk_arrays, key_id),
                       reader.switching_key(*rk_arrays, "relinearization key"), galois)
