"""Issue 12 item 3: the packed server path runs sparse stages in slot layouts chosen per convolution."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from tensor_ops.inference import Client, EncryptedModel, Server
from tensor_ops.model_plan import ActivationStage
from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, Sequential, Square
from tensor_ops.packing import PackedAffine, SparseMap, packed_stages


def cnn(seed=0, c=2, o=3, size=8, kernel=3, padding=1):
    rng = np.random.default_rng(seed)
    side = (size + 2 * padding - kernel + 1) // 2
    return Sequential([Conv2d(rng.normal(0, .3, (o, c, kernel, kernel)), rng.normal(0, .1, o), padding=padding),
                       Square(), AvgPool2d(2), Flatten(), Linear(rng.normal(0, .3, (4, o * side * side)),
                                                                 rng.normal(0, .1, 4))], input_shape=(c, size, size))


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 1000))
def test_sparse_compose_and_apply_equal_dense(n, m, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, m)) * (rng.uniform(size=(n, m)) < .5)
    b = rng.normal(size=(m, k)) * (rng.uniform(size=(m, k)) < .5)
    x = rng.normal(size=(3, k))
    sa, sb = SparseMap.from_dense(a), SparseMap.from_dense(b)
    np.testing.assert_allclose(sa.compose(sb).toarray(), a @ b, atol=1e-12)
    np.testing.assert_allclose(sb.apply(x), x @ b.T, atol=1e-12)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.sampled_from([(8, 3, 1), (8, 3, 0), (6, 1, 0), (10, 3, 1)]),
       st.sampled_from(["rotations", "dense"]), st.integers(0, 100))
def test_packed_stages_on_plain_slots_equal_the_model(c, o, geometry, choice, seed):
    """The naive twin (np.roll rotations of the slot vector) of every stage equals the float forward."""
    size, kernel, padding = geometry
    model = cnn(seed, c, o, size, kernel, padding)
    stages, block = packed_stages(model, model.input_shape, {0: choice}, ActivationStage)
    x = np.random.default_rng(seed).uniform(-1, 1, (2, *model.input_shape))
    v = np.zeros(4 * block)
    for b in range(2):
        v[b * block:b * block + x[b].size] = x[b].ravel()
    for stage in stages:
        v = stage.apply_slots(v, block) if isinstance(stage, PackedAffine) else stage.apply(v)
    got = np.stack([v[b * block:b * block + 4] for b in range(2)])
    np.testing.assert_allclose(got, model.forward(x), atol=1e-9)


def test_rotations_lowering_keeps_few_offsets_and_pools_by_window_sums():
    model = cnn(1, c=3, o=8, size=16)
    stages, _ = packed_stages(model, model.input_shape, {0: "rotations"}, ActivationStage)
    conv, _, fc = stages
    assert len(conv.distinct_offsets) <= (3 + 8) * 9  # about (C_in + C_out) * kh * kw, not n_in + n_out
    assert fc.presum == (1, 16)  # the 2x2 average pool: two rotations, no level
    dense, _ = packed_stages(model, model.input_shape, {0: "dense"}, ActivationStage)
    assert len(dense[0].distinct_offsets) <= len(conv.distinct_offsets) or dense[0].presum == ()


class RecordingEvaluator:
    """Wraps an evaluator; notes the steps of every rotation it performs."""

    def __init__(self, inner):
        self.inner, self.steps = inner, set()

    def rotate(self, ct, step):
        self.steps.add(int(step))
        return self.inner.rotate(ct, step)

    def rotate_hoisted(self, ct, steps):
        self.steps.update(int(s) for s in steps)
        return self.inner.rotate_hoisted(ct, steps)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def served():
    model = cnn(2)
    client = Client(model=model, seed=3)
    return model, client, Server(model, client.public_context())


def test_the_server_executes_exactly_the_printed_rotations_and_matches_the_model(served):
    model, client, server = served
    plan = client.plan
    text = plan.explain()
    for stage in plan.stages:
        if stage.kind == "affine":
            assert f"rotation steps {[k for k in stage.rotations if k]}" in text
    assert "runs rotations" in text or "runs dense" in text
    engine = EncryptedModel(model, plan, server.context)
    recorder = RecordingEvaluator(engine._evaluator)
    engine._evaluator = recorder
    x = np.random.default_rng(4).uniform(-1, 1, (plan.batch, *model.input_shape))
    request = client.encrypt(x)
    from crypto.rlwe import Ciphertext
    from tensor_ops.inference import unpack_message
    _, blobs = unpack_message(request, "request")
    engine.forward(Ciphertext.from_bytes(blobs[0], server.context))
    assert recorder.steps - {0} == set(plan.rotations)
    y = client.decrypt(server.evaluate(request))
    want = model.forward(x)
    assert np.abs(y - want).max() <= 1e-3 * np.abs(want).max()


def test_a_tight_key_budget_makes_fewer_keys_and_the_same_results():
    model = cnn(5, c=2, o=4, size=8)
    roomy = model.plan(params="TOY")
    per_key = roomy.galois_key_bytes // len(roomy.rotations)
    budget = per_key * (len(roomy.rotations) // 2)
    tight = model.plan(params="TOY", key_budget=budget)
    assert tight.galois_key_bytes <= budget < roomy.galois_key_bytes
    assert f"of a key budget of {budget / 2**30:.3g} GiB" in tight.explain()
    client = Client(plan=tight, seed=1, allow_insecure=True)
    x = np.random.default_rng(6).uniform(-1, 1, (2, *model.input_shape))
    y = client.decrypt(Server(model, client.public_context()).evaluate(client.encrypt(x)))
    want = model.forward(x)
    assert np.abs(y - want).max() <= 1e-3 * np.abs(want).max()
    with pytest.raises(ParameterError, match=f"key_budget={per_key} bytes is too small for any plan"):
        model.plan(params="TOY", key_budget=per_key)
