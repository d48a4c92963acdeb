"""Misused or damaged files give the library's own error (and exit status 2 from the command lines), never a
traceback: .npy or text passed as a model, truncated and corrupted .npz models, the secret client file or a
request where a public context is expected, crafted record metas and message headers (issue 16, item 3)."""

import numpy as np
import pytest

import hezk.cli
import hezk.record
from crypto import CKKSContext, CKKSParameters
from crypto import record
from crypto.errors import HEError, SerializationError
from crypto.rlwe import Ciphertext
from proofs import cli as proofs_cli
from proofs.errors import ModelError
from proofs.model import load_model, save_float_model
from tensor_ops import cli as tensor_cli
from tensor_ops.inference import Client, Server, describe_bytes
from tensor_ops.nn import Linear, Sequential, Square

MUTANTS = 120  # per model file: half truncations, half byte flips


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad_files")
    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(0, 0.5, (4, 5)), rng.normal(0, 0.5, 4)), Square(),
                        Linear(rng.normal(0, 0.5, (2, 4)))], input_shape=(5,))
    model.save(path / "model.npz")
    save_float_model(path / "pmodel.npz", [rng.normal(0, .5, (4, 5)), rng.normal(0, .5, (2, 4))],
                     [np.zeros(4), np.zeros(2)])
    np.save(path / "x.npy", rng.uniform(-1, 1, (2, 5)))
    (path / "text.npz").write_text("weights: 1 2 3\n")
    client = Client(model=model, seed=3)
    client.save(path / "client.key")
    (path / "public.ctx").write_bytes(client.public_context())
    (path / "request.bin").write_bytes(client.encrypt(np.load(path / "x.npy")))
    return path, model, client


def _mutants(blob, seed):
    rng = np.random.default_rng(seed)
    cuts = [blob[:int(k)] for k in rng.integers(0, len(blob), MUTANTS // 2)]
    flips = []
    for _ in range(MUTANTS // 2):
        data = bytearray(blob)
        for position in rng.integers(0, len(data), int(rng.integers(1, 4))):
            data[position] ^= int(rng.integers(1, 256))
        flips.append(bytes(data))
    return cuts + flips


@pytest.mark.parametrize("loader, error, name", [(Sequential.load, HEError, "model.npz"),
                                                 (load_model, ModelError, "pmodel.npz")], ids=["tensor_ops", "proofs"])
def test_truncated_and_corrupted_models_raise_the_library_error(files, tmp_path, loader, error, name):
    path = files[0]
    refused = 0
    for i, blob in enumerate(_mutants((path / name).read_bytes(), seed=len(name))):
        mutant = tmp_path / f"m{i}.npz"
        mutant.write_bytes(blob)
        try:
            loader(mutant)
        except error as caught:
            assert "model file" in str(caught)
            refused += 1
    assert refused >= MUTANTS * 3 // 4  # most mutants are refused (flips in zip timestamps may load)


@pytest.mark.parametrize("main, name", [(tensor_cli.main, "model.npz"), (proofs_cli.main, "pmodel.npz")],
                         ids=["tensor_ops", "proofs"])
def test_command_lines_exit_2_on_damaged_models(files, tmp_path, capsys, main, name):
    path = files[0]
    command = ["plan", "--model"] if main is tensor_cli.main else ["commit", "--out", str(tmp_path / "c.bin"),
                                                                   "--model"]
    for i, blob in enumerate(_mutants((path / name).read_bytes(), seed=7)[::6]):
        mutant = tmp_path / f"m{i}.npz"
        mutant.write_bytes(blob)
        status = main(command + [str(mutant)])
        err = capsys.readouterr().err
        assert status in (0, 2) and "Traceback" not in err
        if status:
            assert err.startswith("error: model file")


@pytest.mark.parametrize("main", [tensor_cli.main, hezk.cli.main], ids=["tensor_ops", "hezk"])
@pytest.mark.parametrize("bad, says", [("x.npy", "single .npy array"), ("text.npz", "text file")])
def test_npy_or_text_as_tensor_ops_model(files, capsys, main, bad, says):
    assert main(["plan", "--model", str(files[0] / bad)]) == 2
    err = capsys.readouterr().err
    assert says in err and "pickle" not in err


@pytest.mark.parametrize("bad, says", [("x.npy", "single .npy array"), ("text.npz", "not a zip archive")])
def test_npy_or_text_as_proofs_model(files, tmp_path, capsys, bad, says):
    assert proofs_cli.main(["commit", "--model", str(files[0] / bad), "--out", str(tmp_path / "c.bin")]) == 2
    err = capsys.readouterr().err
    assert says in err and "pickle" not in err


@pytest.mark.parametrize("context, says", [("client.key", "SECRET client file"),
                                           ("request.bin", "encrypted-inference message (request)"),
                                           ("x.npy", "numpy .npy array")])
def test_wrong_file_as_public_context(files, tmp_path, capsys, context, says):
    path = files[0]
    status = tensor_cli.main(["infer", "--model", str(path / "model.npz"), "--context", str(path / context),
                              "--request", str(path / "request.bin"), "--out", str(tmp_path / "reply.bin")])
    err = capsys.readouterr().err
    assert status == 2 and says in err and "keygen --context" in err and "record kind" not in err
    with pytest.raises(SerializationError, match="not a public context"):
        Server(files[1], (path / context).read_bytes())


@pytest.mark.parametrize("option, value, says", [("--request", "client.key", "SECRET client file"),
                                                 ("--request", "public.ctx", "a public context"),
                                                 ("--context", "model.npz", "zip archive")])
def test_other_swapped_files(files, tmp_path, capsys, option, value, says):
    path = files[0]
    args = {"--model": path / "model.npz", "--context": path / "public.ctx", "--request": path / "request.bin",
            "--out": tmp_path / "reply.bin", option: path / value}
    assert tensor_cli.main(["infer"] + [str(a) for pair in args.items() for a in pair]) == 2
    assert says in capsys.readouterr().err


def test_describe_bytes_names_each_kind(files):
    path, _, client = files
    assert "SECRET" in describe_bytes((path / "client.key").read_bytes())
    assert "SECRET" in describe_bytes(client._context.to_bytes(include_secret_key=True))
    assert describe_bytes(client.public_context()) == "a public context"
    assert describe_bytes(b"") == "an empty file" and describe_bytes(b"hello") == "a text file"


@pytest.fixture(scope="module")
def toy():
    ctx = CKKSContext.keygen(CKKSParameters.preset("TOY"), rotations=[1], seed=1)
    return ctx, ctx.encrypt([1.0, 2.0]).to_bytes()


@pytest.mark.parametrize("meta", [[], "meta", 3, None, [{"level": 1}]])
def test_record_meta_that_is_not_an_object(toy, meta):
    ctx, blob = toy
    fingerprint, _, arrays = record.unpack(blob, "ciphertext")
    crafted = record.pack("ciphertext", fingerprint, meta, arrays)
    with pytest.raises(SerializationError, match="meta"):
        Ciphertext.from_bytes(crafted, ctx)
    public = ctx.public_context().to_bytes()
    fingerprint, _, arrays = record.unpack(public, "public_context")
    with pytest.raises(SerializationError):
        CKKSContext.from_bytes(record.pack("public_context", fingerprint, meta, arrays))


def _with_header(blob, **fields):
    """The message re-packed with changed header fields (a valid record: what a crafted reply can be)."""
    message = hezk.record.unpack(blob, hezk.record.peek_kind(blob))
    return hezk.record.pack(message.kind, dict(message.meta, **fields), message.arrays)


@pytest.mark.parametrize("field, value", [("samples", True), ("block", True), ("ciphertexts", True),
                                          ("output_shape", [True]), ("output_shape", [2.0]), ("single", 1),
                                          ("single", "yes")])
def test_reply_header_fields_refuse_bools_and_wrong_types(files, field, value):
    _, model, client = files
    reply = Server(model, client.public_context()).evaluate(client.encrypt(np.zeros((2, 5))))
    assert client.decrypt(_with_header(reply)).shape == (2, 2)  # the untouched header still decrypts
    with pytest.raises(SerializationError, match=field):
        client.decrypt(_with_header(reply, **{field: value}))


@pytest.mark.parametrize("field, value", [("samples", True), ("sample_shape", [True, 4]), ("single", None)])
def test_request_header_fields_refuse_bools(files, field, value):
    path, model, client = files
    request = (path / "request.bin").read_bytes()
    with pytest.raises(SerializationError, match=field):
        Server(model, client.public_context()).evaluate(_with_header(request, **{field: value}))


def test_nan_input_to_proofs_verify_is_a_usage_error(tmp_path, capsys):
    rng = np.random.default_rng(5)
    save_float_model(tmp_path / "m.npz", [rng.normal(0, .5, (3, 4))], [np.zeros(3)])
    assert proofs_cli.main(["commit", "--model", str(tmp_path / "m.npz"), "--out", str(tmp_path / "c.bin"),
                            "--public-weights"]) == 0
    x = rng.uniform(-1, 1, (2, 4))
    np.save(tmp_path / "x.npy", x)
    assert proofs_cli.main(["prove", "--model", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"),
                            "--commitment", str(tmp_path / "c.bin"), "--out", str(tmp_path / "p.bin"),
                            "--public-weights", "--quiet"]) == 0
    capsys.readouterr()
    x[0, 0] = np.nan
    np.save(tmp_path / "nan.npy", x)
    args = ["verify", "--commitment", str(tmp_path / "c.bin"), "--proof", str(tmp_path / "p.bin"), "--input"]
    assert proofs_cli.main(args + [str(tmp_path / "nan.npy")]) == 2
    captured = capsys.readouterr()
    assert "reject" not in captured.out and "finite" in captured.err
    assert proofs_cli.main(args + [str(tmp_path / "x.npy")]) == 0  # the honest input is still accepted
