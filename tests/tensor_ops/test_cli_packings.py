"""``hezk plan|keygen|encrypt|infer|decrypt --packing {auto,slots,replicated,samples}`` (issue 31, one path per job):
the two dense-network packings (``tensor_ops.replicated``, ``tensor_ops.sample_packing``) are strategies of the
command line's one path, chosen by one rule (``tensor_ops.dense_packings.choose_packing``), with the common
checks (128-bit refusal, input range, samples refused with exit status 3, secret file mode) shared.

A torch MLP exported to ONNX runs on the insecure TOY ring (``--params TOY --insecure``, N = 2^12, 4 levels:
its ReLU fitted at degree 3 on the calibration inputs); each packing must agree with onnxruntime within the
fit's stated error (``calibration_report``) and with the plain reference of the fitted model to 1e-6."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from tensor_ops import cli, dense_packings
from tensor_ops.cli_args import parser
from tensor_ops.dense_packings import SAMPLE_PACKING_MIN_BATCH, choose_packing, packing_for_batch
from tensor_ops.nn import Conv2d, Flatten, Linear, Sequential, Square

TOY = ["--params", "TOY", "--insecure", "--no-progress"]
FEW = 6  # rows of the encrypted runs (the replicated plan takes ~0.07 s per sample on TOY)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """(folder, model path, calibration path, the fitted model, onnxruntime's outputs on the first FEW calibration
    rows, saved as x.npy)."""
    from tests.model.exported_models import activation_mlp, onnxruntime_outputs
    import onnx

    folder = tmp_path_factory.mktemp("mlp")
    proto = activation_mlp("ReLU", sizes=(6, 8, 3), seed=1)
    onnx.save(proto, folder / "m.onnx")
    x = np.random.default_rng(2).uniform(-1, 1, (SAMPLE_PACKING_MIN_BATCH + 20, 6))
    np.save(folder / "cal.npy", x)
    np.save(folder / "x.npy", x[:FEW])
    model = Sequential.load(folder / "m.onnx", calibration=x, degree=3)
    return folder, str(folder / "m.onnx"), str(folder / "cal.npy"), model, onnxruntime_outputs(proto, x[:FEW])[0]


def _model_args(mlp):
    return ["--model", mlp[1], "--calibration", mlp[2], "--degree", "3"]


# --- the rule --------------------------------------------------------------------------------------------------
def test_auto_chooses_by_batch_size_and_model():
    """Rule: a dense chain takes replicated below SAMPLE_PACKING_MIN_BATCH samples and sample packing from it up;
    any other model, an unknown batch, --bootstrap or --dask take the slot path."""
    rng = np.random.default_rng(0)
    dense = Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(2, 3)))], (4,))
    assert [choose_packing(dense, n).packing for n in (1, SAMPLE_PACKING_MIN_BATCH - 1)] == ["replicated"] * 2
    assert [choose_packing(dense, n).packing for n in (SAMPLE_PACKING_MIN_BATCH, 10_000)] == ["samples"] * 2
    assert packing_for_batch(SAMPLE_PACKING_MIN_BATCH - 1) == "replicated"
    assert choose_packing(dense, None).packing == "slots"
    assert choose_packing(dense, 5, bootstrap=True).packing == "slots"
    assert choose_packing(dense, 500, dask=True).packing == "slots"
    assert choose_packing(dense, 5, slot_options=("--key-budget",)).packing == "slots"
    conv = Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3))), Square(), Flatten(), Linear(rng.normal(size=(2, 72)))],
                      (1, 8, 8))
    choice = choose_packing(conv, 5)
    assert choice.packing == "slots" and "Conv2d" in choice.reason
    assert str(SAMPLE_PACKING_MIN_BATCH) in choose_packing(dense, 500).reason


def test_explicit_packing_the_model_cannot_use_is_refused():
    rng = np.random.default_rng(0)
    conv = Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3))), Square(), Flatten(), Linear(rng.normal(size=(2, 72)))],
                      (1, 8, 8))
    for packing in ("replicated", "samples"):
        with pytest.raises(ParameterError, match=f"--packing {packing}.*Conv2d"):
            choose_packing(conv, 5, packing)
    dense = Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(2, 3)))], (4,))
    with pytest.raises(ParameterError, match="--packing samples.*--bootstrap"):
        choose_packing(dense, 500, "samples", bootstrap=True)
    with pytest.raises(ParameterError, match="--packing"):
        choose_packing(dense, 5, "diagonal")


def test_the_rule_lives_in_one_place():
    """The command line's choices and the FHE-suite entry's cut-off are dense_packings'."""
    from benchmarks.fhe_suite.submission import hezk_entry

    action = next(a for a in parser("infer")._subparsers._group_actions[0].choices["infer"]._actions
                  if a.dest == "packing")
    assert tuple(action.choices) == dense_packings.CHOICES and action.default == "auto"
    assert hezk_entry.SAMPLE_PACKING_MIN_BATCH == SAMPLE_PACKING_MIN_BATCH
    assert hezk_entry.PACKINGS == dense_packings.RECORD_NAMES
    assert [hezk_entry.packing_chosen(size) for size in range(4)] == \
        [packing_for_batch(n) for n in hezk_entry.BATCH_SIZES]


def test_plan_refuses_a_packing_the_model_cannot_use(tmp_path, capsys):
    rng = np.random.default_rng(0)
    Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3))), Square(), Flatten(), Linear(rng.normal(size=(2, 72)))],
               (1, 8, 8)).save(tmp_path / "conv.npz")
    assert cli.main(["plan", "--model", tmp_path / "conv.npz", "--packing", "samples", "--params", "TOY"]) == 2
    err = capsys.readouterr().err
    assert "--packing samples" in err and "Conv2d" in err


# --- local infer -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("packing", ["replicated", "samples", "slots"])
def test_local_infer_with_each_packing_agrees_with_onnxruntime(mlp, packing, tmp_path, capsys):
    folder, _, cal, model, want = mlp
    out, x = tmp_path / "y.npy", folder / "x.npy"
    assert cli.main(["infer", *_model_args(mlp), "--input", x, "--out", out, "--packing", packing, *TOY]) == 0
    assert f"packing: {packing} " in capsys.readouterr().out
    y = np.load(out)
    assert np.abs(y - model.forward(np.load(x))).max() < 1e-6
    assert np.abs(y - want).max() <= model.calibration_report[1] + 1e-6


def test_local_infer_auto_reaches_sample_packing_from_the_cutoff(mlp, tmp_path, capsys):
    """The issue's case: a batch from the cut-off up through plain ``hezk infer`` gets sample packing (before: the
    slot-blocked path, whatever the batch), one row the replicated plan."""
    folder, _, cal, model, _ = mlp
    x = np.load(cal)[:SAMPLE_PACKING_MIN_BATCH]  # inside the calibrated ranges
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x1.npy", x[0])
    assert cli.main(["infer", *_model_args(mlp), "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy",
                     *TOY]) == 0
    assert "packing: samples " in capsys.readouterr().out
    assert np.abs(np.load(tmp_path / "y.npy") - model.forward(x)).max() < 1e-6
    assert cli.main(["infer", *_model_args(mlp), "--input", tmp_path / "x1.npy", "--out", tmp_path / "y1.npy",
                     *TOY]) == 0
    assert "packing: replicated " in capsys.readouterr().out
    y1 = np.load(tmp_path / "y1.npy")
    assert y1.shape == (3,) and np.abs(y1 - model.forward(x[:1])[0]).max() < 1e-6


@pytest.mark.parametrize("packing", ["replicated", "samples"])
def test_local_infer_refuses_insecure_parameters_without_insecure(mlp, packing, tmp_path, capsys):
    assert cli.main(["infer", *_model_args(mlp), "--input", mlp[2], "--out", tmp_path / "y.npy", "--packing",
                     packing, "--params", "TOY", "--no-progress"]) == 2
    assert "128-bit" in capsys.readouterr().err


@pytest.mark.parametrize("packing", ["replicated", "samples"])
def test_local_infer_refuses_samples_outside_the_calibrated_range_with_status_3(mlp, packing, tmp_path, capsys):
    """The common check: samples outside the calibrated range are named, written as NaN rows, exit status 3."""
    x = np.load(mlp[2])[:4].copy()
    x[2] = 50.0
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", *_model_args(mlp), "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy",
                     "--packing", packing, *TOY]) == cli.INVALID_RESULT
    assert "samples [2]" in capsys.readouterr().err
    y = np.load(tmp_path / "y.npy")
    assert np.isnan(y[2]).all() and np.abs(y[[0, 1, 3]] - mlp[3].forward(x[[0, 1, 3]])).max() < 1e-6


# --- the client/server split ---------------------------------------------------------------------------------
def _split(mlp, tmp_path, packing, x_path, extra_keygen=()):
    files = {name: str(tmp_path / name) for name in ("plan.json", "c.key", "p.ctx", "r.bin", "rep.bin", "y.npy")}
    assert cli.main(["plan", *_model_args(mlp), "--params", "TOY", "--packing", packing, "--out",
                     files["plan.json"]]) == 0
    assert cli.main(["keygen", "--plan", files["plan.json"], "--client", files["c.key"], "--context",
                     files["p.ctx"], "--insecure", "--no-progress", *extra_keygen]) == 0
    assert cli.main(["encrypt", "--client", files["c.key"], "--input", x_path, "--out", files["r.bin"]]) == 0
    assert cli.main(["infer", *_model_args(mlp), "--context", files["p.ctx"], "--request", files["r.bin"],
                     "--out", files["rep.bin"], "--no-progress"]) == 0
    assert cli.main(["decrypt", "--client", files["c.key"], "--reply", files["rep.bin"], "--out",
                     files["y.npy"]]) == 0
    return files


@pytest.mark.parametrize("packing", ["replicated", "samples"])
def test_split_commands_carry_the_packing(mlp, packing, tmp_path, capsys):
    files = _split(mlp, tmp_path, packing, str(mlp[0] / "x.npy"))
    record = json.loads(open(files["plan.json"]).read())
    assert record["packing"] == dense_packings.RECORD_NAMES[packing] and "asked for" in record["packing_reason"]
    assert dense_packings.client_file_packing(files["c.key"]) == packing
    assert stat.S_IMODE(os.stat(files["c.key"]).st_mode) == 0o600
    assert np.abs(np.load(files["y.npy"]) - mlp[3].forward(np.load(mlp[0] / "x.npy"))).max() < 1e-6
    out = capsys.readouterr().out
    assert f"({packing})" in out


def test_files_of_one_packing_given_to_another_are_refused(mlp, tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "s").mkdir()
    rep = _split(mlp, tmp_path / "r", "replicated", str(mlp[0] / "x.npy"))
    sam = _split(mlp, tmp_path / "s", "samples", str(mlp[0] / "x.npy"))
    capsys.readouterr()
    assert cli.main(["keygen", "--plan", sam["plan.json"], "--packing", "replicated", "--client",
                     tmp_path / "z.key", "--context", tmp_path / "z.ctx", "--insecure"]) == 2
    assert "--packing replicated" in capsys.readouterr().err
    assert cli.main(["infer", *_model_args(mlp), "--context", rep["p.ctx"], "--request", rep["r.bin"], "--out",
                     tmp_path / "z.bin", "--packing", "samples"]) == 2
    assert "'replicated'" in capsys.readouterr().err
    assert cli.main(["infer", *_model_args(mlp), "--context", sam["p.ctx"], "--request", rep["r.bin"], "--out",
                     tmp_path / "z.bin"]) == 2
    assert "another packing" in capsys.readouterr().err
    assert cli.main(["decrypt", "--client", sam["c.key"], "--reply", rep["rep.bin"], "--out", tmp_path / "z.npy"]) == 2
    err = capsys.readouterr().err
    assert "'replicated'" in err and "'samples'" in err
    assert cli.main(["decrypt", "--client", rep["c.key"], "--reply", rep["rep.bin"], "--out", tmp_path / "z.npy",
                     "--flood"]) == 2
    assert "--flood" in capsys.readouterr().err
    assert not (tmp_path / "z.key").exists()


def test_keygen_refuses_an_insecure_dense_plan_without_insecure(mlp, tmp_path, capsys):
    assert cli.main(["plan", *_model_args(mlp), "--params", "TOY", "--packing", "samples", "--out",
                     tmp_path / "plan.json"]) == 0
    assert cli.main(["keygen", "--plan", tmp_path / "plan.json", "--client", tmp_path / "c.key", "--context",
                     tmp_path / "p.ctx"]) == 2
    assert "128-bit" in capsys.readouterr().err and not (tmp_path / "c.key").exists()


def test_encrypt_refuses_values_outside_the_range_unless_clip(mlp, tmp_path, capsys):
    files = _split(mlp, tmp_path, "replicated", str(mlp[0] / "x.npy"))
    x = np.load(mlp[2])[:2].copy()
    x[1, 0] = 50.0
    np.save(tmp_path / "far.npy", x)
    assert cli.main(["encrypt", "--client", files["c.key"], "--input", tmp_path / "far.npy", "--out",
                     tmp_path / "z.bin"]) == 2
    assert "input range" in capsys.readouterr().err
    assert cli.main(["encrypt", "--client", files["c.key"], "--input", tmp_path / "far.npy", "--out",
                     tmp_path / "z.bin", "--clip"]) == 0


def _wide(tmp_path):
    """(a model whose first layer is wider than a TOY ciphertext's rows, 2 inputs), saved in tmp_path."""
    rng = np.random.default_rng(4)
    model = Sequential([Linear(rng.normal(size=(8, 300)) / 20), Square(), Linear(rng.normal(size=(3, 8)))], (300,))
    model.save(tmp_path / "wide.npz")
    x = rng.uniform(-1, 1, (2, 300))
    np.save(tmp_path / "x.npy", x)
    return model, x


def test_a_folded_replicated_plan_runs_locally(tmp_path):
    """A first layer wider than one ciphertext's rows (300 inputs, 8 outputs on TOY: 256 per ciphertext) is folded
    (``replicated_fold``: one input ciphertext per sample); the local run and the server of a split run (below)
    plan the same fold (the request's header names it)."""
    model, x = _wide(tmp_path)
    plan = dense_packings.dense_plan("replicated", model, (300,), "TOY")
    assert plan.stages[0].fold == 2 and plan.input_ciphertexts == 1
    assert np.abs(dense_packings.run_local("replicated", model, x, (300,), params="TOY", allow_insecure=True,
                                           report=lambda _: None) - model.forward(x)).max() < 1e-6


@pytest.mark.slow
def test_a_folded_replicated_plan_runs_split(tmp_path):
    model, x = _wide(tmp_path)
    files = [str(tmp_path / name) for name in ("c.key", "p.ctx", "r.bin", "rep.bin", "y.npy")]
    assert cli.main(["keygen", "--model", tmp_path / "wide.npz", "--packing", "replicated", "--client", files[0],
                     "--context", files[1], *TOY]) == 0
    assert cli.main(["encrypt", "--client", files[0], "--input", tmp_path / "x.npy", "--out", files[2]]) == 0
    assert cli.main(["infer", "--model", tmp_path / "wide.npz", "--context", files[1], "--request", files[2],
                     "--out", files[3], "--no-progress"]) == 0
    assert cli.main(["decrypt", "--client", files[0], "--reply", files[3], "--out", files[4]]) == 0
    assert np.abs(np.load(files[4]) - model.forward(x)).max() < 1e-6


def test_plan_chooses_by_samples_and_states_why(mlp, tmp_path, capsys):
    """``plan`` / ``keygen`` learn the batch from --samples: without it auto keeps the slot plan (saying so); the
    JSON records the choice and its reason; --samples below 1 is refused naming it."""
    for samples, packing in ((None, "slots"), (5, "replicated"), (SAMPLE_PACKING_MIN_BATCH, "samples")):
        out = tmp_path / f"{packing}.json"
        extra = [] if samples is None else ["--samples", str(samples)]
        assert cli.main(["plan", *_model_args(mlp), "--params", "TOY", "--out", out, *extra]) == 0
        text = capsys.readouterr().out
        record = json.loads(out.read_text())
        assert f"packing: {packing} " in text and record["packing"] == dense_packings.RECORD_NAMES[packing]
        assert record["packing_reason"] in text and ("unknown" in text) == (samples is None)
    assert cli.main(["plan", *_model_args(mlp), "--samples", "0"]) == 2
    assert "--samples" in capsys.readouterr().err


@pytest.mark.parametrize("packing", ["replicated", "samples"])
def test_the_exact_last_activation_is_applied_by_each_dense_client(packing):
    """``Sequential.finish`` (the model's last activation, exact, left to the client) is applied after decryption
    by both dense clients, as by ``Client`` (the replicated plan carries it: before, it returned the logits)."""
    rng = np.random.default_rng(7)
    model = Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(2, 3)))], (4,))
    model.finish = "sigmoid"
    x = rng.uniform(-1, 1, (3, 4))
    y = dense_packings.run_local(packing, model, x, (4,), params="TOY", allow_insecure=True, report=lambda _: None)
    assert np.abs(y - model.forward(x)).max() < 1e-6 and np.all((y > 0) & (y < 1))
    if packing == "replicated":
        plan = dense_packings.dense_plan(packing, model, (4,), "TOY")
        assert type(plan).from_dict(json.loads(json.dumps(plan.to_dict()))).finish == "sigmoid"


@pytest.mark.slow
@pytest.mark.parametrize("packing", ["replicated", "samples"])
def test_a_models_exact_last_activation_is_applied_by_each_packing(tmp_path, packing):
    """A network ending in Sigmoid leaves it to the client (``Sequential.finish``, applied exactly after
    decryption); each packing's client applies it, so outputs agree with onnxruntime's probabilities."""
    torch = pytest.importorskip("torch")
    import onnx
    from tests.model.exported_models import onnxruntime_outputs, torch_export

    torch.manual_seed(5)
    module = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2), torch.nn.Sigmoid())
    proto = torch_export(module, (5,))
    onnx.save(proto, tmp_path / "m.onnx")
    x = np.random.default_rng(6).uniform(-1, 1, (8, 5))
    np.save(tmp_path / "x.npy", x)
    model = Sequential.load(tmp_path / "m.onnx", calibration=x, degree=3)
    assert model.finish == "sigmoid"
    assert cli.main(["infer", "--model", tmp_path / "m.onnx", "--calibration", tmp_path / "x.npy", "--degree", "3",
                     "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy", "--packing", packing, *TOY]) == 0
    y = np.load(tmp_path / "y.npy")
    assert np.abs(y - model.forward(x)).max() < 1e-6
    assert np.abs(y - onnxruntime_outputs(proto, x)[0]).max() <= model.calibration_report[1] + 1e-6


def test_local_slot_path_splits_a_batch_larger_than_one_request(mlp, tmp_path, capsys, monkeypatch):
    """``--packing slots`` on more samples than one request may hold (the server's ``max_ciphertexts``; 64 by
    default, 512 MNIST rows) runs them request by request (before: refused after encrypting them all, and 10,000
    MNIST rows passed 6 GB while encrypting). Here the server takes one ciphertext per request."""
    import functools

    from tensor_ops.inference import Server

    monkeypatch.setattr(cli, "Server", functools.partial(Server, max_ciphertexts=1))
    folder, _, cal, model, _ = mlp
    batch = model.plan((6,), params="TOY").batch
    x = np.tile(np.load(cal), (-(-(2 * batch + 1) // len(np.load(cal))), 1))[:2 * batch + 1]
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", *_model_args(mlp), "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy",
                     "--packing", "slots", *TOY]) == 0
    assert "(3 of 3: samples" in capsys.readouterr().out
    assert np.abs(np.load(tmp_path / "y.npy") - model.forward(x)).max() < 1e-6


def test_auto_falls_back_to_the_slot_path_when_a_dense_packing_cannot_plan(tmp_path, capsys):
    """A dense chain deeper than the named parameters: auto says the dense packing cannot plan it and takes the
    slot path (which names its own refusal); an explicit --packing is refused naming the option."""
    rng = np.random.default_rng(8)
    layers = [Linear(rng.normal(size=(4, 4)))]
    for _ in range(3):
        layers += [Square(), Linear(rng.normal(size=(4, 4)))]
    Sequential(layers, (4,)).save(tmp_path / "deep.npz")
    cli.main(["plan", "--model", tmp_path / "deep.npz", "--params", "TOY", "--samples", "5"])
    out = capsys.readouterr().out
    assert "packing: slots " in out and "the replicated packing cannot plan the model" in out
    assert cli.main(["plan", "--model", tmp_path / "deep.npz", "--params", "TOY", "--packing", "samples"]) == 2
    assert "--packing samples" in capsys.readouterr().err


@pytest.mark.slow
@settings(deadline=None, max_examples=6)
@given(st.integers(1, 600), st.integers(1, 12), st.integers(1, 5), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_random_dense_chains_agree_under_both_dense_packings(n_in, hidden, n_out, batch, seed):
    """Rule: for random widths (first layers wider than a TOY ciphertext's rows included: folded) and batches,
    both dense packings give the plain reference of the model to 1e-6."""
    rng = np.random.default_rng(seed)
    model = Sequential([Linear(rng.normal(size=(hidden, n_in)) / np.sqrt(n_in)), Square(),
                        Linear(rng.normal(size=(n_out, hidden)))], (n_in,))
    x = rng.uniform(-1, 1, (batch, n_in))
    for packing in ("replicated", "samples"):
        y = dense_packings.run_local(packing, model, x, (n_in,), params="TOY", allow_insecure=True,
                                     report=lambda _: None)
        assert np.abs(y - model.forward(x)).max() < 1e-6
