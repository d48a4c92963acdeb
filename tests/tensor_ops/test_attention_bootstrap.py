"""Bootstraps on the attention path (``tensor_ops.attention_plan``): ``BootstrappingBackend`` refreshes a tensor
(all its ciphertexts) before an operation that needs more levels than it has, ``BootstrapRecorder`` records where
and how many, ``plan_attention`` states them (N16_BOOT at 128 bits; named parameters; --bootstrap /
--no-bootstrap) and ``run_attention`` runs them.

Encrypted runs use the INSECURE N = 2^12 bootstrappable toy ring of tests/tensor_ops/test_model_bootstrap.py (sparse
secret, 20 levels, 6 left after a bootstrap): no 128-bit preset bootstraps below N = 2^16."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk.model
from crypto.ckks.bootstrap import BootstrapConfig
from crypto.errors import LevelError, ParameterError
from tensor_ops.attention_plan import (AttentionPlan, BootstrapRecorder, BootstrapSite, plan_attention,
                                       run_attention)
from tensor_ops.bootstrap_placement import naive_bootstraps
from tensor_ops.tensor import einsum, encrypt

BOOT_TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
                hamming_weight=32, insecure=True)
#: 14 levels a bootstrap, 6 left at 20 levels
CONFIG = BootstrapConfig(cts_levels=2, stc_levels=2, arcsin=False)
#: the level the toy inputs are encrypted at: a budget below the model's depth (19), so that it bootstraps
INPUT_LEVEL = 14


def _graph():
    """softmax(x x^T) over 4 x 4 samples: depth 19 with its calibrated softmax (at the default tolerance)."""
    return hezk.model.Graph("x", (4, 4), (
        hezk.model.Bilinear("scores", "MatMul", ("x", "x"), "s", "bij,bkj->bik"),
        hezk.model.Softmax("weights", "Softmax", ("s",), "y", 1)), "y")


def _calibration():
    return 0.5 * np.random.default_rng(4).normal(size=(32, 4, 4))


def _toy():
    from crypto import CKKSParameters

    return CKKSParameters.from_literal(BOOT_TOY)


@settings(max_examples=40, deadline=None)
@given(input_level=st.integers(0, 12), levels_left=st.integers(1, 8), squarings=st.integers(0, 30))
def test_recorder_bootstraps_a_chain_as_the_greedy_placement(input_level, levels_left, squarings):
    """x -> x*x repeated (one level each): the recorder bootstraps exactly where the greedy placement of
    ``bootstrap_placement`` (its naive twin) does, every site below the level the product needed, values kept."""
    recorder = BootstrapRecorder(64, input_level, levels_left)
    x = encrypt(recorder, np.linspace(-0.9, 0.9, 8))
    for _ in range(squarings):
        x = x * x
    assert len(recorder.sites) == recorder.bootstraps == naive_bootstraps([1] * squarings, levels_left, input_level)
    assert all(site.level_in < 1 and site.ciphertexts == 1 for site in recorder.sites)
    assert np.allclose(x.decrypt(), np.linspace(-0.9, 0.9, 8) ** (2 ** squarings))


def test_recorder_refreshes_a_value_once_and_refuses_an_operation_deeper_than_a_bootstrap_leaves():
    """A value used by several products is bootstrapped once (the refreshed ciphertexts are remembered); one
    operation consuming more levels than a bootstrap leaves is refused naming both."""
    recorder = BootstrapRecorder(64, 0, 3)
    s, y = encrypt(recorder, np.full(4, 0.5)), encrypt(recorder, np.full(4, 0.9))
    for _ in range(3):
        y = y * s                        # s at level 0 every time: one bootstrap of s, and y's own
    assert recorder.bootstraps == 2 and {site.level_in for site in recorder.sites} == {0}
    deep = BootstrapRecorder(64, 0, 1)
    x = encrypt(deep, np.ones(4))
    with pytest.raises(LevelError, match=r"i,i,i->i consumes 2 levels in one plan, more than the 1 a bootstrap"):
        einsum("i,i,i->i", x, x, x)


def test_too_deep_with_no_bootstrap_is_refused_naming_the_depth():
    """bootstrap=False (--no-bootstrap) and named parameters with fewer levels than the depth: ParameterError naming
    the depth, the levels and the flag; an input level with bootstrap=False is refused too."""
    with pytest.raises(ParameterError, match=r"consumes (19|2\d) levels .* hold 20: --no-bootstrap"):
        plan_attention(_graph(), _calibration(), params=_toy(), bootstrap=False, allow_insecure=True)
    with pytest.raises(ParameterError, match="input_level .* bootstrap=False forbids"):
        plan_attention(_graph(), _calibration(), params=_toy(), bootstrap=False, allow_insecure=True, input_level=3)


def test_plan_fields_of_bootstraps_are_checked():
    """Bootstrap sites without a config, sites that are not BootstrapSite records, and negative counts are refused
    (ParameterError naming the field)."""
    plan, _ = plan_attention(_graph(), _calibration())      # shallow at 128 bits: no bootstraps
    assert plan.bootstrap is None and plan.bootstraps == () and plan.bootstrap_count == 0
    site = BootstrapSite("weights", "scores", 1, 0)
    with pytest.raises(ParameterError, match="need a bootstrap config"):
        dataclasses.replace(plan, bootstraps=(site,))
    with pytest.raises(ParameterError, match="must be a tuple of BootstrapSite"):
        dataclasses.replace(plan, bootstrap=BootstrapConfig(), bootstraps=((1, 2),), input_level=0)
    with pytest.raises(ParameterError, match="ciphertexts=0 must be an integer >= 1"):
        BootstrapSite("weights", None, 0, 0)


@pytest.fixture(scope="module")
def toy_plan():
    graph, calibration = _graph(), _calibration()
    plan, model = plan_attention(graph, calibration, params=_toy(), bootstrap=CONFIG, allow_insecure=True,
                                 input_level=INPUT_LEVEL)
    return plan, model


@pytest.mark.slow
def test_toy_plan_states_where_and_how_many(toy_plan):
    """The plan places the bootstraps recorded on a calibration sample (by node, level, ciphertexts), states their
    precision, keys (the bootstrap's rotations, the conjugation key) and a time estimate."""
    plan, _ = toy_plan
    boot = plan.bootstrap_plan
    assert plan.bootstrap == CONFIG and plan.input_level == INPUT_LEVEL and plan.bootstrap_count >= 1
    assert plan.depth > INPUT_LEVEL and all(site.node == "weights" and site.level_in < boot.levels_left
                                            for site in plan.bootstraps)
    assert set(boot.rotation_steps) <= set(plan.key_rotations) and set(plan.rotations) <= set(plan.key_rotations)
    assert plan.galois_key_bytes > 0 and plan.estimated_seconds > plan.bootstrap_count * plan.bootstrap_seconds > 0
    text = plan.explain()
    assert f"{plan.bootstrap_count} ciphertext bootstraps" in text and f"{boot.precision_bits:.1f} bits worst" in text
    assert f"{boot.noise_bits:.1f} bits on random slots" in text and "in weights (after scores)" in text


@pytest.mark.slow
def test_toy_bootstrapping_plan_runs_encrypted_within_the_stated_error(toy_plan):
    """Keys with the bootstrap's, inputs at the low level budget, the model evaluated with the planned bootstraps
    (the run's count equals the plan's): the output within 1e-4 of the plain approximated model and within the
    plan's stated model error (+1e-4) of the exact softmax."""
    plan, model = toy_plan
    rng = np.random.default_rng(5)
    low, high = _calibration().min(), _calibration().max()
    x = np.clip(0.5 * rng.normal(size=(4, 4)), low, high)
    lines = []
    y = run_attention(plan, model, x, seed=1, report=lines.append)
    ran = [line for line in lines if "ciphertext bootstraps" in line][0]
    assert f"with {plan.bootstrap_count} ciphertext bootstraps" in ran and f"(recorded: {plan.bootstrap_count})" in ran
    assert np.max(np.abs(y - model.forward(x[None])[0])) < 1e-4
    assert np.max(np.abs(y - _graph().forward(x[None])[0])) < plan.model_error + 1e-4


@pytest.mark.slow
def test_a_tampered_bootstrap_plan_is_refused_before_any_key(toy_plan):
    """A plan whose bootstrap sites were changed (one dropped, a count altered) is refused by run_attention before
    keys are made; a site from a level a bootstrap would not refresh, and a config of other slots, are refused by
    the plan itself."""
    plan, model = toy_plan
    x = np.clip(0.5 * np.random.default_rng(6).normal(size=(4, 4)), -1.0, 1.0)
    fewer = dataclasses.replace(plan, bootstraps=plan.bootstraps[:-1])
    more = dataclasses.replace(plan, bootstraps=(dataclasses.replace(plan.bootstraps[0], ciphertexts=2),)
                               + plan.bootstraps[1:])
    for tampered in (fewer, more):
        with pytest.raises(ParameterError, match="the plan was altered or made for another model"):
            run_attention(tampered, model, x, seed=1)
    high = dataclasses.replace(plan.bootstraps[0], level_in=plan.bootstrap_plan.levels_left)
    with pytest.raises(ParameterError, match="not below the 6 levels a bootstrap leaves"):
        dataclasses.replace(plan, bootstraps=(high,))
    with pytest.raises(ParameterError, match="bootstrap slots=64 must be the parameters' slots"):
        dataclasses.replace(plan, bootstrap=BootstrapConfig(slots=64, cts_levels=2, stc_levels=2, arcsin=False))
    assert isinstance(plan, AttentionPlan)


@pytest.mark.slow
def test_exported_encoder_layer_plans_bootstraps_at_128_bits_without_keys(tmp_path, capsys):
    """``hezk plan`` on the exported 16 x 32 encoder layer (2 heads) at 128 bits: N16_BOOT with bootstraps stated
    (count, sites, keys, estimated time), in seconds (no key is made); --no-bootstrap refuses naming the depth."""
    import time

    import onnx

    from tensor_ops import cli

    from ..model.test_transformer_reader import D_MODEL, SEQUENCE, encoder, export

    onnx.save(export(encoder(1, "gelu"), dynamo=True), tmp_path / "layer.onnx")
    np.save(tmp_path / "cal.npy", np.random.default_rng(0).normal(size=(16, 1, SEQUENCE, D_MODEL)))
    command = ["plan", "--model", str(tmp_path / "layer.onnx"), "--calibration", str(tmp_path / "cal.npy")]
    start = time.process_time()
    assert cli.main(command) == 0
    assert time.process_time() - start < 60
    out = capsys.readouterr().out
    depth = int(out.split("depth: ")[1].split(" levels")[0])
    count = int(out.split("bootstraps: ")[1].split(" ciphertext bootstraps")[0])
    assert depth > 23 and count >= (depth - 23) // 6 and "N=2^16, 23 levels" in out and "security 128-bit" in out
    assert "estimated time:" in out and "MiB (" in out and "the conjugation key" in out
    assert cli.main(command + ["--no-bootstrap"]) == 2
    assert f"consumes {depth} levels" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_infers_a_tiny_encoder_layer_with_bootstraps_within_two_percent(tmp_path, capsys):
    """``hezk infer`` on an exported tiny encoder layer (d_model 8, 2 heads, sequence 4; deeper than the toy ring's
    20 levels) with --params naming the INSECURE bootstrappable toy ring and its bootstrap config (--insecure, tests
    only): the plan states its bootstraps, the run takes as many, and the output is within 2% of onnxruntime's
    largest output magnitude; --no-bootstrap refuses naming the depth (about a minute: keys, then CKKS)."""
    import json

    import onnx

    from tensor_ops import cli

    from ..model.exported_models import onnxruntime_outputs
    from ..model.test_transformer_reader import encoder, export

    model = export(encoder(1, "gelu", d_model=8, heads=2, feedforward=16), dynamo=False, sequence=4, d_model=8)
    onnx.save(model, tmp_path / "layer.onnx")
    rng = np.random.default_rng(0)
    calibration = rng.normal(size=(64, 1, 4, 8))
    np.save(tmp_path / "cal.npy", calibration)
    np.save(tmp_path / "x.npy", calibration[1])
    ring = dict(BOOT_TOY, bootstrap={f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)})
    (tmp_path / "ring.json").write_text(json.dumps(ring))
    command = ["infer", "--model", str(tmp_path / "layer.onnx"), "--calibration", str(tmp_path / "cal.npy"),
               "--input", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy"), "--params",
               str(tmp_path / "ring.json"), "--insecure"]
    assert cli.main(command) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    planned = int(out.split("bootstraps: ")[1].split(" ciphertext bootstraps")[0])
    assert planned >= 1 and f"with {planned} ciphertext bootstraps" in out and f"(recorded: {planned})" in out
    expected = onnxruntime_outputs(model, calibration[1])[0]
    got = np.load(tmp_path / "y.npy").reshape(expected.shape)
    assert np.max(np.abs(got - expected)) <= 0.02 * np.max(np.abs(expected))
    assert cli.main(command + ["--no-bootstrap"]) == 2
    assert "--no-bootstrap" in capsys.readouterr().err


def test_named_parameters_whose_bootstrap_keeps_too_few_bits_are_refused_naming_the_levels():
    """A ring a few levels short of the depth whose scale is too small for a bootstrap (2^30: a bootstrap there
    keeps no bits) is refused at planning, naming the depth, the levels to ask for and the
    bootstrapping preset, instead of placing bootstraps whose outputs are noise."""
    from crypto import CKKSParameters

    shallow = dict(BOOT_TOY, log_q=[[30, 30]] + [[30]] * 17, log_scale=30)   # a bootstrap keeps no bits
    with pytest.raises(ParameterError, match=r"consumes \d+ levels .* at least \d+ levels.*keeps -?\d+\.\d bits.*"
                                             r"N16_BOOT"):
        plan_attention(_graph(), _calibration(), params=CKKSParameters.from_literal(shallow), allow_insecure=True)
