"""The training (and inference) statement's validator: every verifier of a training-step or forward proof
(:func:`verify_forward`, :func:`verify_training_steps`, :func:`verify_training_step` over Ligero or Basefold)
parses its spec through ONE rule, :func:`proofs.layers.training.spec_problem` (the prover's TrainingSpec raises
ModelError from it, the verifiers' :func:`validate_spec` ProofRejected), before anything else: widths, batch, bit
widths, shifts (the learning rate's too), each decomposition within the field's bits, every worst-case
intermediate within (p - 1) / 2, every padded table within MAX_TENSOR_ENTRIES.

A spec handed to a verifier is an object, and an object need not have passed ``__post_init__`` (a subclass, a
pickle, ``object.__setattr__``): the verifiers used to trust it (act_bits = 30 crashed verify_forward with a
ValueError; other fields reached the relations)."""
from __future__ import annotations

import copy
import pickle
import re
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import proofs
from proofs.errors import ModelError, ProofRejected
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.quantize import FIELD_BITS, FIELD_HALF

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
SPEC = T.TrainingSpec((6, 5, 3), batch=3, act_bits=6, weight_bits=6, shift=4, grad_shift=3, grad_bits=8,
                      lr_shift=2, update_bits=8)


def crafted(spec, **changes):
    """A copy of ``spec`` with ``changes`` set behind ``__post_init__``'s back (what a subclass, a pickle from
    older code or ``object.__setattr__`` hands a verifier)."""
    forged = copy.copy(spec)
    for name, value in changes.items():
        object.__setattr__(forged, name, value)
    return forged


def _data(spec=SPEC, seed=1):
    """Weights, inputs and targets within the spec's bit widths."""
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-8, 8, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(spec.num_layers)]
    x = rng.integers(-16, 16, size=(spec.batch, spec.sizes[0]))
    return weights, x, rng.integers(-10, 10, size=(spec.batch, spec.sizes[-1]))


@pytest.fixture(scope="module")
def verifiers():
    """name -> (verify(spec), the verifier's where): an honest inference proof and honest training-step proofs
    over Ligero and Basefold (the package front door), each verified against a given spec."""
    weights, x, y = _data()
    trace, forward = T.training_trace(weights, x, y, SPEC), T.forward_trace(weights, x, SPEC)
    model = S.commit_forward(forward, max_proofs=1)
    forward_proof, output = S.prove_forward(forward, model), S.forward_output(forward)
    ligero = proofs.commit_step(trace, max_proofs=1)
    ligero_proof = proofs.prove_training_step(trace, ligero)
    basefold = proofs.commit_step(trace, params=proofs.basefold_training_params())
    basefold_proof = proofs.prove_training_step(trace, basefold)
    steps = S.CommittedSteps((ligero.weights, ligero.new_weights), (ligero.batch,))
    return {"verify_forward": (lambda spec: S.verify_forward(spec, model, output, forward_proof), "forward proof"),
            "verify_training_step (ligero)": (lambda spec: proofs.verify_training_step(spec, ligero, ligero_proof),
                                              "training proof"),
            "verify_training_steps": (lambda spec: S.verify_training_steps(spec, steps, ligero_proof),
                                      "training proof"),
            "verify_training_step (basefold)": (lambda spec: proofs.verify_training_step(spec, basefold, basefold_proof),
                                                "training proof / Basefold statement")}


def test_honest_specs_verify_on_every_verifier(verifiers):
    """Positive control: the honest spec verifies, and so does the same statement given with a list of widths
    and numpy integers (the validator reads it as the TrainingSpec of plain ints: the same transcript; the old
    verifiers crashed on a numpy int32 act_bits, AttributeError)."""
    numbers = {"sizes": list(SPEC.sizes), "batch": np.int64(SPEC.batch), "act_bits": np.int32(SPEC.act_bits)}
    loose = crafted(SPEC, **numbers)
    assert T.TrainingSpec(**{**SPEC.__dict__, **numbers}) == SPEC  # the prover's spec holds plain ints too
    for verify, _ in verifiers.values():
        verify(SPEC)
        verify(loose)


# --------------------------------------------------------------------------------------- the structure fuzzer
def _half_over(*factors) -> int:
    """The smallest integer n with n * prod(factors) > FIELD_HALF."""
    return FIELD_HALF // int(np.prod(factors)) + 1


def _mutations(spec):
    """(label, changes(k) for k >= 1: one field (or one field pair's sum) beyond its bound, reason pattern)."""
    act, weight, grad = 1 << (spec.act_bits - 1), 1 << (spec.weight_bits - 1), 1 << (spec.grad_bits - 1)
    sizes = spec.sizes

    def size(i, value):
        return lambda k: {"sizes": sizes[:i] + (value(k),) + sizes[i + 1:]}

    out = [("too few layers", lambda k: {"sizes": sizes[:1]}, r"^sizes \(1 widths\)"),
           ("too many layers", lambda k: {"sizes": sizes * (T.MAX_LAYERS + min(k, 64))}, r"^sizes \(\d+ widths\)"),
           ("sizes not a sequence", lambda k: {"sizes": f"{k}"}, r"^sizes \(a str\)"),
           ("empty layer", size(1, lambda k: 1 - k), r"^sizes\[1\]="),
           ("layer too wide", size(0, lambda k: T.MAX_WIDTH + k), r"^sizes\[0\]=.*MAX_WIDTH"),
           ("layer width a float", size(2, lambda k: k + .5), r"^sizes\[2\]="),
           ("layer width a bool", size(1, lambda k: True), r"^sizes\[1\]="),
           ("no batch", lambda k: {"batch": 1 - k}, r"^batch="),
           ("batch too large", lambda k: {"batch": T.MAX_BATCH + k}, r"^batch="),
           ("batch a float", lambda k: {"batch": float(k)}, r"^batch=")]
    for name in ("act_bits", "weight_bits", "grad_bits", "update_bits"):
        out += [(f"{name} too small", lambda k, n=name: {n: 2 - k}, rf"^{name}="),
                (f"{name} too large", lambda k, n=name: {n: T.MAX_BITS + k}, rf"^{name}=")]
    for name in ("shift", "grad_shift", "lr_shift"):
        out += [(f"negative {name}", lambda k, n=name: {n: -k}, rf"^{name}="),
                (f"{name} too large", lambda k, n=name: {n: T.MAX_SHIFT + k}, rf"^{name}=")]
    for shift, bits in (("shift", "act_bits"), ("grad_shift", "grad_bits"), ("lr_shift", "update_bits")):
        out.append((f"{shift} + {bits} beyond the field",
                    lambda k, s=shift, b=bits: {s: T.MAX_SHIFT, b: min(T.MAX_BITS, FIELD_BITS - T.MAX_SHIFT + k)},
                    rf"^{re.escape(f'{shift} + {bits}=')}\d+ exceeds the field's {FIELD_BITS} bits"))
    out += [("Z_0 wraps", size(0, lambda k: _half_over(act, weight) + min(k, 1 << 16)),
             r"worst case \|Z_0\| <= sizes\[0\] \* 2\^\(act_bits-1\) \* 2\^\(weight_bits-1\) = \d+ exceeds half"
             r"|^sizes\[0\]=\d+ must be an int in"),  # narrow bits: the width needed to wrap is past MAX_WIDTH
            ("G_W_0 wraps", lambda k: {"batch": _half_over(grad, act) + min(k, 1 << 19)},
             r"worst case \|G_W_0\| <= batch \* 2\^\(grad_bits-1\) \* 2\^\(act_bits-1\)|^batch=\d+ must be"),
            ("G_A_0 wraps", size(2, lambda k: _half_over(2 * act, weight) + min(k, 1 << 19)),
             r"worst case \|G_A_0\| <= sizes\[2\] \* 2\^act_bits \* 2\^\(weight_bits-1\)|^sizes\[2\]=\d+ must be"),
            ("a weight table too large", lambda k: {"sizes": (4096 + min(k, 4095),) * 2 + sizes[2:]},
             r"sizes\[1\] x sizes\[0\] tensor of \d+ padded entries > \d+ \(MAX_TENSOR_ENTRIES\)")]
    return out


def test_the_mutations_are_out_of_bound_for_the_prover_too():
    """Each mutation is one the prover's TrainingSpec refuses with the same message (the rule is written once)."""
    for label, changes, reason in _mutations(SPEC):
        values = {**{name: getattr(SPEC, name) for name in T.TrainingSpec.__dataclass_fields__}, **changes(1)}
        with pytest.raises(ModelError) as info:
            T.TrainingSpec(**values)
        assert re.search(reason, str(info.value)), (label, info.value)


@FUZZ
@given(data=st.data(), k=st.integers(1, 1 << 20))
def test_every_spec_field_beyond_its_bound_is_refused_by_every_verifier_at_parse(verifiers, data, k):
    """For every mutation (one field beyond its bound, drawn with its overshoot k) and every verifier, the
    verifier raises ProofRejected from the statement's parse (where: '<verifier> / spec'), naming the field and
    the limit; the verifiers before this validator crashed (ValueError) or read the field into the relations."""
    label, changes, reason = data.draw(st.sampled_from(_mutations(SPEC)), label="mutation")
    name = data.draw(st.sampled_from(sorted(verifiers)), label="verifier")
    verify, where = verifiers[name]
    with pytest.raises(ProofRejected) as info:
        verify(crafted(SPEC, **changes(k)))
    assert info.value.where == f"{where} / spec", (label, name, info.value)
    assert re.search(reason, info.value.reason), (label, name, info.value)


def test_a_spec_or_statement_of_another_type_is_refused(verifiers):
    """Not a TrainingSpec (a dict of the same fields), or a statement of another class: ProofRejected, never an
    AttributeError (the Basefold verifier read ``committed.witnesses`` of whatever it was given)."""
    for verify, where in verifiers.values():
        with pytest.raises(ProofRejected, match="expected a TrainingSpec"):
            verify(dict(SPEC.__dict__))
    from proofs.layers import step_basefold as SB
    for bad in (None, "committed", S.CommittedSteps((), ())):
        with pytest.raises(ProofRejected, match="committed|CommittedSteps"):
            SB.verify_step(SPEC, bad, None)
        with pytest.raises(ProofRejected):
            S.verify_forward(SPEC, bad, np.zeros((3, 3), dtype=np.int64), None, None)


@FUZZ
@given(sizes=st.lists(st.integers(-2, (1 << 20) + 2), min_size=1, max_size=4),
       batch=st.integers(-1, (1 << 20) + 1), bits=st.lists(st.integers(0, 26), min_size=4, max_size=4),
       shifts=st.lists(st.integers(-1, 26), min_size=3, max_size=3))
def test_prover_and_verifier_apply_one_rule(sizes, batch, bits, shifts):
    """For random field values, TrainingSpec refuses (ModelError) exactly when validate_spec refuses
    (ProofRejected), with the same message; an accepted spec comes back equal."""
    values = dict(zip(("act_bits", "weight_bits", "grad_bits", "update_bits"), bits),
                  **dict(zip(("shift", "grad_shift", "lr_shift"), shifts)), sizes=tuple(sizes), batch=batch)
    try:
        spec = T.TrainingSpec(**values)
    except ModelError as error:
        with pytest.raises(ProofRejected) as info:
            T.validate_spec(crafted(SPEC, **values))
        assert info.value.reason == str(error)
    else:
        assert T.validate_spec(crafted(SPEC, **values)) == spec


# ---------------------------------------------------------------------------------------------- sizes, bytes
def test_a_spec_declaring_huge_tables_is_refused_before_any_allocation(verifiers):
    """sizes (2^20, 2^20) at batch 2^20 with 2-bit values (every worst case fits: the old TrainingSpec accepted
    it) declares 2^40-entry tables; the prover refuses it, and every verifier refuses it at parse in well under a
    second and a few MB (tracemalloc traces numpy's tables)."""
    huge = {"sizes": (1 << 20, 1 << 20), "batch": 1 << 20, "act_bits": 2, "weight_bits": 2, "grad_bits": 2,
            "update_bits": 2}
    with pytest.raises(ModelError, match="MAX_TENSOR_ENTRIES"):
        T.TrainingSpec(**huge)
    tracemalloc.start()
    start = time.perf_counter()
    for verify, _ in verifiers.values():
        with pytest.raises(ProofRejected, match="MAX_TENSOR_ENTRIES"):
            verify(crafted(SPEC, **huge))
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0 and peak < 4 << 20, (elapsed, peak)


def test_a_pickled_spec_is_checked_when_loaded():
    """The only bytes a spec travels as is a pickle: it is rebuilt through the constructor, so a tampered one is
    refused on load (it used to load silently); an honest one round-trips."""
    assert pickle.loads(pickle.dumps(SPEC)) == SPEC
    with pytest.raises(ModelError, match="lr_shift"):
        pickle.loads(pickle.dumps(crafted(SPEC, lr_shift=-1)))
