"""proofs.progress: the tqdm bar the prove script draws (Network.prove(progress=True)) and its argument check."""
import io

import numpy as np
import pytest

from proofs import ModelError
from proofs.layers.network import Network
from proofs.progress import as_progress, progress_bar
from proofs.quantize import quantize_fixed_point, quantize_input


def test_progress_bar_draws_with_tqdm():
    stream = io.StringIO()
    bar = progress_bar("proving", stream)
    for done in range(1, 4):
        bar(done, 3, f"layer {done}")
    text = stream.getvalue()
    assert "proving" in text and "3/3" in text and "layer 3" in text


def test_as_progress_checks_its_argument():
    assert as_progress(None) is None and as_progress(False) is None
    assert callable(as_progress(True))
    f = lambda *a: None  # noqa: E731
    assert as_progress(f) is f
    with pytest.raises(ModelError, match="progress"):
        as_progress("yes")


def test_network_prove_progress_true_draws_a_bar(capsys):
    rng = np.random.default_rng(0)
    model = quantize_fixed_point([rng.normal(0, 0.4, (3, 4))], [np.zeros(3)], frac_bits=4)
    Network(model, zk=False).prove(quantize_input(model, np.zeros((1, 4))), progress=True)
    assert "proving" in capsys.readouterr().err
    with pytest.raises(ModelError, match="progress"):
        Network(model, zk=False).prove(quantize_input(model, np.zeros((1, 4))), progress=3)
