"""Every example runs to completion (in quick mode, HEZK_QUICK=1), so the examples never rot; run in an empty
working directory, it writes only under ./out/ (or under $HEZK_OUT when set), and a secret key only there."""
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parent.parent / "examples").glob("*.py"))
# records that carry a secret: a saved inference client, a crypto full context or secret-key record, a proofs
# prover state (hezk.record.SECRET_KINDS: the container's kind byte says what a record is)


def _files(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def _holds_secret(path: pathlib.Path) -> bool:
    import hezk.record

    try:
        return hezk.record.peek_kind(path.read_bytes()[:8]) in hezk.record.SECRET_KINDS
    except hezk.record.RecordError:
        return False


SLOW_EXAMPLES = {"deep_mlp_bootstrap.py",  # 12 s: run by pytest -m slow
                 # 5-7 s each on a fresh clone, their paths covered by faster tests (training-step proofs,
                 # exported CNNs, the digits models): the default run stays under 10 minutes on 2 cores
                 "prove_training_step.py", "encrypted_cnn.py", "digits_models.py"}


@pytest.mark.parametrize("script", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_EXAMPLES else p
                                    for p in EXAMPLES], ids=[p.name for p in EXAMPLES])
def test_example_runs_and_writes_only_under_out(script, tmp_path):
    env = dict(os.environ)
    env.pop("HEZK_OUT", None)
    env.update(HEZK_QUICK="1", MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{script.name} printed nothing"
    stray = [str(p) for p in _files(tmp_path) if p.parts[0] != "out"]
    assert not stray, f"{script.name} left files outside ./out/: {stray}"


@pytest.mark.slow  # reruns two examples (11 s); the default run checks every example writes only under ./out/
@pytest.mark.parametrize("name", ["client_server.py", "prove_mlp.py"])
def test_hezk_out_is_honoured(name, tmp_path):
    """With HEZK_OUT set, the working directory stays empty; the secret client file lies only in HEZK_OUT."""
    script = next(p for p in EXAMPLES if p.name == name)
    cwd, out = tmp_path / "cwd", tmp_path / "elsewhere"
    cwd.mkdir()
    env = dict(os.environ, HEZK_QUICK="1", MPLBACKEND="Agg", HEZK_OUT=str(out))
    result = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert _files(cwd) == [], f"{name} wrote into the working directory: {_files(cwd)}"
    written = _files(out)
    assert written, f"{name} wrote nothing into HEZK_OUT"
    secrets = [p for p in written if _holds_secret(out / p)]
    named = {"client_server.py": ["client.key"], "prove_mlp.py": ["c.bin.state"]}[name]
    assert [p.name for p in secrets] == named, secrets  # the one path the example names


def test_secret_detector_sees_a_saved_client(tmp_path):
    """The check above can fail: a saved client is recognised as secret, its public context is not."""
    from tensor_ops.inference import Client

    client = Client("TOY", seed=1)
    client.save(tmp_path / "c.key")
    (tmp_path / "public.ctx").write_bytes(client.public_context())
    (tmp_path / "full.ctx").write_bytes(client._context.to_bytes(include_secret_key=True))
    assert _holds_secret(tmp_path / "c.key") and _holds_secret(tmp_path / "full.ctx")
    assert not _holds_secret(tmp_path / "public.ctx")


def test_secret_detector_sees_a_prover_state(tmp_path):
    """A hiding commitment's prover state is secret; the commitment and the model file are not."""
    import numpy as np

    from proofs.cli import main
    from proofs.model import save_float_model

    rng = np.random.default_rng(0)
    save_float_model(tmp_path / "m.npz", [rng.normal(0, 0.4, (3, 4))], [np.zeros(3)], frac_bits=6)
    assert main(["commit", "--model", str(tmp_path / "m.npz"), "--out", str(tmp_path / "c.bin"),
                 "--max-proofs", "1"]) == 0
    assert _holds_secret(tmp_path / "c.bin.state")
    assert not _holds_secret(tmp_path / "c.bin") and not _holds_secret(tmp_path / "m.npz")


def test_plots_measure_precision_at_the_presets_scale():
    """examples/plots.py plots precision with a preset's parameters (scale 2^50), not the planner's 2^30."""
    import importlib.util

    from crypto import CKKSParameters

    script = next(p for p in EXAMPLES if p.name == "plots.py")
    spec = importlib.util.spec_from_file_location("hezk_example_plots", script)
    plots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plots)
    params, points = plots.precision_by_depth(1)
    assert params.log_scale == CKKSParameters.preset("N14").log_scale == 50
    assert 30 < points[0][1] < 50  # bits: well above what a 2^30 scale gives (~14-16 bits)
