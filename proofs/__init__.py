"""Sumcheck proofs of quantized neural networks: field, transcript, MLE, sumcheck, commitment, layers.

The statement: the model owner commits to the weights once; a proof shows y = model(x) for a
public input batch x under the committed weights (zkDL, Sun-Li-Zhang, made non-interactive)::

    network = Network([Linear(w0, b0), ReLU(), Linear(w1, b1)], frac_bits=8)  # or Network(QuantizedMLP)
    commitment = network.commitment                 # ModelCommitment, bytes(commitment) to publish
    proof = network.prove(x)                        # x float (quantized at 2^frac_bits) or integer
    verdict = verify_network(commitment, x, proof)  # a truthy Verdict (.output, .soundness_bits), or ProofRejected

Proofs are zero knowledge by default (the weights stay private); ``Network(model, zk=False)`` is the plain
protocol, whose proofs reveal the weights.

Scripts: ``python -m proofs commit | prove | verify`` (:mod:`proofs.cli`). ``proofs.commit`` is the
commitment module and, called, its ``commit`` function (also ``proofs.commit_values``).
Never imports ``crypto`` or ``tensor_ops``.
"""
from typing import TYPE_CHECKING

from hezk._lazy import lazy_package

# the names of the block below are imported on first use, not now:
# ``python -m proofs --help`` loads no prover
lazy_package(__name__)

if TYPE_CHECKING:  # static tools (and lazy_package, which reads this block) see the imports
    from .errors import FieldError, ModelError, ProofError, ProofRejected
    from .field import EXT_BITS, P
    from .transcript import Transcript
    from .mle import bind_high, eq_eval, eq_table, fix_variable, mle_evaluate, pad_to_pow2
    from .sumcheck import (SubClaim, SumcheckProof, SumcheckProver, SumcheckVerifier, combine_evaluations,
                           prove_sumcheck, verify_sumcheck)
    from .commit import (Commitment, CommitmentWitness, CommitParams, OpeningProof, open_batch, open_commitment,
                         verify_batch, verify_opening)
    from .commit import commit as commit_values
    from . import commit  # the module, callable as the commit function (see proofs.commit._CallableModule)
    from .quantize import (QuantizedLayer, QuantizedMLP, check_field, dequantize_output, forward_int, layer_bounds,
                           quantize_fixed_point, quantize_input, quantize_int8)
    from .model import load_model, save_model
    from .layers.network import ModelCommitment, Network, NetworkProof, read_proof, verify_network
    from .layers.network_zk import HidingNetworkProof
    from .layers.spec import Linear, ReLU, build_model
    from .zk import (HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof, hiding_commit,
                     open_functionals, open_points, prove_zk_sumcheck, simulate_zk_sumcheck, verify_functionals,
                     verify_points, verify_zk_sumcheck)
    from .layers.training import (TrainingSpec, TrainingTrace, fit_spec, forward_trace, training_step,
                                  training_trace)
    from .layers.step_proof import (CommittedModel, CommittedSteps, CommittedTensors, TrainingProof,
                                    commit_forward, commit_steps, forward_output, prove_forward,
                                    prove_training_steps, verify_forward, verify_training_steps)
    from .layers.step_proof import soundness_bits as training_soundness_bits
    from .layers.training_api import (basefold_training_params, commit_step, prove_training_step,
                                      verify_training_step)
    from .layers.contraction import (ContractionProof, PatchProof, contraction_claim_reduction, parse_einsum,
                                     patch_claim_reduction, verify_contraction, verify_patches)
    from .verdict import PRIMITIVE_VERIFIERS, Verdict

__all__ = [
    "ProofError", "ProofRejected", "ModelError", "FieldError",
    "P", "EXT_BITS", "Transcript",
    "bind_high", "eq_eval", "eq_table", "fix_variable", "mle_evaluate", "pad_to_pow2",
    "SubClaim", "SumcheckProof", "SumcheckProver", "SumcheckVerifier", "combine_evaluations",
    "prove_sumcheck", "verify_sumcheck",
    "Commitment", "CommitmentWitness", "CommitParams", "OpeningProof", "commit", "commit_values", "open_batch",
    "open_commitment", "verify_batch", "verify_opening",
]

__all__ += [
    "QuantizedLayer", "QuantizedMLP", "check_field", "dequantize_output", "forward_int", "layer_bounds",
    "quantize_fixed_point", "quantize_input", "quantize_int8", "load_model", "save_model",
    "ModelCommitment", "Network", "NetworkProof", "HidingNetworkProof", "read_proof", "verify_network", "Linear",
    "ReLU", "build_model",
]

__all__ += [
    "HidingCommitment", "HidingOpening", "HidingParams", "ZKSumcheckProof", "hiding_commit", "open_functionals",
    "open_points", "prove_zk_sumcheck", "simulate_zk_sumcheck", "verify_functionals", "verify_points",
    "verify_zk_sumcheck",
    "CommittedSteps", "CommittedTensors", "TrainingProof", "TrainingSpec", "TrainingTrace", "commit_step",
    "commit_steps", "fit_spec", "prove_training_step", "prove_training_steps", "training_step", "training_trace",
    "verify_training_step", "verify_training_steps", "CommittedModel", "commit_forward", "forward_output",
    "forward_trace", "prove_forward", "verify_forward", "training_soundness_bits", "basefold_training_params",
]

__all__ += [
    "ContractionProof", "PatchProof", "contraction_claim_reduction", "parse_einsum", "patch_claim_reduction",
    "verify_contraction", "verify_patches", "Verdict", "PRIMITIVE_VERIFIERS",
]

from importlib.metadata import PackageNotFoundError as _NotInstalled, version as _version  # noqa: E402

try:
    __version__ = _version("hezk")  # one source: the version in pyproject.toml
except _NotInstalled:  # a source tree that was never installed
    __version__ = "0+unknown"
