"""The encrypted attention path takes a user's batch in any form :func:`hezk.model.input_form` names: a layer
exported on (1, sequence, width), with the batch axis of 1 read into the sample, run on (n, sequence, width) gives
(n, sequence, width) outputs within 2% of onnxruntime's per-sample outputs concatenated (insecure N = 2^11 test
ring, tests only)."""
from __future__ import annotations

import numpy as np
import pytest

from crypto.errors import ShapeError
from crypto.params import CKKSParameters
from tensor_ops.attention_plan import plan_attention, run_attention

from ..model.exported_models import onnxruntime_outputs
from ..model.test_transformer_reader import encoder, export
from .test_transformer_encrypted import TINY, _test_ring


@pytest.mark.slow
def test_a_batch_without_the_files_unit_axis_runs_encrypted():
    from hezk.model import read_onnx

    onnx_model = export(encoder(1, "gelu", d_model=TINY["d_model"], heads=TINY["heads"],
                                feedforward=TINY["feedforward"]), dynamo=False, sequence=TINY["sequence"],
                        d_model=TINY["d_model"])
    graph = read_onnx(onnx_model)
    shape = (TINY["sequence"], TINY["d_model"])
    assert graph.input_shape == (1, *shape)
    rng = np.random.default_rng(0)
    calibration = rng.normal(size=(64, *shape))  # the user's own batch form
    depth = plan_attention(graph, calibration)[0].depth
    params = CKKSParameters.from_literal(_test_ring(depth + 3))
    plan, model = plan_attention(graph, calibration, params=params, allow_insecure=True)
    x = 0.8 * rng.normal(size=(2, *shape))
    got = run_attention(plan, model, x, seed=1)
    expected = np.concatenate([onnxruntime_outputs(onnx_model, xi[None])[0] for xi in x])
    assert got.shape == expected.shape == (2, *shape)
    assert np.max(np.abs(got - expected)) <= 0.02 * np.max(np.abs(expected))
    with pytest.raises(ShapeError, match=r"nor \(batch, \*\(4, 8\)\)"):
        run_attention(plan, model, x[:, :, :-1], seed=1)
