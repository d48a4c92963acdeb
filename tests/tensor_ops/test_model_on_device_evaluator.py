"""A model plan runs on either CKKS evaluator (crypto.ckks.evaluator_protocol.CKKSEvaluator): the packed server
path (``EncryptedModel`` / ``Server``) calls only the protocol's operations, so the host evaluator and the device
evaluator (``crypto.ckks.jax_device.DeviceEvaluator``, CPU XLA here) give the same reply, byte for byte (the
device runs the host's arithmetic limb for limb), and the decrypted outputs equal the plain forward pass within
CKKS precision.

Insecure test ring (tests only): N = 2^10, five levels of 51-bit primes, scale 2^50.  The device tests are
marked slow: the first evaluation compiles each (operation, level) once, 30-50 s of XLA on two shared cores.
"""
import time

import numpy as np
import pytest

from crypto import CKKSContext
from crypto.ckks.evaluator_protocol import CKKSEvaluator
from crypto.errors import ContextMismatchError, ParameterError
from tensor_ops.inference import Client, EncryptedModel, Server, model_evaluator, unpack_message
from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, Poly, Sequential, Square

RING = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 5, log_p=[30, 30, 30], log_scale=50, dnum=4, insecure=True)
#: decrypted outputs against the plain forward pass: far looser than the ~2^-40 one operation keeps at scale 2^50
TOLERANCE = 2.0**-20
#: these small plans state no output range (decrypt warns so); the outputs are checked against the reference here
pytestmark = pytest.mark.filterwarnings("ignore:the plan states no output range")
PROTOCOL = {name for name in (*vars(CKKSEvaluator), *CKKSEvaluator.__annotations__) if not name.startswith("_")}


def mlp(seed=0):
    rng = np.random.default_rng(seed)
    return Sequential([Linear(rng.normal(0, .4, (8, 6)), rng.normal(0, .1, 8)), Poly("gelu", 3, (-3, 3)),
                       Linear(rng.normal(0, .4, (3, 8)), rng.normal(0, .1, 3))], input_shape=(6,))


def cnn(seed=1):
    rng = np.random.default_rng(seed)
    return Sequential([Conv2d(rng.normal(0, .3, (2, 1, 3, 3)), rng.normal(0, .1, 2), padding=1), Square(),
                       AvgPool2d(2), Flatten(), Linear(rng.normal(0, .3, (3, 8)), rng.normal(0, .1, 3))],
                      input_shape=(1, 4, 4))


class ProtocolOnly:
    """An inner evaluator seen through the protocol alone: any other attribute (``mul_plain_sum``,
    ``rotate_sum``, private helpers) raises AttributeError, so a model path that needed one would fail; counts
    the calls."""

    def __init__(self, inner):
        self._inner, self.calls = inner, {}

    def __getattr__(self, name):
        if name not in PROTOCOL:
            raise AttributeError(f"{name} is not part of the CKKSEvaluator protocol")
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return value(*args, **kwargs)
        return call


def _served(model, seed):
    plan = model.plan(params=RING)
    client = Client(plan=plan, seed=seed, allow_insecure=True)
    x = np.random.default_rng(seed).uniform(-1, 1, (2, *model.input_shape))
    return client, client.encrypt(x), model.forward(x)


@pytest.mark.parametrize("make", [mlp, cnn])
def test_the_model_path_needs_only_the_protocol(make):
    """The same reply bytes through a protocol-only view of the host evaluator (no fused or hoisted extras)."""
    model = make()
    client, request, want = _served(model, 3)
    context = CKKSContext.from_bytes(client.public_context())
    reference = Server(model, context).evaluate(request)
    view = ProtocolOnly(context.evaluator)
    assert isinstance(view, CKKSEvaluator)
    reply = Server(model, context, evaluator=view).evaluate(request)
    assert reply == reference
    assert {"from_host", "to_host", "rotate_hoisted", "mul", "add", "rescale", "mul_rescale"} <= set(view.calls)
    assert np.abs(client.decrypt(reply) - want).max() < TOLERANCE


def test_an_evaluator_of_other_keys_or_no_evaluator_is_refused():
    model = mlp()
    client, _, _ = _served(model, 4)
    other, _, _ = _served(model, 5)
    context = CKKSContext.from_bytes(client.public_context())
    with pytest.raises(ContextMismatchError, match="key set"):
        Server(model, context, evaluator=CKKSContext.from_bytes(other.public_context()).evaluator)
    with pytest.raises(ParameterError, match="evaluator must be a CKKSEvaluator"):
        Server(model, context, evaluator=42)
    with pytest.raises(ParameterError, match="returned dict"):
        model_evaluator(context, lambda ctx: {})
    assert model_evaluator(context) is context.evaluator


# -- on the device (CPU XLA) -------------------------------------------------------------------------------

def _device_case(model, seed, through_server: bool):
    """Host and device results for one request: equal bytes (twice: the second call runs compiled), outputs
    equal the plain forward within CKKS precision; returns (host seconds, device seconds of both calls)."""
    pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cpu]'): the device path is optional")
    from crypto.ckks.jax_device import DeviceEvaluator
    from crypto.rlwe import Ciphertext
    client, request, want = _served(model, seed)
    context = CKKSContext.from_bytes(client.public_context())
    host = Server(model, context)
    start = time.perf_counter()
    reference = host.evaluate(request)
    host_s = time.perf_counter() - start
    assert np.abs(client.decrypt(reference) - want).max() < TOLERANCE
    if through_server:      # a factory: the server makes the device evaluator from the context it received
        device = Server(model, context, evaluator=DeviceEvaluator)
        run, expected = device.evaluate, reference
    else:                   # an instance, handed to EncryptedModel: a host ciphertext in, a host ciphertext out
        engine = EncryptedModel(model, host.plan, context, evaluator=DeviceEvaluator(context))
        ct = Ciphertext.from_bytes(unpack_message(request, "request")[1][0], context)
        expected = EncryptedModel(model, host.plan, context).forward(ct).to_bytes()
        assert expected == unpack_message(reference, "reply")[1][0]

        def run(_):
            return engine.forward(ct).to_bytes()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        got = run(request)
        times.append(time.perf_counter() - start)
        assert got == expected
    return host_s, *times


@pytest.mark.slow   # ~40 s: the XLA compilations of the first device evaluation
def test_mlp_with_a_polynomial_activation_on_the_device_equals_the_host():
    _device_case(mlp(), 6, through_server=True)


@pytest.mark.slow   # ~35 s
def test_cnn_on_the_device_equals_the_host():
    _device_case(cnn(), 7, through_server=False)


@pytest.mark.slow   # ~9 min on 2 shared cores: CPU XLA compiles the bootstrap's functions (~7 min), then runs it
def test_a_plan_that_bootstraps_runs_on_the_device():
    """The model path's bootstrap on the device (``DeviceEvaluator.bootstrap``, the host pipeline limb for limb):
    test_model_bootstrap's deep model (one bootstrap, its insecure N = 2^12 sparse-secret ring) gives the host's
    reply byte for byte."""
    pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cpu]'): the device path is optional")
    from crypto.ckks.jax_device import DeviceEvaluator
    from .test_model_bootstrap import deep_model, deep_plan
    model, plan = deep_model(), deep_plan()
    assert plan.bootstraps
    client = Client(plan=plan, seed=2, allow_insecure=True)
    x = np.random.default_rng(5).uniform(-1, 1, (3, model.input_shape[0]))
    request = client.encrypt(x)
    reference = Server(model, client.public_context()).evaluate(request)
    assert Server(model, client.public_context(), evaluator=DeviceEvaluator).evaluate(request) == reference
    assert np.abs(client.decrypt(reference) - model.forward(x)).max() < 2.0 ** -plan.bootstrap_plan.precision_bits
