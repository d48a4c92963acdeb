"""Bootstrapping from every command: ``plan``, ``keygen``, ``infer`` and ``serve`` take ``--params`` (a preset or a
parameters file) and ``--bootstrap`` / ``--no-bootstrap``; without them a model deeper than the deepest secure
preset's levels gets the bootstrappable preset N16_BOOT with bootstraps placed (``model_plan.auto_parameters``);
the plan prints where each bootstrap sits and its precision (worst case and random slots).

The end-to-end runs use the INSECURE toy ring of tests/tensor_ops/test_model_bootstrap.py (N = 2^12, sparse secret,
20 levels) through ``--params toy.json --insecure``: the automatic N16_BOOT path is checked by planning only."""
import dataclasses
import json
import re

import numpy as np
import pytest

from crypto.ckks.bootstrap import BootstrapConfig
from crypto.errors import ParameterError
from crypto.params import CKKSParameters
from tensor_ops import cli, serve
from tensor_ops.model_plan import BOOTSTRAP_PRESET, auto_parameters, deepest_secure_preset

from .test_model_bootstrap import BOOT_TOY, CONFIG, deep_model

_SITE = re.compile(r"bootstrap -> level (\d+) \((\d+) of (\d+), before stage (\d+)[^)]*\)?, from level (\d+)\): "
                   r"precision about ([\d.]+) bits worst case \(\|x\| <= 1\), ([\d.]+) bits on random slots")


@pytest.fixture
def files(tmp_path):
    """A 10-layer (depth 21) polynomial model, the toy ring with its bootstrap config, and two inputs."""
    model = deep_model()
    model.save(tmp_path / "deep.npz")
    (tmp_path / "toy.json").write_text(json.dumps(dict(BOOT_TOY, bootstrap=dataclasses.asdict(CONFIG))))
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-0.5, 0.5, (2, 4)))
    return tmp_path, model


def test_automatic_choice_bootstraps_only_past_the_deepest_secure_preset():
    """depth <= N16's 29 levels: the smallest secure ring (None); deeper, or bootstrapping asked for: N16_BOOT;
    --no-bootstrap: never."""
    name, levels = deepest_secure_preset()
    assert (name, levels) == ("N16", 29)
    assert auto_parameters(levels) is None and auto_parameters(0) is None
    assert auto_parameters(levels + 1) == CKKSParameters.preset(BOOTSTRAP_PRESET)
    assert auto_parameters(3, True) == auto_parameters(3, BootstrapConfig()) == auto_parameters(levels + 1)
    assert auto_parameters(80, False) is None
    with pytest.raises(ParameterError, match="depth"):
        auto_parameters(-1)


def test_params_option_reads_presets_literals_records_and_refuses_the_rest(files, tmp_path):
    def keywords(*argv):
        return serve.plan_keywords(cli.parser("plan").parse_args(["plan", "--model", "m", *argv]))

    assert keywords() == {"params": None, "bootstrap": None}
    assert keywords("--params", "n14")["params"] == CKKSParameters.preset("N14")
    toy = keywords("--params", str(tmp_path / "toy.json"))
    assert toy["params"] == CKKSParameters.from_literal(BOOT_TOY) and toy["bootstrap"] == CONFIG
    assert keywords("--params", str(tmp_path / "toy.json"), "--no-bootstrap")["bootstrap"] is False
    assert keywords("--params", "TOY", "--bootstrap") == {"params": CKKSParameters.preset("TOY"), "bootstrap": True}
    (tmp_path / "record.bin").write_bytes(CKKSParameters.preset("N13").to_bytes())
    assert keywords("--params", str(tmp_path / "record.bin"))["params"] == CKKSParameters.preset("N13")
    (tmp_path / "explicit.json").write_text(json.dumps(CKKSParameters.preset("N13").to_dict()))
    assert keywords("--params", str(tmp_path / "explicit.json"))["params"] == CKKSParameters.preset("N13")
    for bad, why in (("N99", "neither a preset"), (str(tmp_path / "x.npy"), "parameters record"),
                     (str(tmp_path / "bad.json"), "not a JSON object")):
        (tmp_path / "bad.json").write_text("[1, 2]")
        with pytest.raises(ParameterError, match=rf"--params .*{why}"):
            keywords("--params", bad)


def test_plan_prints_each_bootstrap_site_and_its_precision(files, capsys):
    tmp_path, model = files
    assert cli.main(["plan", "--model", tmp_path / "deep.npz", "--params", tmp_path / "toy.json"]) == 0
    text = capsys.readouterr().out
    plan = model.plan(params=CKKSParameters.from_literal(BOOT_TOY), bootstrap=CONFIG)
    sites = [tuple(float(v) for v in m.groups()) for m in _SITE.finditer(text)]
    assert len(sites) == len(plan.bootstraps) >= 1
    boot = plan.bootstrap_plan
    for (level_out, number, total, stage, level_in, worst, random), site in zip(sites, plan.bootstrap_sites()):
        assert total == len(plan.bootstraps) and stage == site["before_stage"] and level_out == boot.levels_left
        assert level_in == site["level_in"] < plan.stages[int(stage)].depth      # bootstrapped where levels ran out
        assert worst == pytest.approx(boot.precision_bits, abs=0.05)
        assert random == pytest.approx(boot.noise_bits, abs=0.05)


def test_no_bootstrap_refuses_a_model_deeper_than_the_parameters(files, capsys):
    tmp_path, _ = files
    assert cli.main(["plan", "--model", tmp_path / "deep.npz", "--params", tmp_path / "toy.json",
                     "--no-bootstrap"]) == 2
    assert re.search(r"depth=\d+ levels .*max_level=20 \(bootstrap=False\)", capsys.readouterr().err)


def test_named_insecure_parameters_need_insecure_before_any_key(files, capsys):
    tmp_path, _ = files
    for argv in (["keygen", "--client", tmp_path / "c.key", "--context", tmp_path / "c.ctx"],
                 ["infer", "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy"]):
        assert cli.main(argv + ["--model", tmp_path / "deep.npz", "--params", tmp_path / "toy.json"]) == 2
        assert "not 128-bit secure" in capsys.readouterr().err
    assert not (tmp_path / "c.key").exists() and not (tmp_path / "y.npy").exists()


def test_serve_options_and_app_plan_follow_params_and_bootstrap(files):
    tmp_path, model = files
    args = serve.build_parser().parse_args(["--model", "m", "--params", str(tmp_path / "toy.json")])
    choice = serve.plan_keywords(args)
    assert choice["bootstrap"] == CONFIG
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    plan = TestClient(serve.create_app(model, **choice)).get("/plan").json()
    assert plan["plan"]["bootstraps"] == list(model.plan(**choice).bootstraps) and "(1 of 1, before stage" in plan["explain"]


def test_deep_model_plans_with_n16_boot_automatically(tmp_path, capsys):
    """Depth 32 > 29: ``plan`` with no option takes N16_BOOT and places bootstraps (planning only: no keys)."""
    deep_model(layers=16).save(tmp_path / "deeper.npz")
    # an explicit budget: the default is a share of the memory available now, which other processes decide
    assert cli.main(["plan", "--model", tmp_path / "deeper.npz", "--memory-budget", "64GiB"]) == 0
    text = capsys.readouterr().out
    assert "N=2^16, levels=23" in text and len(_SITE.findall(text)) >= 1


@pytest.mark.slow
def test_local_infer_bootstraps_end_to_end_on_named_parameters(files, capsys):
    """infer (keys, encryption, server evaluation with a bootstrap, decryption) on --params toy.json --insecure
    matches numpy."""
    tmp_path, model = files
    assert cli.main(["infer", "--model", tmp_path / "deep.npz", "--params", tmp_path / "toy.json", "--insecure",
                     "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy"]) == 0
    assert "(1 of 1, before stage" in capsys.readouterr().out
    x = np.load(tmp_path / "x.npy")
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model.forward(x), atol=1e-3)
