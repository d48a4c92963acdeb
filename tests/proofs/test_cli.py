"""The prove/verify scripts: commit, prove, verify round trip, rejections and usage errors.

The default is the hiding (zero-knowledge) mode; ``--public-weights`` is the plain mode that reveals the weights."""
import subprocess
import sys

import numpy as np
import pytest

from proofs.cli import build_parser, main
from proofs.layers.network import ModelCommitment, NetworkProof, read_proof
from proofs.layers.network_zk import HidingNetworkProof
from proofs.model import save_float_model, save_model
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input


def float_weights(seed=0, sizes=(6, 5, 3)):
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0, 0.4, (sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    biases = [rng.normal(0, 0.1, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return weights, biases


@pytest.fixture
def files(tmp_path):
    weights, biases = float_weights()
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    save_model(tmp_path / "model.npz", model)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 6))
    np.save(tmp_path / "x.npy", x)
    return tmp_path, model, x


def run(*args):
    return main([str(a) for a in args])


def commit(path, model="model.npz", out="c.bin", *extra):
    return run("commit", "--model", path / model, "--out", path / out, "--max-proofs", 2, *extra)


def prove(path, out="p.bin", x="x.npy", model="model.npz", *extra):
    return run("prove", "--model", path / model, "--input", path / x, "--commitment", path / "c.bin",
               "--out", path / out, *extra)


@pytest.mark.parametrize("public", [False, True])
def test_commit_prove_verify_accepts(files, capsys, public):
    path, model, x = files
    flag = ("--public-weights",) if public else ()
    assert commit(path, "model.npz", "c.bin", *flag) == 0
    assert (path / "c.bin").stat().st_size > 0
    assert (path / "c.bin.state").exists() != public  # the secret prover state of a hiding commitment
    assert ModelCommitment.from_bytes((path / "c.bin").read_bytes()).zk != public
    out = capsys.readouterr().out
    assert ("PUBLIC WEIGHTS" in out) == public
    assert prove(path, "p.bin", "x.npy", "model.npz", *flag) == 0
    captured = capsys.readouterr()
    assert ("5/5" if public else "3/3") in captured.err and "proving" in captured.err  # tqdm bar on stderr
    assert "soundness" in captured.out and "bits per attempt (grinding 2^k hashes: 2^(k-" in captured.out
    assert isinstance(read_proof((path / "p.bin").read_bytes()), NetworkProof if public else HidingNetworkProof)
    assert run("verify", "--commitment", path / "c.bin", "--input", path / "x.npy", "--proof", path / "p.bin") == 0
    captured = capsys.readouterr()
    assert captured.out == "accept\n"  # the verdict alone on stdout, the details on stderr
    assert "bits per attempt" in captured.err and ("public weights" in captured.err) == public
    expected = forward_int(model, quantize_input(model, x)) * 2.0 ** -model.output_frac
    assert f"{expected[0, 0]:.4f}".rstrip("0")[:5] in captured.err


def test_verify_rejects_other_input_tampered_proof_and_other_model(files, capsys):
    path, model, x = files
    commit(path)
    prove(path, "p.bin", "x.npy", "model.npz", "--quiet")
    np.save(path / "y.npy", x + 0.25)
    assert run("verify", "--commitment", path / "c.bin", "--input", path / "y.npy", "--proof", path / "p.bin") == 1
    data = bytearray((path / "p.bin").read_bytes())
    data[len(data) // 2] ^= 0x10
    (path / "bad.bin").write_bytes(bytes(data))
    assert run("verify", "--commitment", path / "c.bin", "--input", path / "x.npy", "--proof", path / "bad.bin") == 1
    save_float_model(path / "other.npz", *float_weights(seed=9), frac_bits=6)
    commit(path, "other.npz", "other.bin")
    assert run("verify", "--commitment", path / "other.bin", "--input", path / "x.npy", "--proof", path / "p.bin") == 1
    (path / "junk.bin").write_bytes(b"junk")
    assert run("verify", "--commitment", path / "junk.bin", "--input", path / "x.npy", "--proof", path / "p.bin") == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines().count("reject") == 4
    assert sum(line.startswith("reject: ") for line in captured.err.splitlines()) == 4


def test_integer_inputs_and_float_model_files(tmp_path, capsys):
    weights, biases = float_weights(seed=3)
    save_float_model(tmp_path / "f.npz", weights, biases, frac_bits=5)
    model = quantize_fixed_point(weights, biases, frac_bits=5)
    np.save(tmp_path / "x.npy", quantize_input(model, np.full(6, 0.5)))  # one input, already quantized
    assert commit(tmp_path, "f.npz") == 0
    assert prove(tmp_path, "p.bin", "x.npy", "f.npz", "--quiet") == 0
    assert run("verify", "--commitment", tmp_path / "c.bin", "--input", tmp_path / "x.npy",
               "--proof", tmp_path / "p.bin") == 0


def test_usage_errors_exit_with_code_2(files, capsys):
    path, _, _ = files
    for argv in ([], ["prove", "--model", path / "missing.npz", "--input", path / "x.npy", "--out", path / "p"],
                 ["verify", "--commitment", path / "c.bin"],
                 ["commit", "--model", path / "model.npz", "--out", path / "no" / "dir" / "c.bin"]):
        with pytest.raises(SystemExit) as exit_info:
            run(*argv)
        assert exit_info.value.code == 2
    assert "does not exist" in capsys.readouterr().err
    np.save(path / "wide.npy", np.zeros((2, 9)))
    assert prove(path, "p.bin", "x.npy") == 2  # no commitment yet: no prover state
    assert "run 'commit' first" in capsys.readouterr().err
    commit(path)
    assert prove(path, "p.bin", "wide.npy") == 2
    assert "shape" in capsys.readouterr().err


def test_python_dash_m_proofs_runs(files):
    path, _, _ = files
    result = subprocess.run([sys.executable, "-m", "proofs", "commit", "--model", str(path / "model.npz"),
                             "--out", str(path / "c.bin"), "--max-proofs", "2"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "committed 2 layers" in result.stdout


def test_input_files_as_npz_or_junk(files, capsys):
    path, _, x = files
    np.savez(path / "one.npz", x=x)
    np.savez(path / "two.npz", a=x, b=x)
    (path / "junk.npy").write_bytes(b"not an array")
    commit(path)
    assert prove(path, "p.bin", "one.npz", "model.npz", "--quiet") == 0
    for bad in ("two.npz", "junk.npy"):
        assert prove(path, "p.bin", bad) == 2
    assert "2 arrays" in capsys.readouterr().err
    # an unreadable input is a usage error (exit 2), not a rejection of the proof
    assert run("verify", "--commitment", path / "c.bin", "--input", path / "junk.npy", "--proof", path / "p.bin") == 2
    captured = capsys.readouterr()
    assert "reject" not in captured.out and captured.err.startswith("error: ")


def test_public_weights_flag_says_it_reveals_the_weights(capsys):
    for command in ("commit", "prove"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--public-weights" in text and "REVEAL THE WEIGHTS" in text


def test_each_proof_spends_a_copy_and_the_state_must_match(files, capsys):
    path, _, _ = files
    commit(path)
    assert prove(path, "p1.bin", "x.npy", "model.npz", "--quiet") == 0
    assert prove(path, "p2.bin", "x.npy", "model.npz", "--quiet") == 0
    proofs = [read_proof((path / name).read_bytes()) for name in ("p1.bin", "p2.bin")]
    assert sorted(p.relations.copy for p in proofs) == [0, 1]  # the state file remembers the spent copy
    for name in ("p1.bin", "p2.bin"):
        assert run("verify", "--commitment", path / "c.bin", "--input", path / "x.npy", "--proof", path / name) == 0
    assert prove(path, "p3.bin", "x.npy", "model.npz", "--quiet") == 2
    assert "copies of this commitment are used" in capsys.readouterr().err
    save_float_model(path / "other.npz", *float_weights(seed=9), frac_bits=6)
    assert prove(path, "p4.bin", "x.npy", "other.npz", "--quiet") == 2  # another model's weights
    assert "does not belong to this model" in capsys.readouterr().err


def test_the_secret_prover_state_goes_only_where_the_user_names_it(files, capsys, monkeypatch):
    """A hiding commit names its secret state: --state PATH, or --out PATH (then PATH.state); with neither, it
    is a usage error (exit 2) and nothing is written (the old default wrote ./c.bin.state)."""
    path, _, _ = files
    work = path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert run("commit", "--model", path / "model.npz", "--max-proofs", 2) == 2
    assert "--state" in capsys.readouterr().err and list(work.iterdir()) == []
    assert run("commit", "--model", path / "model.npz", "--max-proofs", 2, "--state", path / "secret.st") == 0
    assert sorted(p.name for p in work.iterdir()) == ["c.bin"] and (path / "secret.st").is_file()
    assert (path / "secret.st").stat().st_mode & 0o077 == 0  # readable by the owner only
    assert run("commit", "--model", path / "model.npz", "--max-proofs", 2, "--out", path / "named.bin") == 0
    assert (path / "named.bin.state").is_file()
    assert run("commit", "--model", path / "model.npz", "--public-weights") == 0  # no secret: default c.bin
    assert sorted(p.name for p in work.iterdir()) == ["c.bin"]


def test_commit_help_says_the_state_is_secret(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["commit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "SECRET prover state" in text and "required unless --out" in text


def test_calibration_data_set_the_input_bound_and_the_stated_error(tmp_path, capsys):
    """Inputs in [0, 1]: without calibration a float model without an input_bound is committed for |x| <= 8
    and its worst-case error is stated for that box; --calibration fits the bound (1) and the statement shrinks;
    prove (which reads the bound from the commitment) and verify accept."""
    weights, biases = float_weights(seed=3, sizes=(6, 8, 3))
    np.savez(tmp_path / "m.npz", w0=weights[0], b0=biases[0], w1=weights[1], b1=biases[1], activation="relu")
    x = np.random.default_rng(4).uniform(0, 1, (8, 6))
    np.save(tmp_path / "cal.npy", x)
    np.save(tmp_path / "x.npy", x[:2])

    def stated(out):
        line = next(line for line in out.splitlines() if line.startswith("worst-case output error <= "))
        return float(line.split("<= ")[1].split()[0]), float(line.split("|x| <= ")[1].split(",")[0])

    assert run("commit", "--model", tmp_path / "m.npz", "--out", tmp_path / "wide.bin", "--public-weights") == 0
    out = capsys.readouterr().out
    wide_error, wide_bound = stated(out)
    assert wide_bound == 8 and "--calibration" in out
    assert run("commit", "--model", tmp_path / "m.npz", "--out", tmp_path / "c.bin", "--max-proofs", 1,
               "--calibration", tmp_path / "cal.npy") == 0
    out = capsys.readouterr().out
    error, bound = stated(out)
    assert bound == 1 and "calibration data" in out and error < wide_error / 4
    assert f"{ModelCommitment.from_bytes((tmp_path / 'c.bin').read_bytes()).error_bound:.3g}" == f"{error:.3g}"
    assert run("prove", "--model", tmp_path / "m.npz", "--input", tmp_path / "x.npy", "--commitment",
               tmp_path / "c.bin", "--out", tmp_path / "p.bin", "--quiet") == 0
    assert run("verify", "--commitment", tmp_path / "c.bin", "--input", tmp_path / "x.npy",
               "--proof", tmp_path / "p.bin") == 0
    capsys.readouterr()
    for bad in (np.arange(6), np.array([[np.nan] * 6])):  # integers are ambiguous; NaN is no input
        np.save(tmp_path / "bad.npy", bad)
        assert run("commit", "--model", tmp_path / "m.npz", "--out", tmp_path / "b.bin", "--public-weights",
                   "--calibration", tmp_path / "bad.npy") == 2
        assert "calibration file" in capsys.readouterr().err


def test_batch_verify_rejects_only_the_proof_whose_input_leaves_the_committed_bound(files, capsys):
    """verify --inputs --proofs: an integer input outside the commitment's input_bound (one above it, or 2^64 - 1
    as uint64, which an int64 cast would read as -1) rejects that proof alone (exit 1, its line naming the bound),
    the others still checked and accepted (it used to stop the whole batch with a usage error, exit 2), from a
    stacked .npy and from a folder of .npy files; the single verify rejects it too (exit 1); prove refuses such an
    input as a usage error (exit 2)."""
    path, model, x = files
    commit(path, "model.npz", "c.bin", "--public-weights")  # any number of proofs
    assert run("prove", "--model", path / "model.npz", "--commitment", path / "c.bin", "--inputs", path / "x.npy",
               "--out", path / "p", "--quiet", "--public-weights") == 0
    bound = ModelCommitment.from_bytes((path / "c.bin").read_bytes()).input_bound
    quantized = quantize_input(model, x)
    names = [f"proof_{i:05d}.bin" for i in range(len(x))]
    verify = ("verify", "--commitment", path / "c.bin", "--proofs", path / "p", "--quiet", "--inputs")
    np.save(path / "q.npy", quantized)
    assert run(*verify, path / "q.npy") == 0  # positive control: the quantized inputs as integers
    capsys.readouterr()
    (path / "folder").mkdir()
    above = quantized[1].copy()
    above[0] = bound + 1
    np.save(path / "bad.npy", np.concatenate([quantized[:1], above[None], quantized[2:]]))
    wrapped = np.full(quantized.shape[1], 2 ** 64 - 1, dtype=np.uint64)
    for source, bad_row, bad in (("bad.npy", 1, above), ("folder", 1, above), ("folder", 2, wrapped)):
        for i, row in enumerate(quantized):  # the folder: one .npy per input group
            np.save(path / "folder" / f"x{i}.npy", bad if i == bad_row else row)
        assert run(*verify, path / source) == 1, source
        captured = capsys.readouterr()
        lines = captured.out.splitlines()
        assert lines[bad_row] == f"{names[bad_row]}: reject: input group {bad_row}: input (input_bound={bound}) " \
                                 f"holds {int(bad.max())}, outside [-{bound}, {bound}]", lines
        assert [line for i, line in enumerate(lines) if i != bad_row] == \
            [f"{name}: accept" for i, name in enumerate(names) if i != bad_row] + ["reject"], lines
        assert f"1 of {len(names)} proofs rejected: {names[bad_row]}" in captured.err
    np.save(path / "one.npy", wrapped)
    assert run("verify", "--commitment", path / "c.bin", "--input", path / "one.npy",
               "--proof", path / "p" / names[2]) == 1
    captured = capsys.readouterr()
    assert captured.out == "reject\n" and f"input (input_bound={bound}) holds {2 ** 64 - 1}" in captured.err
    assert prove(path, "q.bin", "one.npy", "model.npz", "--quiet", "--public-weights") == 2
    assert f"input_bound={bound}" in capsys.readouterr().err
