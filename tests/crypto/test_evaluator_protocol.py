"""The one CKKS evaluator interface (crypto.ckks.evaluator_protocol.CKKSEvaluator): the host evaluator and the
device evaluator both implement it, with call-compatible signatures, and the device follows the host's operand
rules (levels dropped to the lower one, scales aligned with one level, plaintexts, vectors and scalars as
operands) limb for limb.  The device half runs on CPU XLA on an insecure test ring (N = 2^10)."""
import inspect

import numpy as np
import pytest

from crypto import CKKSContext
from crypto.ckks.evaluator import Evaluator
from crypto.ckks.evaluator_protocol import CKKSEvaluator
from crypto.errors import LevelError, ParameterError, ScaleError

# insecure test ring (tests only): N = 2^10, four levels, dnum = 3
LITERAL = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 3, log_p=[30, 30, 30], log_scale=50, dnum=3, insecure=True)
SLOTS = 2**9
OPERATIONS = [name for name, value in vars(CKKSEvaluator).items() if inspect.isfunction(value)
              and not name.startswith("_")]


def incompatibilities(protocol_method, method) -> list[str]:
    """Why ``method`` (bound) cannot stand where the protocol's method is called: each positional parameter of
    the protocol must be accepted positionally, each keyword-only one by name, with a default where the
    protocol has one (the same default); parameters the protocol lacks must be optional."""
    wanted = list(inspect.signature(protocol_method).parameters.values())[1:]       # without self
    have = list(inspect.signature(method).parameters.values())
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in have)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in have)
    positional = [p for p in have if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in have if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    problems = []
    wanted_pos = [p for p in wanted if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    wanted_kw = [p for p in wanted if p.kind is p.KEYWORD_ONLY]
    for k, p in enumerate(wanted_pos):
        if k >= len(positional):
            if not var_pos:
                problems.append(f"positional parameter {k} ({p.name}) missing")
            continue
        if p.default is not p.empty and positional[k].default != p.default:
            problems.append(f"parameter {positional[k].name}: default {positional[k].default!r}, wanted {p.default!r}")
    problems += [f"extra required parameter {p.name}" for p in positional[len(wanted_pos):] if p.default is p.empty]
    for p in wanted_kw:
        q = by_name.get(p.name)
        if q is None:
            if not var_kw:
                problems.append(f"keyword parameter {p.name} missing")
        elif p.default is not p.empty and q.default != p.default:
            problems.append(f"keyword {p.name}: default {q.default!r}, wanted {p.default!r}")
    names = {p.name for p in wanted_kw}
    problems += [f"extra required keyword {p.name}" for p in have
                 if p.kind is p.KEYWORD_ONLY and p.name not in names and p.default is p.empty]
    return problems


def assert_implements(evaluator):
    assert isinstance(evaluator, CKKSEvaluator)
    for name in OPERATIONS:
        assert incompatibilities(getattr(CKKSEvaluator, name), getattr(evaluator, name)) == [], name


@pytest.fixture(scope="module")
def ctx():
    return CKKSContext.keygen(LITERAL, rotations=[1, 3], conjugation=True, seed=5, backend="numba")


def test_the_protocol_names_what_the_model_path_and_bootstrapping_call():
    assert {"from_host", "to_host", "encode", "add", "sub", "neg", "mul", "mul_rescale", "rescale", "to_level",
            "drop_level", "rotate", "rotate_hoisted", "conjugate", "bootstrap"} == set(OPERATIONS)


def test_host_evaluator_implements_the_protocol(ctx):
    ev = ctx.evaluator
    assert isinstance(ev, Evaluator)
    assert_implements(ev)
    ct = ctx.encrypt(np.ones(4))
    assert ev.from_host(ct) is ct and ev.to_host(ct) is ct          # host ciphertexts are its own
    with pytest.raises(ParameterError, match="Ciphertext"):
        ev.from_host(np.ones(4))


class _Partial:
    """Every operation but ``rotate_hoisted``; ``rotate`` without its step; ``bootstrap`` without progress."""
    params = key_id = fingerprint = None

    def rotate(self, ct):
        return ct

    def bootstrap(self, ct, config=None):
        return ct


for _name in set(OPERATIONS) - {"rotate", "bootstrap", "rotate_hoisted"}:
    setattr(_Partial, _name, lambda self, *args, **kwargs: None)


def test_incomplete_or_incompatible_evaluators_are_told_apart(ctx):
    """Negative controls: a missing operation fails ``isinstance``; a wrong signature fails the check that the
    two real evaluators pass."""
    partial = _Partial()
    assert not isinstance(partial, CKKSEvaluator)
    _Partial.rotate_hoisted = lambda self, ct, steps: {}
    try:
        assert isinstance(partial, CKKSEvaluator)                      # names alone pass isinstance ...
        assert incompatibilities(CKKSEvaluator.rotate, partial.rotate) == ["positional parameter 1 (step) missing"]
        assert incompatibilities(CKKSEvaluator.bootstrap, partial.bootstrap) == ["keyword parameter progress missing"]
        assert incompatibilities(CKKSEvaluator.rotate, ctx.evaluator.rotate) == []   # ... the signatures do not
    finally:
        del _Partial.rotate_hoisted


# -- the device evaluator ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dev(ctx):
    pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cpu]'): the device path is optional")
    from crypto.ckks.jax_device import DeviceEvaluator
    return DeviceEvaluator(ctx)


def assert_same(host, device_ct, dev):
    got = dev.to_host(device_ct)
    assert (got.level, got.scale, got.length, got.is_complex) == (host.level, host.scale, host.length, host.is_complex)
    for g, h in zip(got.parts, host.parts):
        assert np.array_equal(g.data, h.data)


def test_device_evaluator_implements_the_protocol(ctx, dev):
    assert_implements(dev)
    assert (dev.key_id, dev.fingerprint) == (ctx.key_id, ctx.params.fingerprint)
    ct = ctx.encrypt(np.ones(4))
    assert_same(ct, dev.from_host(ct), dev)


def test_device_follows_the_host_operand_rules(ctx, dev):
    """Mixed levels, mixed scales, host plaintexts above the ciphertext's level, vectors and scalars on either
    side: the device's ciphertext equals the host's limb for limb (the rules the model path relies on)."""
    ev = ctx.evaluator
    rng = np.random.default_rng(7)
    x, y, v = rng.uniform(-1, 1, SLOTS), rng.uniform(-1, 1, SLOTS), rng.uniform(-1, 1, 8)
    a, b = ctx.encrypt(x), ctx.encrypt(y, level=2)
    da, db = dev.from_host(a), dev.from_host(b)
    assert_same(ev.add(a, b), dev.add(da, db), dev)                                # levels aligned
    assert_same(ev.sub(b, a), dev.sub(db, da), dev)
    p = ev.mul_rescale(a, a)                                                       # scale ≠ Δ, level 2
    assert abs(p.scale / b.scale - 1) > 2**-45
    assert_same(ev.add(p, a), dev.add(dev.from_host(p), da), dev)                  # scales aligned (one level)
    assert_same(ev.sub(a, p), dev.sub(da, dev.from_host(p)), dev)
    pt = ev.encode(v, a.level, b.scale)                                            # a plaintext above b's level
    assert_same(ev.add(b, pt), dev.add(db, pt), dev)
    assert_same(ev.sub(b, pt), dev.sub(db, pt), dev)
    assert_same(ev.mul(b, pt), dev.mul(pt, db), dev)
    assert_same(ev.add(a, v), dev.add(v, da), dev)                                 # vectors, either side
    assert_same(ev.sub(a, list(v)), dev.sub(da, list(v)), dev)
    assert_same(ev.mul_rescale(a, v), dev.mul_rescale(da, v), dev)
    assert_same(ev.sub(2.0, a), dev.sub(2.0, da), dev)                             # scalars
    assert_same(ev.mul_rescale(a, -0.75), dev.mul_rescale(da, -0.75), dev)
    assert_same(ev.drop_level(a, 2), dev.drop_level(da, 2), dev)
    assert_same(ev.mul(a, ev.encode(v, 3, 2.0**40)), dev.mul(da, dev.encode(v, 3, 2.0**40)), dev)
    assert np.abs(ctx.decrypt(dev.to_host(dev.add(da, db))) - (x + y)).max() < 2**-20


@pytest.mark.slow  # ~10 s on 2 shared cores: two key-switching compilations
def test_device_products_of_ciphertexts_at_two_levels_match_host(ctx, dev):
    ev = ctx.evaluator
    rng = np.random.default_rng(8)
    a, b = ctx.encrypt(rng.uniform(-1, 1, SLOTS)), ctx.encrypt(rng.uniform(-1, 1, SLOTS), level=2)
    da, db = dev.from_host(a), dev.from_host(b)
    assert_same(ev.mul(a, b), dev.mul(da, db), dev)
    assert_same(ev.mul_rescale(b, a), dev.mul_rescale(db, da), dev)


def test_device_refuses_what_the_host_refuses(ctx, dev):
    ev = ctx.evaluator
    a = ctx.encrypt(np.ones(4))
    da = dev.from_host(a)
    with pytest.raises(ParameterError, match="to_device"):                         # a host ciphertext: upload it
        dev.add(da, a)
    with pytest.raises(ParameterError, match="set"):
        dev.mul(da, {1, 2})
    off = ev.encode(np.ones(4), a.level, a.scale * 3)
    for evaluator, ct in ((ev, a), (dev, da)):
        with pytest.raises(ScaleError, match="encode it at scale=ct.scale"):
            evaluator.add(ct, off)
        with pytest.raises(LevelError, match="levels=5"):
            evaluator.drop_level(ct, 5)
