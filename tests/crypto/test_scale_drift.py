"""Scale drift: parameters whose natural scales stray from Δ are refused by a plan, and a bootstrap refuses inputs
whose scale is above 2Δ (ModRaise's lift is stated for coefficients up to Δ).

Natural scales s_L = Δ, s_(ℓ-1) = s_ℓ²/q_ℓ: a level whose primes multiply to 2^31 under Δ = 2^27 moves the scale by
4 bits, doubling at every level below (``CKKSParameters.scale_drift_bits``); the plan stated 14.1 bits where the
result was off by 0.30."""
import math

import numpy as np
import pytest

from crypto import CKKSContext
from crypto.ckks.bootstrap import BootstrapConfig, Bootstrapper, natural_scales, plan_for
from crypto.errors import ParameterError, ScaleError
from crypto.params import CKKSParameters
from tensor_ops.inference import Client
from tensor_ops.model_plan import MAX_SCALE_DRIFT_BITS, ModelPlan, precision_bits
from tensor_ops.nn import Linear, Sequential, Square

#: N = 2^13, Δ = 2^27 on 31-bit primes (128-bit: log2(QP) = 217 <= 218): the natural scales drift by 51 bits
DRIFTING = dict(log_n=13, log_q=[[31]] + [[31]] * 4, log_p=[31, 31], log_scale=27)
#: tests/crypto/test_bootstrap.py's Δ = 2^60 ring: two 30-bit primes fall short of 2^60, the scale climbs going down
BOOT_60 = dict(log_n=12, log_q=[[23, 23, 23]] + [[30, 30]] * 18, log_p=[31] * 7, log_scale=60, dnum=7, insecure=True)


def _model():
    rng = np.random.default_rng(0)
    return Sequential([Linear(rng.normal(0, 0.5, (3, 4))), Square(), Linear(rng.normal(0, 0.5, (2, 3)))],
                      input_shape=(4,))


def test_drift_of_the_presets_is_negligible_and_of_a_bad_literal_is_not():
    for name in ("N13", "N14", "N15", "N16", "N16_BOOT", "TOY"):
        assert CKKSParameters.preset(name).scale_drift_bits < 0.05, name
    drifting = CKKSParameters.from_literal(DRIFTING)
    log_natural = [math.log2(s) for s in natural_scales(drifting) if s > 0]
    assert drifting.scale_drift_bits > 50 and max(abs(b - 27) for b in log_natural) > 4


def test_a_plan_refuses_drifting_parameters():
    drifting = CKKSParameters.from_literal(DRIFTING)
    with pytest.raises(ParameterError, match=f"drift by .* bits .*MAX_SCALE_DRIFT_BITS={MAX_SCALE_DRIFT_BITS}"):
        _model().plan(params=drifting)
    with pytest.raises(ParameterError, match="drift"):
        Client(drifting, model=_model(), seed=1)
    plan = _model().plan(params="N14").to_dict()                   # a server's plan rewritten to drift
    plan["params"] = drifting.to_dict()
    with pytest.raises(ParameterError, match="drift"):
        ModelPlan.from_dict(plan)


def test_a_plan_at_the_presets_states_its_precision_with_the_drift():
    """Positive control: the presets plan as before, the precision lessened by their (tiny) drift only."""
    params = CKKSParameters.preset("N14")
    plan = _model().plan(params=params)
    noise = math.log2(4.0 * math.sqrt(params.n * (1 + 2 * params.n / 3) / 12))
    assert plan.precision_bits == precision_bits(params) == pytest.approx(params.log_scale - noise, abs=1e-3)
    assert plan.precision_bits <= params.log_scale - noise


@pytest.fixture(scope="module")
def boot_60():
    params = CKKSParameters.from_literal(BOOT_60)
    ctx = CKKSContext.keygen(params, seed=3)                     # no bootstrap keys: the check comes first
    plan = plan_for(params, BootstrapConfig(slots=64, arcsin=False, encapsulation=32))
    return params, ctx, Bootstrapper(ctx.evaluator, plan)


def test_bootstrap_refuses_a_scale_modraise_cannot_lift(boot_60):
    """The natural scale at level 3 of the Δ = 2^60 ring is 2^73: a second bootstrap there kept 0.55 bits."""
    params, ctx, boot = boot_60
    scale = natural_scales(params)[3]
    assert math.log2(scale) > params.log_scale + 12
    x = np.random.default_rng(1).uniform(-1, 1, 64) * 1e-3
    with pytest.raises(ScaleError, match=r"bootstrap input scale 2\^7\d\.\d\d exceeds 2\^61"):
        boot.bootstrap(ctx.encrypt(x, level=3, scale=scale))
    with pytest.raises(ScaleError, match="exceeds"):
        boot.check_input_scale(2.0 ** (params.log_scale + 1) * 1.01)
    boot.check_input_scale(1.5 * params.scale)                   # positive control: within 2Δ (bootstrapped in
    boot.check_input_scale(2.0 ** (params.log_scale + 1))        # tests/crypto/test_bootstrap.py at 1.5Δ)


@pytest.mark.parametrize("depth", [10, 14, 20])
def test_single_prime_levels_track_their_scale_at_depth(depth):
    """Single 30-bit-prime levels whose target lies above 2^30 take the word-size primes just above it, so a
    deep chain stays within hundredths of a bit of 2^30 (all 30-bit primes below 2^30 drifted 4 bits at
    depth 10 and 277 at depth 16 at N = 2^15), and deep models still find parameters."""
    params = CKKSParameters.from_literal(dict(log_n=15, log_q=[[30, 30]] + [[30]] * depth, log_p=[30, 30],
                                              log_scale=30, dnum=depth + 2))
    assert params.scale_drift_bits < 0.05
    assert all(q < 2 ** 31 for level in params.q_levels for q in level)
    from tensor_ops.model_plan import choose_parameters
    assert choose_parameters(depth).scale_drift_bits < 0.05
