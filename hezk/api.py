"""One-liners for both halves, from the model you bring (an ONNX or hezk ``.npz`` file, ONNX bytes, a
``torch.nn.Module``, or a :class:`hezk.model.Graph`), over the objects the command lines use::

    model = hezk.compile(net, calibration=x)          # encrypted inference: fitted, planned (print(model.plan))
    result = model.infer(x)                           # encrypt -> evaluate encrypted -> decrypt, here
    prover = hezk.commit(net, calibration=x)          # proofs: weights committed, hidden; publish prover.commitment
    proof = prover.prove(x)                           # bytes (or hezk.prove(prover, x))
    hezk.verify(prover.commitment, x, proof)          # a Verified result (truthy), or ProofRejected
    proofs = hezk.prove(prover, xs, per_proof=4)      # a batch: a list of proofs, one hiding copy each
    hezk.verify(prover.commitment, xs, proofs, per_proof=4)   # .output: every proof's, stacked; .parts

Underneath: :func:`tensor_ops.nn.from_graph` (activations as polynomials fitted on the calibration inputs),
:class:`tensor_ops.Client` / :class:`tensor_ops.Server` (``hezk infer``); :func:`proofs.graph_quantize.quantize_graph`
(scales from the calibration inputs), :class:`proofs.layers.graph_zk.HidingGraphNetwork` (``hezk commit | prove``)
and :func:`proofs.inference.verify` (``hezk verify``: the commitment's kind picks the proof); batches through
:mod:`proofs.batch` (``dask``: tasks on dask.distributed). The facade floor: it imports both engines,
and no engine or foundation imports it.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

import hezk.model
from hezk.model.torch_export import from_torch, is_torch_module
from proofs.verdict import Verdict

__all__ = ["CompiledModel", "Inference", "Prover", "Verified", "as_graph", "commit", "compile", "prove", "verify"]

#: calibration inputs drawn when none are given (as ``hezk commit`` does): seeded uniform in [-1, 1]
DEFAULT_CALIBRATION_SAMPLES = 64


def _array(x, name: str) -> np.ndarray:
    """``x`` as a numpy array (a torch tensor detached first); ModelFileError naming ``name`` if it is none."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    try:
        array = np.asarray(x)
    except Exception as error:  # noqa: BLE001 (whatever numpy refuses to read)
        raise hezk.model.ModelFileError(f"{name} is not an array ({type(x).__name__}): {error}") from None
    if array.dtype.kind not in "iuf" or array.size == 0:
        raise hezk.model.ModelFileError(f"{name} must be a non-empty array of numbers, got dtype {array.dtype} and "
                                        f"shape {array.shape}")
    return array


def _onnx_proto(value) -> bool:
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(value, onnx.ModelProto)


def as_graph(model, *, example_input=None, input_shape=None) -> hezk.model.Graph:
    """The :class:`hezk.model.Graph` of ``model``: a Graph, a :class:`CompiledModel` or :class:`Prover` (its
    graph), a path to an ONNX or hezk ``.npz`` file, ONNX bytes or ``onnx.ModelProto``, or a ``torch.nn.Module``
    (exported by :func:`hezk.from_torch` on ``example_input``, or on zeros of ``(1, *input_shape)``).
    ``input_shape``: the sample shape, for a file that does not state it. ModelFileError otherwise."""
    if isinstance(model, hezk.model.Graph):
        return model
    if isinstance(model, (CompiledModel, Prover)):
        return model.graph
    if isinstance(model, (str, os.PathLike)):
        return hezk.model.load(model, input_shape)
    if isinstance(model, (bytes, bytearray, memoryview)) or _onnx_proto(model):
        return hezk.model.read_onnx(bytes(model) if not _onnx_proto(model) else model, input_shape)
    if is_torch_module(model):
        if example_input is None:
            if input_shape is None:
                raise hezk.model.ModelFileError("a torch module is traced on an example: pass calibration= (inputs, "
                                                "batch first) or input_shape= (the shape of one sample)")
            example_input = np.zeros((1, *input_shape), dtype=np.float32)
        return from_torch(model, example_input, input_shape=input_shape)
    raise hezk.model.ModelFileError(f"model must be a path to an ONNX or .npz file, ONNX bytes, an onnx.ModelProto, "
                                    f"a torch.nn.Module or a hezk.model.Graph, got {type(model).__name__}")


def _graph_and_samples(model, calibration, input_shape):
    """(graph, calibration as float64 (n, *input_shape) or None); one sample is taken as a batch of one."""
    samples = None if calibration is None else _array(calibration, "calibration")
    example = None if samples is None else samples[:1]
    graph = as_graph(model, example_input=example, input_shape=input_shape)
    if samples is not None:
        samples = _batch(samples, graph, "calibration")[0]
    return graph, samples


def _batch(x, graph, name: str):
    """(x as a float batch (n, *input_shape), whether x was one sample); ModelFileError naming ``name``."""
    x = np.asarray(x, dtype=np.float64)
    single = x.shape == graph.input_shape
    batch = x[None] if single else x
    if batch.shape[1:] != graph.input_shape or not batch.shape[0] or not np.all(np.isfinite(batch)):
        raise hezk.model.ModelFileError(f"{name} of shape {x.shape} must be finite, one sample {graph.input_shape} "
                                        f"or a batch (n, *{graph.input_shape})")
    return batch, single


# -- encrypted inference ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Inference:
    """The result of :meth:`CompiledModel.infer`: ``output`` (decrypted), ``float_output`` (the float model on
    the same input, in the clear), ``max_error`` (their largest difference: the polynomial activations' error
    plus CKKS noise) and ``precision_bits`` (what one rescale or key switch keeps at the plan's parameters).
    ``np.asarray(result)`` is the output."""

    output: np.ndarray
    float_output: np.ndarray
    max_error: float
    precision_bits: float

    def __array__(self, dtype=None, copy=None):
        return self.output if dtype is None else self.output.astype(dtype)

    def __repr__(self) -> str:
        with np.printoptions(precision=4, suppress=True, threshold=20):
            return (f"Inference(output={self.output!r}, max |error| vs the float model {self.max_error:.3g}, "
                    f"{self.precision_bits:.0f} bits per operation)")


class CompiledModel:
    """A model made ready for encrypted inference by :func:`compile`: ``graph`` (the float description),
    ``sequential`` (the encrypted-path model, activations fitted), ``plan`` (printable: parameters, depth, keys,
    per-layer einsums, precision), ``calibration_error`` ((mean, max) of the fitted model against the float
    one on the calibration inputs, or None). ``client()`` / ``server(public_context)`` are the two parties of
    a real deployment; ``infer(x)`` plays both here."""

    def __init__(self, graph, sequential, plan, params, key_budget, calibration_error):
        self.graph, self.sequential, self.plan = graph, sequential, plan
        self.calibration_error = calibration_error
        self._params, self._key_budget = params, key_budget
        self._local = None  # (client, server) of infer, keyed once

    @property
    def precision_bits(self) -> float:
        """Bits one rescale or key switch keeps at the plan's parameters (``ModelPlan.precision_bits``)."""
        return self.plan.precision_bits

    def client(self, *, seed=None, progress=None):
        """A new :class:`tensor_ops.Client` for this plan (fresh keys; its ``public_context()`` goes to the
        server, its secret key never does). ``seed``: tests only."""
        from tensor_ops import Client
        return Client(self._params, plan=self.plan, seed=seed, progress=progress)

    def server(self, public_context):
        """A :class:`tensor_ops.Server` holding this model and a client's public context (bytes)."""
        from tensor_ops import Server
        return Server(self.sequential, public_context, input_shape=self.graph.input_shape,
                      key_budget=self._key_budget)

    def reference(self, x) -> np.ndarray:
        """The float model on ``x`` (one sample or a batch), in the clear."""
        batch, single = _batch(_array(x, "x"), self.graph, "x")
        out = self.graph.forward(batch)
        return out[0] if single else out

    def infer(self, x, *, progress=None) -> Inference:
        """Encrypt ``x`` (one sample or a batch), evaluate the encrypted model, decrypt: both parties in this
        process (keys made on the first call and kept). The result carries the float model's output beside.
        ``progress``: True draws bars on stderr over the key generation (first call) and the encrypted
        evaluation, a callable gets ``(done, total, label)``; the output is the same either way."""
        from tensor_ops.progress import as_progress

        as_progress(progress, "evaluate")  # a bad value: refused before any work
        batch, single = _batch(_array(x, "x"), self.graph, "x")
        if self._local is None:
            client = self.client(progress=progress)
            self._local = (client, self.server(client.public_context()))
        client, server = self._local
        out = client.decrypt(server.evaluate(client.encrypt(batch), progress=progress))
        reference = self.graph.forward(batch)
        error = float(np.max(np.abs(out - reference)))
        return Inference(out[0] if single else out, reference[0] if single else reference, error,
                         self.precision_bits)

    def __repr__(self) -> str:
        return (f"CompiledModel(input {self.graph.input_shape}, {len(self.graph.nodes)} operators, "
                f"{self.plan.params!r})")


def compile(model, calibration=None, *, input_shape=None, degree=None, params=None, key_budget=None,
            progress=None) -> CompiledModel:
    """Ready ``model`` (see :func:`as_graph`: a path, ONNX bytes, a torch module, a Graph) for encrypted inference.

    ``calibration``: representative inputs (batch first); each activation's polynomial is fitted on the range
    its input takes on them (else on [-4, 4]) and, for a torch module, the first one traces the export.
    ``degree``: of each fitted activation; ``params``: CKKSParameters or a preset name ("N14"; None: the
    smallest 128-bit parameters for the model's depth); ``key_budget``: bytes the rotation keys may take.
    ``progress``: True draws a bar on stderr over the planning, a callable gets ``(done, total, label)``; the
    result is the same either way. Returns a :class:`CompiledModel`. Errors: ModelFileError for the model or
    the inputs, the encrypted half's ParameterError / ShapeError for a model it cannot plan (or a bad
    ``progress``)."""
    from tensor_ops.model_plan import DEFAULT_KEY_BUDGET
    from tensor_ops.nn import calibration_error, from_graph
    from tensor_ops.progress import as_progress

    progress = as_progress(progress, "planning")

    graph, samples = _graph_and_samples(model, calibration, input_shape)
    sequential = from_graph(graph, degree=degree, calibration=samples)
    report = None if samples is None else calibration_error(sequential, graph, samples)
    sequential.calibration_report = report
    budget = DEFAULT_KEY_BUDGET if key_budget is None else key_budget
    plan = sequential.plan(graph.input_shape, params=params, key_budget=budget, progress=progress)
    return CompiledModel(graph, sequential, plan, params, budget, report)


# -- proofs ----------------------------------------------------------------------------------------------------
class Prover:
    """The model owner's side of :func:`commit`: ``commitment`` (bytes to publish: the quantized structure and
    the weights' commitment), ``prove(x)`` (proof bytes), ``proofs_left`` (hiding copies not yet used; each
    proof uses one: commit again when they are spent), ``error_report`` (the proven integer model against the
    float one on the calibration inputs: mean_error, max_error, output_magnitude, argmax_agreement) and
    ``save_state(path)`` (the SECRET prover state: ``Prover.load(model, commitment, path)`` proves on later, in
    another process; never copy or restore it)."""

    def __init__(self, graph, quantized, network, commitment: bytes, error_report: dict, hiding: bool, *,
                 scheme: str | None = None):
        self.graph, self.quantized, self._network = graph, quantized, network
        self.commitment, self.error_report, self._hiding = commitment, error_report, hiding
        self.scheme = scheme

    @property
    def strategy(self) -> str:
        """The proof of inference: "mlp" (the MLP proof of a ReLU MLP chain) or "graph" (the graph proof)."""
        from proofs.layers.network import Network
        return "mlp" if isinstance(self._network, Network) else "graph"

    @property
    def zero_knowledge(self) -> bool:
        """Whether the weights stay hidden (a hiding commitment: zero-knowledge proofs)."""
        return self._hiding

    @property
    def proofs_left(self) -> float:
        return self._network.proofs_left if self.zero_knowledge else math.inf

    def prove(self, x, *, private_input: bool = False, progress=None) -> bytes:
        """The proof bytes that y = model(x) under the commitment (x: one sample or a batch, floats quantized
        at the committed input scale). ``private_input``: hide x too (its range is proven; the verifier passes
        None for x). An input outside the calibrated range is refused (ModelError). ``progress``: True draws a
        bar on stderr over the proof's steps, a callable gets ``(done, total, label)``; the proof verifies the
        same either way."""
        from proofs.progress import as_progress

        progress = as_progress(progress, "proving")
        x = _array(x, "x")
        if private_input:
            self._require_private_input()
            return self._network.prove(x, progress=progress, private_input=True).to_bytes()
        return self._network.prove(x, progress=progress).to_bytes()

    def _require_private_input(self) -> None:
        from proofs import ModelError
        if not self.zero_knowledge:
            raise ModelError("private_input=True needs a hiding commitment (commit with hiding=True)")
        if self.strategy == "mlp":
            raise ModelError("private_input=True: this ReLU MLP was committed for the MLP proof, whose proofs state "
                             "their input; commit with private_input=True (the graph proof) to hide it")

    def prove_batch(self, x, *, per_proof: int = 1, dask=None, private_input: bool = False,
                    progress=None) -> list:
        """Proof bytes for each group of ``per_proof`` samples of ``x`` (batch first), one task per proof
        (:func:`proofs.batch.prove_batch`: ``dask`` None for this process, "local:K", a scheduler address or a
        ``distributed.Client``); each hiding proof uses its own copy, all reserved before any proof runs (a
        ModelError before any work when too few are left)."""
        from proofs.batch import prove_batch
        if private_input:
            self._require_private_input()
        x = _array(x, "x")
        proofs = prove_batch(self._network, x, per_proof=per_proof, dask=dask, progress=progress,
                             private_input=private_input)
        return [proof.to_bytes() for proof in proofs]

    @classmethod
    def load(cls, model, commitment, state=None) -> "Prover":
        """The prover of a published ``commitment`` (bytes of :attr:`commitment`) for ``model`` (as :func:`commit`
        takes it, the same weights), re-quantized with the committed scales; ``state``: the path
        :meth:`save_state` wrote (hiding commitments; each proof reserves its copy there before it is made).
        ModelError for a commitment of other weights or a missing state. ``error_report`` is None."""
        from proofs import ModelError, ProofRejected
        from proofs.inference import graph_prover, read_commitment

        try:
            parsed = read_commitment(bytes(commitment))
        except (TypeError, ProofRejected) as error:
            raise ModelError(f"commitment is not the bytes of a graph commitment: {error}") from None
        if not hasattr(parsed, "structure"):
            return cls._load_mlp(model, parsed, bytes(commitment), state)
        shape = parsed.structure.input_shape
        graph = as_graph(model, example_input=np.zeros((1, *shape), dtype=np.float32), input_shape=shape)
        network = graph_prover(graph, parsed, state, names=("the commitment", "this model's"))
        return cls(graph, network.qgraph, network, bytes(commitment), None, parsed.zk,
                   scheme=_scheme_name(network.commitment))

    @classmethod
    def _load_mlp(cls, model, parsed, commitment: bytes, state) -> "Prover":
        """The MLP proof's prover of ``parsed`` (a ModelCommitment: ``hezk commit`` or :func:`commit` of a ReLU
        MLP) for ``model``, quantized at the committed input bound."""
        from proofs import ModelError
        from proofs.layers.network import Network
        from proofs.quantize import quantize_fixed_point
        from proofs.model import graph_layers

        shape = (parsed.layers[0].in_features,)
        graph = as_graph(model, example_input=np.zeros((1, *shape), dtype=np.float32), input_shape=shape)
        weights, biases, relus = graph_layers(graph)
        quantized = quantize_fixed_point(weights, biases, frac_bits=parsed.input_frac,
                                         input_bound=parsed.input_bound * 2.0 ** -parsed.input_frac, relus=relus)
        if parsed.zk:
            if state is None:
                raise ModelError("a hiding commitment is proven from its prover state: pass state= (the path "
                                 "Prover.save_state wrote)")
            network = Network(quantized, state=state)
        else:
            network = Network(quantized, parsed.params, zk=False)
        if network.commitment.to_bytes() != commitment:
            raise ModelError("the commitment is not of this model's weights (or the prover state is another's)")
        return cls(graph, quantized, network, commitment, None, parsed.zk, scheme=_scheme_name(network.commitment))

    def save_state(self, path) -> None:
        """Write the SECRET prover state (hiding commitments only; never copy or restore it)."""
        from proofs import ModelError
        if not self.zero_knowledge:
            raise ModelError("a public-weights commitment has no prover state")
        self._network.save_state(path)

    def __repr__(self) -> str:
        mode = f"zero knowledge, {self.proofs_left} proofs left" if self.zero_knowledge else "PUBLIC WEIGHTS"
        size = (f"{len(self.quantized.layers)} layers" if self.strategy == "mlp"
                else f"{len(self.quantized.ops)} proven ops")
        return (f"Prover({self.strategy} proof of {size}, {self.scheme or 'ligero'}, {len(self.commitment)} "
                f"commitment bytes, {mode})")


def _scheme_name(commitment) -> str:
    """"basefold" or "ligero": the scheme a parsed commitment's weights were committed with."""
    from proofs.pcs.scheme import scheme_of
    return "basefold" if scheme_of(commitment.weights.params).batched else "ligero"


def commit(model, calibration=None, *, hiding: bool = True, max_proofs: int | None = None, scheme: str = "auto",
           private_input: bool = False, input_shape=None, act_bits: int = 12, weight_bits: int = 8,
           progress=None) -> Prover:
    """Quantize ``model`` (see :func:`as_graph`) with scales chosen on ``calibration`` (representative inputs,
    batch first; None: 64 seeded uniform [-1, 1] inputs, as ``hezk commit``) and commit to its weights.

    ``hiding`` (default): the weights stay private (zero-knowledge proofs, ``max_proofs`` hiding copies, each
    proof uses one; default 16); False commits them publicly (proofs reveal them). The proof is the one ``hezk
    commit`` makes of the same model: a ReLU MLP chain is proven by the MLP proof (fixed point at 2^8, input
    bound the calibration's largest |x| rounded up to a power of two), unless ``private_input`` asks for proofs
    that may hide their input (only the graph proof hides one); every other model by the graph proof
    (``act_bits`` / ``weight_bits``: its quantization). ``error_report`` states the measured error either way;
    the graph proof's per-tensor scales are finer on wide MLPs (784->64->10, inputs in [0, 1]: max error 0.003
    against 0.022 at 2^8), for ~2.7x larger hiding proofs: ``private_input=True`` takes it.

    ``scheme``: "auto" (default) takes the smallest proof at the soundness floor, by the rule every command and
    API follows (:func:`proofs.pcs.choice.choose_scheme`): hiding Basefold for a ReLU MLP of at most 2^17
    parameters x copies (16->16->4: 92 kB proofs verified in 24 ms, against hiding Ligero's 250 kB and 46 ms,
    for about the same prover time: 93 against 85 ms), Ligero for larger MLPs, graph models and public weights
    (a small CNN: 436 kB against Basefold's 3.7 MB, proved 25x faster). "ligero" takes the fastest prover and
    commitment, "basefold" the O(log^2 n) openings (a graph model: hiding only). ``progress``: True draws a bar on
    stderr over the commitment, a callable gets ``(done, total, label)``; the result is the same either way.
    Returns a :class:`Prover` (``prover.scheme`` and ``prover.strategy`` say what was chosen). ModelError
    (proofs) for a model the proofs cannot prove, naming the operator or layer, or a bad option."""
    from proofs import ModelError
    from proofs.graph_cli import is_relu_mlp
    from proofs.layers.network_zk import DEFAULT_MAX_PROOFS
    from proofs.pcs.choice import choose_scheme
    from proofs.progress import as_progress

    progress = as_progress(progress, "committing")
    for name, value in (("hiding", hiding), ("private_input", private_input)):
        if not isinstance(value, bool):
            raise ModelError(f"{name}={value!r} must be True or False")
    choose_scheme(scheme, strategy="graph", hiding=hiding)  # an unknown scheme name: refused before any work
    if private_input and not hiding:
        raise ModelError("private_input=True needs hiding weights (hiding=True): public-weights proofs state their "
                         "input")
    graph, samples = _graph_and_samples(model, calibration, input_shape)
    if samples is None:
        rng = np.random.default_rng(0)
        samples = rng.uniform(-1.0, 1.0, (DEFAULT_CALIBRATION_SAMPLES, *graph.input_shape))
    copies = DEFAULT_MAX_PROOFS if max_proofs is None else max_proofs
    if is_relu_mlp(graph) and not private_input:
        return _commit_mlp(graph, samples, hiding, copies, scheme, progress)
    return _commit_graph(graph, samples, hiding, copies, choose_scheme(scheme, strategy="graph", hiding=hiding),
                         act_bits, weight_bits, progress)


def _commit_graph(graph, samples, hiding, max_proofs, scheme, act_bits, weight_bits, progress) -> Prover:
    """The graph proof's commitment (any model the quantizer reads)."""
    from proofs import ModelError
    from proofs.graph_cli import parsed_back
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph import GraphNetwork
    from proofs.layers.graph_zk import HidingGraphNetwork, default_graph_params, graph_basefold_params

    if scheme == "basefold" and not hiding:
        raise ModelError("scheme='basefold' with hiding=False: graph models commit public weights with ligero (use "
                         "hiding=True for hiding Basefold)")
    quantized = quantize_graph(graph, samples, act_bits=act_bits, weight_bits=weight_bits)
    if hiding:
        params = graph_basefold_params(quantized) if scheme == "basefold" else default_graph_params(quantized)
        network = HidingGraphNetwork(quantized, params=params, max_proofs=max_proofs, progress=progress)
    else:
        network = GraphNetwork(quantized, progress=progress)
    return Prover(graph, quantized, network, parsed_back(network.commitment), quantized.error_report(graph, samples),
                  hiding, scheme=scheme)


#: fixed-point bits of a ReLU MLP proven by the MLP proof (``hezk commit``'s default)
MLP_FRAC_BITS = 8


def _mlp_model(graph, largest: float):
    """The QuantizedMLP of a ReLU MLP graph, fixed point at 2^MLP_FRAC_BITS, input bound ``largest`` rounded up to
    a power of two (as ``hezk commit --calibration`` rounds its calibration's largest |x|)."""
    from proofs.model import graph_layers
    from proofs.quantize import quantize_fixed_point

    weights, biases, relus = graph_layers(graph)
    bound = 2.0 ** math.ceil(math.log2(largest)) if largest > 0 else 1.0
    return quantize_fixed_point(weights, biases, frac_bits=MLP_FRAC_BITS, input_bound=bound, relus=relus)


def _mlp_params(scheme: str, hiding: bool):
    """The MLP proof's parameters of ``scheme`` (named explicitly: ``Network(params=None)`` is the auto rule)."""
    from proofs.basefold import BasefoldParams
    from proofs.commit import CommitParams
    from proofs.layers.network_zk import basefold_params, default_params

    if scheme == "basefold":
        return basefold_params() if hiding else BasefoldParams()
    return default_params() if hiding else CommitParams()


def _commit_mlp(graph, samples, hiding, max_proofs, scheme, progress) -> Prover:
    """The MLP proof's commitment of a ReLU MLP chain (what ``hezk commit`` makes of it)."""
    from proofs.graph_cli import mlp_error_report, parsed_back
    from proofs.layers.network import Network
    from proofs.pcs.choice import choose_scheme

    model = _mlp_model(graph, float(np.max(np.abs(samples))))
    copies = max_proofs if hiding and isinstance(max_proofs, (int, np.integer)) else 1
    scheme = choose_scheme(scheme, strategy="mlp", hiding=hiding, parameter_copies=model.num_parameters * int(copies))
    options = {"max_proofs": max_proofs} if hiding else {}
    network = Network(model, _mlp_params(scheme, hiding), zk=hiding, progress=progress, **options)
    return Prover(graph, model, network, parsed_back(network.commitment), mlp_error_report(model, graph, samples),
                  hiding, scheme=scheme)


def prove(prover: Prover, x, *, private_input: bool = False, per_proof: int | None = None, dask=None,
          progress=None):
    """``prover.prove(x)``: the proof bytes that y = model(x) under ``prover.commitment``. With ``per_proof``
    (or ``dask``): a batch, ``prover.prove_batch(x, per_proof=per_proof or 1, dask=dask)``, a list of proof
    bytes, one per ``per_proof`` samples of x (``hezk.verify(commitment, x, proofs, per_proof=...)`` checks
    them)."""
    if not isinstance(prover, Prover):
        from proofs import ModelError
        raise ModelError(f"prover must be the Prover of hezk.commit, got {type(prover).__name__}")
    if per_proof is not None or dask is not None:
        return prover.prove_batch(x, per_proof=1 if per_proof is None else per_proof, dask=dask,
                                  private_input=private_input, progress=progress)
    return prover.prove(x, private_input=private_input, progress=progress)


@dataclass(frozen=True, eq=False, kw_only=True)
class Verified(Verdict):
    """An accepted proof: the verifiers' :class:`proofs.verdict.Verdict` (truthy; ``kind``, ``soundness_bits`` per
    attempt: grinding 2^k Fiat-Shamir hashes gives 2^(k - bits), ``statistical_bits``) whose ``output`` is the
    proven output dequantized, with ``output_int`` (as proven, at scale 2^output_frac), ``zero_knowledge`` (the
    weights stayed hidden) and ``private_input``."""

    output_int: np.ndarray
    output_frac: int
    zero_knowledge: bool
    private_input: bool

    @classmethod
    def of(cls, verdict: Verdict, output_frac: int, zero_knowledge: bool, private_input: bool) -> "Verified":
        """A verifier's verdict with its output dequantized by 2^-output_frac (a batch's parts kept)."""
        return cls(kind=verdict.kind, output=verdict.output * 2.0 ** -output_frac, output_int=verdict.output,
                   output_frac=output_frac, soundness_bits=verdict.soundness_bits, parts=verdict.parts,
                   statistical_bits=verdict.statistical_bits, zero_knowledge=zero_knowledge,
                   private_input=private_input)

    def __repr__(self) -> str:
        mode = "zero knowledge" if self.zero_knowledge else "public weights"
        with np.printoptions(precision=4, suppress=True, threshold=20):
            return (f"Verified(output={self.output!r}, {mode}{', private input' if self.private_input else ''}, "
                    f"soundness {self.soundness_bits:.1f} bits)")


def verify(commitment, x, proof, *, per_proof: int = 1, dask=None, progress=None) -> Verified:
    """Check ``proof`` (bytes) that y = model(x) under ``commitment`` (the bytes of ``Prover.commitment`` or of
    ``hezk commit``: a graph commitment, hiding or public-weights, or the MLP strategy's model commitment); ``x``
    None for a proof made with ``private_input=True``. A list of proofs (``hezk.prove(..., per_proof=K)``) is
    checked as a batch, one proof per ``per_proof`` samples of ``x`` (``dask``: as :func:`prove`): the result's
    ``output`` is every proof's, stacked, and ``parts`` each proof's verdict. The strategy is the commitment's
    (:func:`proofs.inference.verify`). ``progress``: True draws a bar on stderr over the proofs checked (a
    batch: one step per proof), a callable gets ``(done, total, label)``; the verdict is the same either way
    (a bad value: ModelError). Returns a :class:`Verified` (truthy) on acceptance; raises only ProofRejected."""
    from proofs import ProofRejected
    from proofs import inference
    from proofs.batch import verify_batch
    from proofs.progress import as_progress

    report = as_progress(progress, "verifying")
    try:
        if isinstance(commitment, Prover):
            commitment = commitment.commitment
        batch = isinstance(proof, (list, tuple))
        for name, value in (("commitment", commitment), *((("proof", p) for p in proof) if batch else
                                                          (("proof", proof),))):
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise ProofRejected(f"{name} must be bytes, got {type(value).__name__}", "hezk.verify")
        parsed = inference.read_commitment(bytes(commitment))
        x = None if x is None else _array(x, "x")
        if batch:
            verdict = verify_batch(parsed, x, [bytes(p) for p in proof], per_proof=per_proof, dask=dask,
                                   progress=report)
        else:
            verdict = inference.verify(parsed, x, bytes(proof))
            if report is not None:
                report(1, 1, "verified")
        frac = parsed.output_frac if isinstance(parsed, inference.ModelCommitment) else parsed.structure.output_frac
        return Verified.of(verdict, frac, parsed.zk, x is None)
    except ProofRejected:
        raise
    except Exception as error:  # noqa: BLE001 (verifiers raise only ProofRejected)
        raise ProofRejected(f"{type(error).__name__}: {error}", "hezk.verify") from None
