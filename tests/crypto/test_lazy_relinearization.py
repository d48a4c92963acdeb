"""Lazy relinearization (``Evaluator.mul_accumulate`` / ``relinearize_sum``): a sum of ciphertext products key-switched
once decrypts to the sum of the products relinearized one by one (its twin) within the TOY bound, refuses products
of another level or scale and anything but its own sums, and the skewed attention products use it (one key switch
per output ciphertext instead of one per step)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext, CKKSParameters
from crypto.ckks.evaluator import Evaluator, ProductSum
from crypto.errors import ParameterError, ScaleError


@pytest.fixture(scope="module")
def ctx():
    return CKKSContext.keygen(CKKSParameters.preset("TOY"), seed=3)


@settings(max_examples=8, deadline=None)
@given(terms=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_a_lazy_sum_decrypts_as_the_sum_of_relinearized_products(ctx, terms, seed):
    rng = np.random.default_rng(seed)
    ev = ctx.evaluator
    xs = [rng.uniform(-1, 1, ctx.params.slots) for _ in range(2 * terms)]
    cts = [ctx.encrypt(x) for x in xs]
    acc, eager = None, None
    for a, b in zip(cts[::2], cts[1::2]):
        acc = ev.mul_accumulate(acc, a, b)
        product = ev.mul(a, b)
        eager = product if eager is None else ev.add(eager, product)
    assert isinstance(acc, ProductSum) and len(acc.parts) == 3
    lazy = ev.relinearize_sum(acc)
    assert (lazy.level, lazy.scale) == (eager.level, eager.scale)
    want = sum(a * b for a, b in zip(xs[::2], xs[1::2]))
    got, twin = np.real(ctx.decrypt(ev.rescale(lazy))), np.real(ctx.decrypt(ev.rescale(eager)))
    assert np.max(np.abs(got - want)) <= 1e-6 * max(1.0, np.max(np.abs(want)))
    assert np.max(np.abs(got - twin)) <= 1e-6 * max(1.0, np.max(np.abs(want)))


def test_one_key_switch_for_the_whole_sum(ctx, monkeypatch):
    calls = []
    original = Evaluator._relinearize
    monkeypatch.setattr(Evaluator, "_relinearize", lambda self, *args: calls.append(1) or original(self, *args))
    ev = ctx.evaluator
    ct = ctx.encrypt(np.full(ctx.params.slots, 0.5))
    acc = None
    for _ in range(5):
        acc = ev.mul_accumulate(acc, ct, ct)
    ev.relinearize_sum(acc)
    assert len(calls) == 1


def test_a_product_of_another_level_or_a_foreign_sum_is_refused(ctx):
    ev = ctx.evaluator
    ct = ctx.encrypt(np.full(ctx.params.slots, 0.5))
    acc = ev.mul_accumulate(None, ct, ct)
    lower = ev.rescale(ev.mul(ct, ct))
    with pytest.raises(ScaleError, match="cannot join a sum at level"):
        ev.mul_accumulate(acc, lower, lower)
    with pytest.raises(ParameterError, match="two ciphertexts"):
        ev.mul_accumulate(acc, ct, np.ones(ctx.params.slots))
    with pytest.raises(ParameterError, match="mul_accumulate sum"):
        ev.relinearize_sum(ct)


@pytest.mark.parametrize("drop", [0, 2])
def test_skewed_attention_products_relinearize_once_per_output_ciphertext(monkeypatch, drop):
    """Scores of 2 heads (16 tokens, head size 8) by the skewed products: 8 steps, one key switch for their sum, also
    with the operands at different levels (``drop`` levels apart: attention's weights and values; they meet at one
    level once, ``AlignLevel``); the result within the TOY bound of numpy."""
    from tensor_ops import einsum, encrypt
    from tensor_ops.plan import plan
    from tensor_ops.plan import build
    from tensor_ops.plan.steps import MultiplyAccumulate, Relinearize
    # INSECURE (tests only): 8 levels at N = 2^10, room for the plan below two dropped levels
    params = CKKSParameters.from_literal(dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 8, log_p=[30, 30, 30],
                                              log_scale=50, dnum=5, insecure=True))
    with monkeypatch.context() as only_skewed:      # the other strategies withheld
        only_skewed.setattr(build, "pair_with", lambda *args, **kw: None)
        only_skewed.setattr(build, "pair_stationary", lambda *args, **kw: None)
        p = plan("hid,hjd->hij", (2, 16, 8), (2, 16, 8), params=params)
    assert "skewed" in p.notes[0].split(" over ")[0]
    steps = sum(isinstance(s, MultiplyAccumulate) for s in p.steps)
    closes = sum(isinstance(s, Relinearize) for s in p.steps)
    assert closes == len(p.output_regs) and steps >= 8 * closes
    context = CKKSContext.keygen(params, rotations=p.rotations(), seed=5)
    calls = []
    original = Evaluator._relinearize
    monkeypatch.setattr(Evaluator, "_relinearize", lambda self, *args: calls.append(1) or original(self, *args))
    rng = np.random.default_rng(6)
    a, b = rng.uniform(-1, 1, (2, 16, 8)), rng.uniform(-1, 1, (2, 16, 8))
    first, second = encrypt(context, a), encrypt(context, b)
    if drop:
        second = type(second)([context.evaluator.to_level(ct, ct.level - drop) for ct in second.ciphertexts],
                              second.layout, second.backend)
    got = einsum("hid,hjd->hij", first, second, plan=p).decrypt()
    assert len(calls) == closes
    assert np.max(np.abs(got - np.einsum("hid,hjd->hij", a, b))) <= 1e-6 * max(1.0, np.max(np.abs(got)))


def test_the_recording_backend_prices_a_lazy_sum_as_tensors_and_one_relinearization():
    """The plan's level-recording twin (``attention_plan.BootstrapRecorder``) follows the same rule: products of two
    ciphertexts at one level join the sum as tensor products, its close counts one relinearization; a product at
    another level relinearizes the pending sum first."""
    from tensor_ops.attention_plan import BootstrapRecorder

    rec = BootstrapRecorder(64, 6, 6)
    rng = np.random.default_rng(1)
    xs = [rec.encrypt(rng.uniform(-1, 1, 64)) for _ in range(6)]
    acc = None
    for a, b in zip(xs[::2], xs[1::2]):
        acc = rec.multiply_accumulate(acc, a, b)
    out = rec.relinearize_sum(acc)
    np.testing.assert_allclose(out, sum(np.asarray(a) * np.asarray(b) for a, b in zip(xs[::2], xs[1::2])))
    assert (rec.products["ct_tensor"], rec.products["relinearize"], rec.products["ct_ct"]) == (3, 1, 0)
    lower = rec.rescale(rec.multiply(xs[0], xs[1]))
    acc = rec.multiply_accumulate(rec.multiply_accumulate(None, xs[0], xs[1]), lower, lower)
    assert (rec.products["ct_tensor"], rec.products["relinearize"], rec.products["ct_ct"]) == (4, 2, 2)
    assert rec.relinearize_sum(acc) is acc and rec.products["relinearize"] == 2


def test_the_plan_backend_falls_back_for_a_product_at_another_level(ctx):
    """``CKKSBackend.multiply_accumulate``: a product below the pending sum's level relinearizes the sum and adds."""
    from tensor_ops.backends import CKKSBackend

    be, ev = CKKSBackend(ctx), ctx.evaluator
    x = np.full(ctx.params.slots, 0.5)
    ct = ctx.encrypt(x)
    lower = ev.rescale(ev.mul(ct, ct))                       # 0.25, a level down
    acc = be.multiply_accumulate(None, ct, ct)
    assert isinstance(acc, ProductSum)
    mixed = be.multiply_accumulate(be.multiply_accumulate(acc, ct, ct), lower, lower)
    assert not isinstance(mixed, ProductSum) and be.relinearize_sum(mixed) is mixed
    got = np.real(ctx.decrypt(ev.rescale(mixed)))
    assert np.max(np.abs(got - (2 * 0.25 + 0.0625))) < 1e-6


def test_a_sum_made_under_another_key_set_is_refused(ctx):
    """A sum carries its context: another key set's evaluator refuses to add to it or to relinearize it (its
    relinearization key would turn it into noise), naming the key sets."""
    from crypto.errors import ContextMismatchError

    other = CKKSContext.keygen(ctx.params, seed=4)
    ct = ctx.encrypt(np.full(ctx.params.slots, 0.5))
    foreign = ctx.evaluator.mul_accumulate(None, ct, ct)
    with pytest.raises(ContextMismatchError, match="key set"):
        other.evaluator.relinearize_sum(foreign)
    mine = other.encrypt(np.full(ctx.params.slots, 0.5))
    with pytest.raises(ContextMismatchError, match="key set"):
        other.evaluator.mul_accumulate(foreign, mine, mine)
