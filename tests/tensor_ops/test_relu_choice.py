"""ReLU at depth (issue 32, item 4): each ReLU on its calibrated interval is one fitted polynomial (3 levels) or
relu(x) = (x + x sign x) / 2 with a composite minimax sign (Lee et al. 2021, 10 levels), chosen per activation
(``Sequential.choose_relus``): the composite where the fit errs by more than ``RELU_TOLERANCE`` of the interval's
scale and the plan's levels allow. The plan states both options' errors. The encrypted test runs on an INSECURE
test ring (N = 2^11, 16 levels), for speed."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from tensor_ops.activations import (RELU_TOLERANCE, composite_relu, error_on_interval, fit_activation, relu_choice,
                                    relu_options)
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import Conv2d, Flatten, Linear, Poly, Residual, Sequential
from tests.tensor_ops.test_export_operators_encrypted import TEST_RING

WIDE, NARROW = (-4.0, 4.0), (-0.05, 4.0)     # zero in the middle; zero at 1/80 of the interval (nearly linear)


def cnn(interval, seed=0):
    rng = np.random.default_rng(seed)
    return Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3)) * 0.5, np.zeros(2), padding=1),
                       Poly("relu", 7, interval), Flatten(),
                       Linear(rng.normal(size=(3, 2 * 4 * 4)) * 0.3, np.zeros(3))], input_shape=(1, 4, 4))


@settings(max_examples=12, deadline=None)
@given(low=st.floats(-50.0, -1e-3), high=st.floats(1e-3, 50.0),
       u=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=64))
def test_composite_relu_is_within_its_stated_error_on_the_calibrated_interval(low, high, u):
    composite = composite_relu((low, high))
    stated = error_on_interval(composite, low, high)
    x = low + np.asarray(u) * (high - low)
    assert np.all(np.abs(composite(x) - np.maximum(x, 0.0)) <= stated)
    assert stated <= 2.0 ** -8 * max(-low, high)           # the sign's 2^-9 of the scale, and the gap's share
    fit, _, fit_error, _ = relu_options((low, high))
    assert np.all(np.abs(fit(x) - np.maximum(x, 0.0)) <= fit_error)


def test_the_choice_by_error_takes_the_composite_where_the_fit_errs_beyond_the_tolerance():
    wide, narrow = relu_choice(WIDE), relu_choice(NARROW)
    assert wide.chose == "composite" and wide.fit_error > RELU_TOLERANCE * 4 > wide.composite_error
    assert narrow.chose == "fit" and narrow.fit_error <= RELU_TOLERANCE * 4
    assert (wide.fit_depth, wide.composite_depth) == (3, 10)
    assert relu_choice(WIDE, tolerance=0.05).chose == "fit"           # a looser tolerance keeps the fit
    for text in ("fit 0.092", "composite sign 0.0082", "composite ("):
        assert text in wide.describe()
    # a fit of the layer's own (lower) degree is the one weighed
    cubic = fit_activation("relu", 3, NARROW)
    own = relu_choice(NARROW, fit=cubic)
    assert own.fit_error == error_on_interval(cubic, *NARROW) > relu_choice(NARROW).fit_error
    assert own.fit_depth == cubic.depth == 2
    with pytest.raises(ParameterError, match="tolerance="):
        relu_choice(WIDE, tolerance=0)


def test_the_planner_picks_the_composite_on_a_wide_interval_and_the_fit_on_a_narrow_one():
    wide = cnn(WIDE).choose_relus(params=TEST_RING)
    narrow = cnn(NARROW).choose_relus(params=TEST_RING)
    assert [c.chose for c in wide.relu_choices.values()] == ["composite"]
    assert [c.chose for c in narrow.relu_choices.values()] == ["fit"]
    assert wide.layers[1].depth == 10 and narrow.layers[1].depth == 3
    plan = wide.plan(params=TEST_RING)
    assert plan.depth == 12
    (fit,) = plan.activation_fits
    assert "fit 0.092" in fit.choice and "composite sign 0.0082" in fit.choice and "composite (" in fit.choice
    assert fit.choice in plan.explain()
    assert ModelPlan.from_dict(plan.to_dict()).activation_fits == plan.activation_fits
    assert wide.activation_fit() != cnn(WIDE).activation_fit()     # requests carry which polynomials ran


def test_the_planner_keeps_the_fit_where_the_levels_do_not_allow_and_either_can_be_forced():
    model = cnn(WIDE)
    kept = model.choose_relus(params="N14", bootstrap=False)           # 6 levels: no room for 10
    (choice,) = kept.relu_choices.values()
    assert choice.chose == "fit" and "levels exceed the 6" in choice.why
    assert kept.layers[1].poly is model.layers[1].poly
    forced = model.choose_relus(params=TEST_RING, relu="composite")
    assert forced.layers[1].depth == 10 and "relu='composite'" in forced.relu_choices[forced.layers[1]].why
    fit = model.choose_relus(params=TEST_RING, relu="fit")
    assert fit.layers[1].poly is model.layers[1].poly and fit.plan(params=TEST_RING).depth == 5
    assert "the fit's error exceeds" not in fit.plan(params=TEST_RING).activation_fits[0].choice
    with pytest.raises(ParameterError, match="relu="):
        model.choose_relus(relu="sign")


def test_relus_inside_residual_branches_are_weighed_too():
    rng = np.random.default_rng(1)
    block = Residual((Linear(rng.normal(size=(4, 4)), np.zeros(4)), Poly("relu", 7, WIDE),
                      Linear(rng.normal(size=(4, 4)), np.zeros(4))), ())
    model = Sequential([Linear(rng.normal(size=(4, 4)), np.zeros(4)), block, Poly("relu", 7, NARROW)],
                       input_shape=(4,))
    chosen = model.choose_relus(params=TEST_RING)
    assert sorted(c.chose for c in chosen.relu_choices.values()) == ["composite", "fit"]
    assert chosen.layers[1].layers[1].depth == 10 and chosen.layers[2].depth == 3


@pytest.mark.slow
def test_encrypted_small_cnn_with_the_composite_relu_agrees_with_the_plain_reference():
    """(5 s) Encrypted = the chosen model's plain reference (the same polynomials), and the exact ReLU network within
    the stated error times the last layer's row sums."""
    from tensor_ops.inference import Client, Server

    model = cnn(WIDE).choose_relus(params=TEST_RING)
    x = np.random.default_rng(2).uniform(-0.5, 0.5, (3, 1, 4, 4))
    conv, _, _, linear = model.layers
    hidden = conv.forward(x)
    assert np.abs(hidden).max() < 4.0                                 # inside the calibrated interval
    exact = linear.forward(np.maximum(hidden, 0.0).reshape(3, -1))
    plan = model.plan(params=TEST_RING)
    client = Client(plan=plan, seed=0, allow_insecure=True)
    y = client.decrypt(Server(model, client.public_context()).evaluate(client.encrypt(x)))
    np.testing.assert_allclose(y, model.forward(x), atol=1e-4)
    stated = model.relu_choices[model.layers[1]].composite_error
    assert np.all(np.abs(y - exact) <= stated * np.abs(linear.weight).sum(axis=1) + 1e-4)


def test_the_command_line_takes_relu_fit_composite_or_auto(tmp_path, capsys):
    import json

    from tensor_ops import cli

    cnn(WIDE).save(tmp_path / "cnn.npz")
    (tmp_path / "ring.json").write_text(json.dumps(TEST_RING))
    model = ["--model", tmp_path / "cnn.npz", "--params", tmp_path / "ring.json"]
    assert cli.main(["plan", *model, "--relu", "composite", "--out", tmp_path / "plan.json"]) == 0
    assert "relu: 1 of 1 ReLUs take the composite sign (--relu composite)" in capsys.readouterr().out
    assert json.loads((tmp_path / "plan.json").read_text())["activation_fits"][0]["degree"] > 7
    assert cli.main(["plan", *model, "--out", tmp_path / "fit.json"]) == 0           # default: the fit
    out = capsys.readouterr().out
    assert "relu:" not in out and "composite sign 0.0082" in out                # both errors stated anyway
    assert json.loads((tmp_path / "fit.json").read_text())["activation_fits"][0]["degree"] <= 7
    assert cli.main(["plan", "--model", tmp_path / "cnn.npz", "--params", "N14", "--no-bootstrap",
                     "--relu", "auto"]) == 0
    assert "relu: 0 of 1 ReLUs take the composite sign" in capsys.readouterr().out   # no levels for it
    assert cli.main(["plan", *model, "--relu", "sign"]) == 2
    assert "relu='sign' must be one of" in capsys.readouterr().err


def test_serve_takes_the_same_relu_choice_as_keygen(tmp_path, monkeypatch):
    import argparse

    from crypto.errors import HEError
    from tensor_ops import serve

    cnn(WIDE).save(tmp_path / "cnn.npz")
    (tmp_path / "ring.json").write_text(__import__("json").dumps(TEST_RING))
    served = []

    def app(model, **_):              # stands in for the HTTP app: records the model and stops before serving
        served.append(model)
        raise HEError("stopped before serving")

    monkeypatch.setattr(serve, "create_app", app)
    parser = serve.add_arguments(argparse.ArgumentParser())
    for relu, depth in (("composite", 10), ("fit", 3)):
        args = parser.parse_args(["--model", str(tmp_path / "cnn.npz"), "--params", str(tmp_path / "ring.json"),
                                  "--memory-budget", "64GiB", "--relu", relu])
        assert serve.run(args) == 2 and served[-1].layers[1].depth == depth
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "m.npz", "--relu", "sign"])


@pytest.mark.slow
def test_bootstrapping_plans_take_the_composite_where_a_bootstrap_leaves_room_for_it():
    """(10 s: two bootstrap plans) INSECURE toy rings (N = 2^12, sparse secret) bootstrapping at 14 levels: with
    30 levels a bootstrap leaves 16, room for the composite's 10 and an affine stage (more bootstraps are placed);
    with 20 it leaves 6, and every ReLU keeps its fit, said so."""
    from crypto import CKKSParameters
    from crypto.ckks.bootstrap import BootstrapConfig

    config = BootstrapConfig(cts_levels=2, stc_levels=2, arcsin=False)
    rng = np.random.default_rng(0)
    stack = []
    for _ in range(8):
        q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
        stack += [Linear(q, np.zeros(4)), Poly("relu", 7, (-2.0, 2.0))]
    model = Sequential(stack, input_shape=(4,))
    for levels, dnum, chose in ((30, 12, "composite"), (20, 7, "fit")):
        params = CKKSParameters.from_literal(dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * levels, log_p=[30] * 6,
                                                  log_scale=50, dnum=dnum, hamming_weight=32, insecure=True))
        base = model.plan(params=params, bootstrap=config)
        assert base.bootstraps and base.bootstrap_plan.levels_left == levels - 14
        chosen = model.choose_relus(params=params, bootstrap=config)
        assert {c.chose for c in chosen.relu_choices.values()} == {chose}
        if chose == "composite":
            plan = chosen.plan(params=params, bootstrap=config)
            assert len(plan.bootstraps) > len(base.bootstraps) and plan.depth == 8 * 11 + 1 == base.depth + 8 * 7
        else:
            assert all("between the plan's bootstraps" in c.why for c in chosen.relu_choices.values())
            forced = model.choose_relus(params=params, bootstrap=config, relu="composite")
            with pytest.raises(ParameterError, match="keep each ReLU's fit"):
                forced.plan(params=params, bootstrap=config)
