"""The graph path of ``python -m proofs commit | prove | verify`` (issue 13): models that are not a ReLU MLP chain
(convolutions, pools, residual adds, BatchNormalization, reshapes) are quantized from calibration data
(:mod:`proofs.graph_quantize`) and proved by :mod:`proofs.layers.graph`.

``commit`` writes a :class:`HidingGraphCommitment` (default: the weights stay private, K hiding copies, a SECRET
prover state beside it) or with ``--public-weights`` a :class:`GraphCommitment` (the quantized structure and the
weights commitment), and reports
the mean and max error of the integer model against the float model on the calibration data; ``prove``
re-quantizes the model file with the committed scales (and refuses a commitment of another model);
``verify`` writes the dequantized proven output with ``--output`` when it accepts. Each ``prove`` reserves its
copy in the prover state under a lock before proving (:mod:`proofs.layers.prover_state`): never copy or restore a
prover state.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import hezk.model

from . import inference
from .basefold import statistical_bits
from .errors import ModelError, ProofRejected
from .graph_quantize import quantize_graph
from .layers.graph import GraphCommitment, GraphNetwork
from .layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, graph_basefold_params
from .pcs.choice import choose_scheme
from .progress import progress_bar
from .proof_format import record_kind

CALIBRATION_SAMPLES = 64


class GraphInputError(ModelError):
    """An unreadable or non-numeric input file (a usage error, exit 2)."""


def soundness_text(bits: float, label: str = "proven", statistical: float | None = None) -> str:
    """The soundness figure with what it means: per attempt, so grinding 2^k Fiat-Shamir hashes gives 2^(k - bits),
    and what it rests on (``label``: "proven", or "conjectured" for Basefold's conjectured parameters); with
    ``statistical`` (the figure without the proof's own grinding, :func:`proofs.basefold.statistical_bits`), the
    two parts apart."""
    text = f"{label} soundness {bits:.1f} bits per attempt (grinding 2^k hashes: 2^(k-{bits:.1f}))"
    if statistical is not None:
        text += f": {statistical:.1f} statistical + {bits - statistical:.1f} from the proof's own grinding"
    return text


def figure_text(commitment, batch: int, **options) -> str:
    """:func:`soundness_text` of ``commitment.soundness_bits(batch, **options)``, its statistical part apart."""
    bits = commitment.soundness_bits(batch, **options)
    statistical = statistical_bits(commitment.soundness_bits, batch, **options)
    return soundness_text(bits, getattr(commitment, "soundness_label", "proven"), statistical)


def is_relu_mlp(graph) -> bool:
    """Whether the MLP proof proves ``graph`` (a :class:`hezk.model.Graph`): a chain of dense layers with biases
    and ReLU (:func:`proofs.model.graph_layers`); every other model is proven by the graph proof. The command
    line and :func:`hezk.commit` send such a model to the MLP proof unless its input is to be hidden."""
    from .model import graph_layers

    try:
        graph_layers(graph)
    except ModelError:
        return False
    return True


def graph_model(path):
    """The model's :class:`hezk.model.Graph` when the graph path proves it (anything but a ReLU MLP chain, which
    the MLP path proves); None when the MLP path should read the file (and report its own errors)."""
    try:
        graph = hezk.model.load(path)
    except (hezk.model.ModelFileError, OSError, ValueError):
        return None
    return None if is_relu_mlp(graph) else graph


def mlp_error_report(model, graph, samples) -> dict:
    """The MLP proof's quantized model (a QuantizedMLP) against the float ``graph`` on ``samples`` (float inputs
    within its input bound, batch first), as :meth:`QuantizedGraph.error_report` reports the graph proof's:
    mean and max |proven output - float output| (dequantized), the float output's largest magnitude and the
    argmax agreement."""
    from .quantize import dequantize_output, forward_int, quantize_input

    x = np.asarray(samples, dtype=np.float64)
    flat = x.reshape(len(x), -1)
    reference = graph.forward(x).reshape(len(x), -1)
    proven = dequantize_output(model, forward_int(model, quantize_input(model, flat))).reshape(len(x), -1)
    error = np.abs(proven - reference)
    return {"mean_error": float(error.mean()), "max_error": float(error.max()),
            "output_magnitude": float(np.abs(reference).max()),
            "argmax_agreement": float(np.mean(np.argmax(proven, 1) == np.argmax(reference, 1)))}


def report_text(report: dict, source: str) -> str:
    """One line of an error report (:func:`mlp_error_report`, ``QuantizedGraph.error_report``) on ``source``."""
    return (f"proven output vs the float model on {source}: mean error {report['mean_error']:.4g}, max error "
            f"{report['max_error']:.4g} (largest |output| {report['output_magnitude']:.4g}, argmax agreement "
            f"{100 * report['argmax_agreement']:.1f}%)")


def load_array(path: str, what: str = "input") -> np.ndarray:
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise GraphInputError(f"{what} file {path!r} is not a readable .npy array: {error}") from None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "iuf":
        raise GraphInputError(f"{what} file {path!r} must hold one array of integers or floats")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise GraphInputError(f"{what} file {path!r} holds NaN or infinite values")
    return x


def _calibration(args, graph):
    if getattr(args, "calibration", None):
        return load_array(args.calibration, "calibration"), f"the calibration data {args.calibration}"
    rng = np.random.default_rng(0)
    return (rng.uniform(-1.0, 1.0, (CALIBRATION_SAMPLES, *graph.input_shape)),
            f"{CALIBRATION_SAMPLES} seeded uniform [-1, 1] inputs (pass --calibration inputs.npy for your data)")


def parsed_back(commitment) -> bytes:
    """The commitment's bytes after parsing them back as every verifier does (the statement's validator):
    ModelError naming the layer or op and the field when a verifier would refuse them, before anything is
    written."""
    data = commitment.to_bytes()
    try:
        type(commitment).from_bytes(data)
    except ProofRejected as rejection:
        raise ModelError(f"the quantized model is a statement every verifier refuses ({rejection}): nothing was "
                         f"written; re-quantize with fewer bits (frac_bits, act_bits, weight_bits) or a smaller "
                         f"input bound") from None
    return data


def commit(args, graph) -> int:
    hiding = not args.public_weights
    if hiding and args.state is None and args.out is None:  # before any work or file
        raise ModelError("a hiding commitment writes a SECRET prover state: name its path with --state PATH "
                         "(or name the commitment with --out PATH: the state then goes to PATH.state)")
    calibration, source = _calibration(args, graph)
    q = quantize_graph(graph, calibration, act_bits=getattr(args, "act_bits", 12),
                       weight_bits=getattr(args, "weight_bits", 8))
    scheme = choose_scheme(getattr(args, "scheme", None), strategy="graph", hiding=hiding)  # auto: ligero
    if scheme == "basefold" and not hiding:
        raise ModelError("--scheme basefold with --public-weights: graph models commit their public weights with "
                         "ligero (hiding graph proofs take --scheme basefold)")
    params = graph_basefold_params(q) if scheme == "basefold" else None
    progress = None if getattr(args, "quiet", False) else progress_bar("committing")
    network = HidingGraphNetwork(q, params=params, max_proofs=args.max_proofs, progress=progress) if hiding \
        else GraphNetwork(q, progress=progress)
    out = args.out or "c.bin"
    data = parsed_back(network.commitment)
    with open(out, "wb") as handle:
        handle.write(data)
    report = q.error_report(graph, calibration)
    print(f"committed a graph of {len(q.ops)} proven ops, {q.num_parameters} parameters (input scale "
          f"2^{q.input_frac}, output scale 2^{q.output_frac}) -> {out} ({len(data)} bytes)")
    print(report_text(report, source))
    if hiding:
        state = args.state if args.state is not None else f"{out}.state"
        network.save_state(state)
        print(f"hiding commitment for {args.max_proofs} zero-knowledge proofs, model digest {q.digest.hex()}; "
              f"secret prover state -> {state} (keep it private)")
    else:
        print(f"PUBLIC WEIGHTS: proofs reveal every weight; model digest {q.digest.hex()}")
    return 0


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def read_graph_commitment(data: bytes):
    """A GraphCommitment or a HidingGraphCommitment, by its record kind (ProofRejected otherwise)."""
    if record_kind(data) == HidingGraphCommitment.KIND:
        return HidingGraphCommitment.from_bytes(data)
    return GraphCommitment.from_bytes(data)


def prover(args, graph):
    """The graph prover of ``--model`` under ``--commitment`` (:func:`proofs.inference.graph_prover`: a
    GraphNetwork, or a HidingGraphNetwork read from its ``--state``); ModelError for a commitment of another model,
    a missing state, or ``--private-input`` with a public-weights commitment."""
    try:
        data = _read(args.commitment)
    except OSError as error:
        raise ModelError(f"commitment {args.commitment!r} is not a graph commitment: {error}") from None
    state = args.state if args.state is not None else f"{args.commitment}.state"
    network = inference.graph_prover(graph, data, state, names=(f"the commitment {args.commitment!r}",
                                                               repr(args.model)))
    if getattr(args, "private_input", False) and not network.commitment.zk:
        raise ModelError("--private-input needs a hiding commitment (commit without --public-weights): a public-"
                         "weights proof states its input")
    return network


def prove(args, graph) -> int:
    network = prover(args, graph)
    q = network.qgraph
    x = load_array(args.input)
    start = time.perf_counter()
    progress = None if args.quiet else progress_bar("proving")
    private = getattr(args, "private_input", False)
    proof = network.prove(x, progress, private_input=True) if private else network.prove(x, progress)
    elapsed = time.perf_counter() - start  # the copy was reserved in the state's journal before it was used
    data = proof.to_bytes()
    with open(args.out, "wb") as handle:
        handle.write(data)
    soundness = figure_text(network.commitment, len(proof.output), **({"private_input": True} if private else {}))
    mode = f"zero knowledge, {network.proofs_left} proofs left" if network.commitment.zk else "PUBLIC WEIGHTS"
    print(f"proved in {elapsed:.2f}s -> {args.out} ({len(data)} bytes, {mode}, {soundness})")
    _print(q.dequantize(proof.output), q.output_frac)
    return 0


def _print(values, frac, stream=None) -> None:
    with np.printoptions(precision=4, suppress=True, threshold=40):
        print(f"output (batch {values.shape[0]}, dequantized by 2^-{frac}):\n{values}", file=stream)


def verify(args, commitment_bytes: bytes) -> int:
    try:
        x = None if getattr(args, "private_input", False) else load_array(args.input)
        commitment = read_graph_commitment(commitment_bytes)
        if x is None and not commitment.zk:
            raise GraphInputError("--private-input: a public-weights graph proof states its input (pass --input)")
        output = inference.verify(commitment, x, _read(args.proof)).output  # the one entry point
    except GraphInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ProofRejected as error:
        print("reject")
        print(f"reject: {error}", file=sys.stderr)
        return 1
    q = commitment.structure
    values = q.dequantize(output)
    if getattr(args, "output", None):  # a batch given without the file's unit axis gets outputs without it too
        unit = x is not None and hezk.model.input_form(x.shape, q.input_shape) == "unit"
        np.save(args.output, hezk.model.in_form(values, "unit") if unit else values)
    print("accept")
    mode = "zero knowledge" if commitment.zk else "public weights"
    soundness = figure_text(commitment, len(output), **({"private_input": True} if x is None else {}))
    print(f"accept ({mode}{', private input' if x is None else ''}, {soundness})", file=sys.stderr)
    _print(np.atleast_2d(values.reshape(len(output), -1)), q.output_frac, sys.stderr)
    return 0

