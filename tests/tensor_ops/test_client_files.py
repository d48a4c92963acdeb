"""The client's files and outputs: the secret client file is 0600 whatever was at its path; an output meant
to be shared is noise-flooded (``Client.decrypt_shared``, ``decrypt --flood``) and keeps the precision stated."""
import os
import re
import stat

import numpy as np
import pytest

from tensor_ops import cli
from crypto.errors import ParameterError
from tensor_ops.inference import Client, Server
from tensor_ops.model_plan import choose_parameters
from tensor_ops.nn import Linear, Sequential, Square

from .test_inference import assert_precise

X = np.random.default_rng(5).uniform(-1, 1, (3, 6))


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(0, 0.5, (4, 6)), rng.normal(0, 0.5, 4)), Square(),
                        Linear(rng.normal(0, 0.5, (3, 4)))], input_shape=(6,))
    client = Client(model=model, params=choose_parameters(3, log_scale=50), seed=31)  # room for the flood
    reply = Server(model, client.public_context()).evaluate(client.encrypt(X))
    return model, client, reply


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_save_over_an_existing_world_readable_file_leaves_it_0600(setup, tmp_path):
    _, client, reply = setup
    path = tmp_path / "client.key"
    path.write_bytes(b"old")
    os.chmod(path, 0o644)
    old_umask = os.umask(0)  # even with no umask at all
    try:
        client.save(path)
    finally:
        os.umask(old_umask)
    assert _mode(path) == 0o600
    np.testing.assert_array_equal(Client.load(path).decrypt(reply), client.decrypt(reply))  # still the client
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # no temporary left behind


def test_save_replaces_a_link_instead_of_writing_through_it(setup, tmp_path):
    _, client, _ = setup
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not yours")
    os.chmod(target, 0o644)
    link = tmp_path / "client.key"
    link.symlink_to(target)
    client.save(link)
    assert not link.is_symlink() and _mode(link) == 0o600
    assert target.read_bytes() == b"not yours" and _mode(target) == 0o644


def test_shared_outputs_are_flooded_with_the_precision_stated(setup):
    model, client, reply = setup
    exact = client.decrypt(reply)
    assert_precise(exact, model.forward(X), client.params)
    shared, bits = client.decrypt_shared(reply)
    assert 8 < bits < 40 and shared.shape == exact.shape
    assert np.max(np.abs(shared - exact)) < 2.0 ** (4 - bits)  # within the stated precision (a few sigmas)
    assert np.max(np.abs(shared - exact)) > 2.0 ** (-4 - bits)  # and really flooded
    np.testing.assert_array_equal(client.decrypt(reply, flood_bits=None), exact)


def test_sharing_at_a_scale_too_small_for_the_flood_is_refused(setup):
    model, _, _ = setup
    narrow = Client(model=model, params=choose_parameters(3, log_scale=30), seed=32)
    reply = Server(model, narrow.public_context()).evaluate(narrow.encrypt(X))
    assert_precise(narrow.decrypt(reply), model.forward(X), narrow.params)  # fine for its own use
    with pytest.raises(ParameterError, match="scale 2\\^50"), pytest.warns(Warning):
        narrow.decrypt_shared(reply)


def test_cli_decrypt_flood(setup, tmp_path, capsys):
    model, client, reply = setup
    client.save(tmp_path / "client.key")
    (tmp_path / "reply.bin").write_bytes(reply)
    base = ["decrypt", "--client", str(tmp_path / "client.key"), "--reply", str(tmp_path / "reply.bin")]
    assert cli.main(base + ["--out", str(tmp_path / "exact.npy")]) == 0
    assert "flooded" not in capsys.readouterr().out
    assert cli.main(base + ["--out", str(tmp_path / "shared.npy"), "--flood"]) == 0
    out = capsys.readouterr().out
    bits = float(re.search(r"about ([0-9.]+) bits of precision", out).group(1))
    exact, shared = np.load(tmp_path / "exact.npy"), np.load(tmp_path / "shared.npy")
    assert 0 < np.max(np.abs(shared - exact)) < 2.0 ** (4 - bits)
