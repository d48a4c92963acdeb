"""``hezk commit`` of a ReLU MLP (the MLP proof) prints the measured error of the proven model against the float one,
as the graph proof does, beside the worst case it states (issue 35: a newcomer saw only <= 4.43 where the
measured error was 0.01-0.12); ``hezk.commit`` reports the same figures for the same calibration inputs."""
from __future__ import annotations

import re

import numpy as np

import hezk
from proofs.cli import main


def test_the_command_line_prints_the_measured_error_the_api_reports(tmp_path, capsys):
    rng = np.random.default_rng(5)
    model, calibration = str(tmp_path / "mlp.npz"), tmp_path / "cal.npy"
    np.savez(model, w0=0.3 * rng.normal(size=(8, 4)), b0=0.1 * rng.normal(size=8), w1=0.3 * rng.normal(size=(3, 8)),
             b1=np.zeros(3), activation="relu")
    x = rng.uniform(-1, 1, (32, 4))
    np.save(calibration, x)
    assert main(["commit", "--model", model, "--out", str(tmp_path / "c.bin"), "--calibration", str(calibration),
                 "--max-proofs", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    measured = re.search(r"proven output vs the float model on the calibration data .*: mean error (\S+), max error "
                         r"(\S+) \(largest \|output\| \S+, argmax agreement (\S+)%\)", out)
    worst = re.search(r"worst-case output error <= (\S+)", out)
    assert measured and worst, out
    assert 0 < float(measured.group(2)) <= float(worst.group(1))
    report = hezk.commit(model, calibration=x, max_proofs=1).error_report
    assert f"{report['mean_error']:.4g}" == measured.group(1) and f"{report['max_error']:.4g}" == measured.group(2)
    assert f"{100 * report['argmax_agreement']:.1f}" == measured.group(3)


def test_without_calibration_the_seeded_inputs_are_named(tmp_path, capsys):
    rng = np.random.default_rng(6)
    model = str(tmp_path / "mlp.npz")
    np.savez(model, w0=0.3 * rng.normal(size=(8, 4)), b0=np.zeros(8), w1=0.3 * rng.normal(size=(2, 8)),
             b1=np.zeros(2), activation="relu")
    assert main(["commit", "--model", model, "--out", str(tmp_path / "c.bin"), "--public-weights", "--quiet"]) == 0
    assert "proven output vs the float model on 64 seeded uniform [-1, 1] inputs" in capsys.readouterr().out
