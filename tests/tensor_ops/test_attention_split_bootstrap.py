"""The client/server split of an attention plan that bootstraps (``tensor_ops.attention_split``): the client's keys
carry the bootstrap's rotation keys, the conjugation key and its config; the server, holding the public context
only, bootstraps where the plan states; a context keyed without them is refused naming the bootstrap. On the
INSECURE N = 2^12 bootstrappable toy ring of test_attention_bootstrap.py (tests only)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from crypto import CKKSParameters
from crypto.context import CKKSContext
from crypto.errors import KeyMissingError
from tensor_ops.attention_plan import plan_attention
from tensor_ops.attention_split import AttentionClient, AttentionServer, AttentionSpec

from .test_attention_bootstrap import BOOT_TOY, CONFIG, INPUT_LEVEL
from .test_attention_split import softmax_graph


@pytest.mark.slow
def test_a_bootstrapping_plan_runs_split_with_the_bootstrap_keys_from_the_public_context():
    graph = softmax_graph()
    calibration = 0.5 * np.random.default_rng(4).normal(size=(32, 4, 4))
    plan, model = plan_attention(graph, calibration, params=CKKSParameters.from_literal(BOOT_TOY), bootstrap=CONFIG,
                                 allow_insecure=True, input_level=INPUT_LEVEL)
    assert plan.bootstrap_count >= 1
    spec = AttentionSpec.of(plan, graph)
    assert spec.bootstrap == CONFIG and spec.input_level == INPUT_LEVEL
    assert AttentionSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec    # plan --out, keygen --plan
    client = AttentionClient(spec, allow_insecure=True, seed=1)
    public = CKKSContext.from_bytes(client.public_context())
    assert not public.has_secret_key and public.bootstrap_config == CONFIG and public.has_conjugation_key
    server = AttentionServer(plan, model, client.public_context())
    x = np.clip(0.5 * np.random.default_rng(5).normal(size=(2, 4, 4)), calibration.min(), calibration.max())
    y = client.decrypt(server.evaluate(client.encrypt(x)))
    assert server.bootstraps == 2 * plan.bootstrap_count and not server.context.has_secret_key
    assert np.max(np.abs(y - model.forward(x))) < 1e-4
    assert np.max(np.abs(y - graph.forward(x))) < plan.model_error + 1e-4

    plain = AttentionClient(dataclasses.replace(spec, bootstrap=None), allow_insecure=True, seed=2)
    with pytest.raises(KeyMissingError, match="the plan bootstraps .* no bootstrap keys"):
        AttentionServer(plan, model, plain.public_context())
