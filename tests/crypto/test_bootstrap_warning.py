"""keygen(..., bootstrap=...) warns when the parameters' bootstrap is stated to keep few bits, naming those bits and
the bootstrapping preset; parameters made for bootstrapping do not warn.  Key generation itself is stopped right
after the check (the keys of a bootstrap at N = 2^16 take tens of GB): the check runs before any key is made."""
import warnings

import pytest

import crypto.context
from crypto import CKKSContext, CKKSParameters
from crypto.ckks.bootstrap import BootstrapConfig, plan_for
from crypto.errors import BootstrapPrecisionWarning

# N = 2^12, insecure, for speed: a dense secret (K large, stated about 7 bits at 64 slots) and a sparse one (h = 32)
DENSE = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=8, insecure=True)
SPARSE = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
              hamming_weight=32, insecure=True)


class Stopped(Exception):
    pass


@pytest.fixture
def no_keys(monkeypatch):
    """KeyGenerator replaced by one that stops keygen before any key is made."""
    def stop(*args, **kwargs):
        raise Stopped
    monkeypatch.setattr(crypto.context, "KeyGenerator", stop)


def keygen_warnings(params, bootstrap):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Stopped):
            CKKSContext.keygen(params, bootstrap=bootstrap)
    return [w for w in caught if issubclass(w.category, BootstrapPrecisionWarning)]


def test_a_low_precision_bootstrap_warns_with_its_bits_and_the_preset(no_keys, monkeypatch):
    config = BootstrapConfig(slots=64)
    dense = CKKSParameters.from_literal(DENSE)
    stated = plan_for(dense, config).precision_bits
    assert stated < crypto.context.LOW_BOOTSTRAP_BITS
    caught = keygen_warnings(dense, config)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"{stated:.1f} bits" in message and "N16_BOOT" in message
    assert caught[0].filename == __file__               # points at the caller of keygen
    monkeypatch.setattr(crypto.context, "LOW_BOOTSTRAP_BITS", stated - 0.1)
    assert keygen_warnings(dense, config) == []         # at or above the limit: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Stopped):                      # no bootstrap asked: no plan, no warning
            CKKSContext.keygen(dense)


@pytest.mark.slow
def test_a_sparse_secret_bootstrap_keeps_enough_bits_and_does_not_warn(no_keys):
    config = BootstrapConfig(slots=64)
    sparse = CKKSParameters.from_literal(SPARSE)
    assert plan_for(sparse, config).precision_bits >= crypto.context.LOW_BOOTSTRAP_BITS
    assert keygen_warnings(sparse, config) == []


@pytest.mark.slow
def test_the_stock_n16_preset_warns_and_the_bootstrapping_preset_does_not(no_keys):
    caught = keygen_warnings(CKKSParameters.preset("N16"), True)
    assert len(caught) == 1 and "8.5 bits" in str(caught[0].message) and "'N16_BOOT'" in str(caught[0].message)
    assert keygen_warnings(CKKSParameters.preset("N16_BOOT"), True) == []
