"""A cheating prover's sumcheck for negative tests: it proves claims that are false.

The honest :func:`proofs.sumcheck.prove_sumcheck` refuses a claim that differs from the sum of its
terms; a cheater sends the round messages anyway. Patching ``SumcheckProver.claimed_sum`` to echo the
claim turns the honest wrapper into that cheater, so tampered witnesses still yield a proof to reject.
"""
import contextlib
import dataclasses
from unittest import mock

import numpy as np

import proofs.sumcheck as sumcheck_module

_honest = sumcheck_module.prove_sumcheck


def lenient_prove_sumcheck(terms, claim, transcript, label="sumcheck", **options):
    with mock.patch.object(sumcheck_module.SumcheckProver, "claimed_sum", lambda self: np.asarray(claim)):
        return _honest(terms, claim, transcript, label, **options)


@contextlib.contextmanager
def cheating_sumcheck():
    """Within the block the layer provers use the cheating sumcheck."""
    with mock.patch("proofs.layers.matmul.prove_sumcheck", lenient_prove_sumcheck), \
            mock.patch("proofs.layers.relu.prove_sumcheck", lenient_prove_sumcheck):
        yield


def walk(node, rebuild, kind):
    """Every ``kind`` object inside a proof tree (dataclasses and tuples), each with a function that
    returns the whole proof with that object replaced."""
    if isinstance(node, kind):
        yield node, rebuild
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for item in dataclasses.fields(node):
            yield from walk(getattr(node, item.name), lambda new, item=item: rebuild(
                dataclasses.replace(node, **{item.name: new})), kind)
    elif isinstance(node, tuple):
        for i, child in enumerate(node):
            yield from walk(child, lambda new, i=i: rebuild(node[:i] + (new,) + node[i + 1:]), kind)
