"""Published precision figures say which they are: random slots or the worst case (the two differ by bits).

A bootstrap's precision on uniform random slots (20.5 bits for N16_BOOT) and its stated worst case (14.3 bits,
a constant input) are different claims; every place that prints or publishes one names which it is.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _sentences_with_precision(text: str):
    """Sentences of ``text`` stating a precision ``N bits`` about a bootstrap or a decryption (not soundness,
    security or sizes in bits)."""
    for sentence in re.split(r"(?<=[.;])\s+", text.replace("\n", " ")):
        if re.search(r"\d+(\.\d+)? bits", sentence) and re.search(r"bootstrap", sentence, re.I) \
                and not re.search(r"soundness|security|128-bit|statistical|grinding", sentence, re.I):
            yield sentence


def test_readme_bootstrap_precision_names_random_slots_and_worst_case():
    sentences = list(_sentences_with_precision((ROOT / "README.md").read_text()))
    assert sentences, "the README states the bootstrap's precision somewhere"
    for sentence in sentences:
        assert "random slots" in sentence or "worst case" in sentence, sentence


def test_the_bootstrap_benchmark_prints_both_figures():
    source = (ROOT / "benchmarks" / "bootstrap.py").read_text()
    assert "bits on random slots" in source and "bits worst case" in source
    assert "worst_bits" in source  # measured on the worst-case input, not only stated


def test_the_bootstrap_plan_states_both():
    from crypto import CKKSParameters
    from crypto.ckks.bootstrap import BootstrapConfig, BootstrapPlan

    plan = BootstrapPlan(CKKSParameters.preset("N16_BOOT"), BootstrapConfig(arcsin=False))
    assert plan.noise_bits >= plan.precision_bits      # random slots at least as good as the worst case
    assert "for random slots" in repr(plan) and "precision=" in repr(plan)
