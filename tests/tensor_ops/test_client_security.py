"""The client decides its security: a plan (the server's) is keyed only at 128 bits unless the client opts in.

Attack: the server rewrites its plan to an insecure N = 2^12 ring with a Hamming-weight-2 secret, whose key it can
then find by search over the N^2/2 candidate secrets. ``Client(plan=...)`` and ``keygen --plan`` refuse it with one
line; ``allow_insecure=True`` / ``--insecure`` accept it (tests); 128-bit plans are keyed as before, and the key
report and the CLI state the security level."""
import json

import numpy as np
import pytest

from crypto.errors import ParameterError
from tensor_ops import cli
from tensor_ops.inference import Client
from tensor_ops.nn import Linear, Sequential, Square


def _model():
    rng = np.random.default_rng(0)
    return Sequential([Linear(rng.normal(0, 0.5, (3, 4))), Square(), Linear(rng.normal(0, 0.5, (2, 3)))],
                      input_shape=(4,))


def _rewritten_plan() -> dict:
    """The server's plan with its parameters rewritten to an insecure ring and a weight-2 sparse secret."""
    plan = _model().plan(params="TOY").to_dict()
    plan["params"] = dict(plan["params"], hamming_weight=2, insecure=True)
    return plan


@pytest.fixture(scope="module")
def secure_plan() -> dict:
    return _model().plan().to_dict()


def test_client_refuses_an_insecure_plan_unless_it_opts_in():
    plan = _rewritten_plan()
    with pytest.raises(ParameterError, match="not 128-bit secure.*allow_insecure=True") as error:
        Client(plan=plan, seed=1)
    assert "\n" not in str(error.value) and "h=2" in str(error.value)
    client = Client(plan=plan, seed=1, allow_insecure=True)          # the client's own, explicit choice
    assert client.params.hamming_weight == 2 and client.key_report()["security_bits"] is None


def test_client_keys_a_secure_plan_and_reports_its_security(secure_plan):
    client = Client(plan=secure_plan, seed=2)
    report = client.key_report()
    assert report["security_bits"] == 128 and report["security"] == "128-bit"


def test_parameters_named_by_the_client_are_its_own_choice():
    """``params=`` is the caller's decision (e.g. the TOY test ring), not the server's."""
    assert Client("TOY", seed=3).params.security_bits is None
    with pytest.raises(ParameterError, match="allow_insecure"):
        Client(plan=None, params=None, seed=3, allow_insecure="yes")


def test_keygen_cli_refuses_an_insecure_plan_unless_insecure(tmp_path, capsys, secure_plan):
    files = {name: str(tmp_path / name) for name in ("bad.json", "good.json", "client.key", "public.ctx")}
    (tmp_path / "bad.json").write_text(json.dumps(_rewritten_plan()))
    (tmp_path / "good.json").write_text(json.dumps(secure_plan))
    keygen = ["keygen", "--client", files["client.key"], "--context", files["public.ctx"], "--no-progress", "--plan"]
    assert cli.main(keygen + [files["bad.json"]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not 128-bit secure" in err and "--insecure" in err
    assert not (tmp_path / "client.key").exists()
    assert cli.main(keygen + [files["bad.json"], "--insecure"]) == 0
    assert "security: INSECURE (sparse secret h=2)" in capsys.readouterr().out
    assert cli.main(keygen + [files["good.json"]]) == 0
    assert "security: 128-bit (N=2^13" in capsys.readouterr().out
