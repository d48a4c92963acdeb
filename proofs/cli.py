"""The prove/verify scripts: ``python -m proofs commit | prove | verify``.

    python -m proofs commit --model model.npz --out c.bin       (secret prover state: c.bin.state, or --state)
    python -m proofs prove  --model model.npz --input x.npy [--commitment c.bin] --out proof.bin
    python -m proofs verify --commitment c.bin --input x.npy --proof proof.bin
    python -m proofs verify --commitment c.bin --inputs X.npy --proofs DIR [--dask local:K]   (batch mode)
    python -m proofs commit --model mlp.npz --out c.bin --private-input    (proofs may hide the input: see below)

Every command takes every model: the commitment's kind picks the proof (:mod:`proofs.inference`: the graph proof,
or the MLP proof a ReLU MLP is committed with unless ``commit --private-input`` asks for the graph proof, the only
one that hides an input); batch mode (``--inputs``, ``--per-proof``, ``--dask``) and ``--private-input`` work with
either commitment that supports them (``prove --inputs X --private-input`` / ``verify --private-input --proofs
DIR``: a batch of hidden inputs).

By default the weights stay private: ``commit`` makes a hiding commitment (for ``--max-proofs`` proofs) and
writes the prover's secret state where the user names it (``--state PATH``, or ``--out PATH`` and then
``PATH.state``; never a default path: keep it as private as the weights), ``prove``
proves in zero knowledge against that commitment (each proof uses up one of its copies, reserved under the state
file's lock in its journal PATH.state.spent, fsynced before the proof is made: never copy or restore a prover
state, see
:mod:`proofs.layers.prover_state`). ``--public-weights``
(on commit and prove) uses the plain protocol instead, whose proofs reveal every weight and bias.
``commit --scheme`` picks the commitment (prove and verify read it from the commitment's bytes): ``auto`` (the
default) the smaller proof, hiding Basefold for a ReLU MLP (16->16->4: 92 kB against Ligero's 250 kB, verified in
half the time, for about the prover time of Ligero) and Ligero for a graph model (a small CNN: 436 kB against 3.7
MB, proved 25x faster) or public weights; ``ligero`` or ``basefold`` (hiding or, with ``--public-weights``,
plain) to choose. ``verify`` refuses Basefold parameters resting on a conjectured bound unless given
``--allow-conjectured`` (then the soundness it prints is labelled conjectured).

Model files are described in :mod:`proofs.model`. An input file holds one input (in_features,) or
a batch (batch, in_features): integers are taken as already quantized, floats are quantized at the
model's input scale. ``verify`` prints one word on stdout, ``accept`` (exit code 0) or ``reject``
(exit code 1), and on stderr the reason of a rejection or the soundness and the verified output;
usage errors (missing files, a model that could wrap around the field) exit with code 2.
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings

import numpy as np

import hezk.model

from . import graph_cli, inference
from .graph_cli import figure_text, soundness_text  # noqa: F401 (soundness_text: re-exported)
from .basefold import BasefoldParams
from .errors import ModelError, ProofError, ProofRejected
from .inference import statement_input
from .layers.network import ModelCommitment, Network
from .commit import CommitParams
from .layers.network_zk import DEFAULT_MAX_PROOFS, basefold_params, default_params  # noqa: F401 (re-exported)
from .model import load_model
from .pcs.choice import AUTO_BASEFOLD_MAX_PARAMETER_COPIES, choose_scheme  # noqa: F401 (re-exported)
from .cli_args import (DEFAULT_COMMITMENT, DEFAULT_PROOF, MODEL_HELP, PUBLIC_WEIGHTS_HELP,  # noqa: F401 (re-exported)
                       build_parser)
from .progress import command_of, progress_bar, run_command

class InputFileError(ModelError):
    """The input file is not a usable input (unreadable, not numeric, NaN or infinite): a usage error (exit 2),
    where an input the proof does not fit is a rejection (exit 1)."""


def _read_input(path: str) -> np.ndarray:
    """The array of an input file (integers, already quantized, or finite floats); InputFileError otherwise."""
    try:
        x = np.load(path, allow_pickle=False)
        if isinstance(x, np.lib.npyio.NpzFile):  # an .npz archive holding exactly one array is accepted too
            with x as archive:
                x = archive[archive.files[0]] if len(archive.files) == 1 else archive.files
    except (OSError, ValueError, EOFError) as exc:
        raise InputFileError(f"input file {path!r} is not a readable .npy array: {exc}") from None
    if isinstance(x, list):
        raise InputFileError(f"input file {path!r} is an .npz archive with {len(x)} arrays {x}; expected one array")
    if x.dtype.kind not in "iuf":
        raise InputFileError(f"input file {path!r} must hold integers or floats, got dtype {x.dtype}")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise InputFileError(f"input file {path!r} holds NaN or infinite values; every entry must be finite")
    return x


#: the one check of a stated input (:func:`proofs.inference.statement_input`), under the name callers know
bounded_input = statement_input


def _load_input(path: str, input_frac: int, input_bound: int) -> np.ndarray:
    """The prover's input: outside the model's input_bound is a usage error (ModelError, exit 2)."""
    try:
        return bounded_input(_read_input(path), input_frac, input_bound, path)
    except ProofRejected as rejection:
        raise ModelError(f"input file {path!r}: {rejection.reason} (real value {input_bound * 2.0 ** -input_frac:g} "
                         f"at scale 2^{input_frac}; set input_bound in the model file to accept larger inputs)") from None


def _print_output(output: np.ndarray, output_frac: int, stream=None) -> None:
    values = output * 2.0 ** -output_frac
    with np.printoptions(precision=4, suppress=True, threshold=40):
        print(f"output (batch {output.shape[0]}, dequantized by 2^-{output_frac}):\n{values}", file=stream)


def _state_path(args, commitment_path) -> str:
    return args.state if args.state is not None else f"{commitment_path}.state"


def _calibration_bound(path: str) -> tuple[float, float]:
    """(largest |x| of the calibration inputs, that rounded up to a power of two: the input bound)."""
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputFileError(f"calibration file {path!r} is not a readable .npy array: {exc}") from None
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.size == 0 or not np.all(np.isfinite(x)):
        raise InputFileError(f"calibration file {path!r} must be a non-empty .npy array of finite floats (inputs "
                             f"as the model sees them)")
    largest = float(np.max(np.abs(x)))
    return largest, 2.0 ** math.ceil(math.log2(largest)) if largest > 0 else 1.0


def _committed_model(args):
    """The model quantized as the commitment file states (its input bound may come from --calibration)."""
    model = load_model(args.model)
    if os.path.isfile(args.commitment):
        try:
            committed = ModelCommitment.from_bytes(_read(args.commitment))
        except ProofRejected:
            return model  # reported below, where the commitment is checked
        if committed.input_bound != model.input_bound and committed.input_frac == model.input_frac:
            model = load_model(args.model, input_bound=committed.input_bound * 2.0 ** -committed.input_frac)
    return model


def commit_scheme(scheme: str | None, graph: bool, hiding: bool, parameter_copies: int = 0) -> str:
    """The commitment of ``commit --scheme``: :func:`proofs.pcs.choice.choose_scheme` (the one rule every command
    and API follows; None or "auto": the smallest proof at the soundness floor) for the graph proof (``graph``)
    or the MLP proof."""
    return choose_scheme(scheme, strategy="graph" if graph else "mlp", hiding=hiding,
                         parameter_copies=parameter_copies)


def _graph_strategy(args, asked: bool):
    """The model's :class:`hezk.model.Graph` when the graph proof proves it: any model but a ReLU MLP chain, and a
    ReLU MLP when ``asked`` (``--private-input``: only the graph proof hides the input) or when ``--commitment``
    is a graph commitment; None: the MLP strategy (:mod:`proofs.inference` says why both are kept)."""
    graph = graph_cli.graph_model(args.model)
    if graph is not None:
        return graph
    path = getattr(args, "commitment", None)
    asked = asked or (args.command != "commit" and path is not None and os.path.isfile(path)
                      and inference.is_graph_commitment(_read(path)))
    if not asked:
        return None
    try:
        return hezk.model.load(args.model)
    except (hezk.model.ModelFileError, OSError, ValueError) as error:
        raise ModelError(f"model {args.model!r}: the graph proof (asked for by --private-input or a graph "
                         f"commitment) reads ONNX or hezk .npz model files, not a quantized MLP file: "
                         f"{error}") from None


def _commit(args) -> int:
    zk = not args.public_weights
    if getattr(args, "private_input", False) and not zk:
        raise ModelError("--private-input with --public-weights: proofs of a hidden input need hiding weights")
    graph = _graph_strategy(args, getattr(args, "private_input", False))
    if graph is not None:  # convolutions, pools, residual adds, a hidden input: the graph proof (issue 13)
        args.scheme = commit_scheme(getattr(args, "scheme", None), True, zk)
        return graph_cli.commit(args, graph)
    if args.calibration is not None:
        largest, bound = _calibration_bound(args.calibration)
        model = load_model(args.model, input_bound=bound)
        if largest > model.input_bound * 2.0 ** -model.input_frac:
            raise ModelError(f"calibration data reach |x| = {largest:g}, above the quantized model's input_bound="
                             f"{model.input_bound * 2.0 ** -model.input_frac:g}")
        source = f"from the calibration data {args.calibration} (largest |x| {largest:g}, rounded up to a power of 2)"
    else:
        model = load_model(args.model)
        source = ("the model's input bound; a float model without one gets the widest of 8, 4, 2, 1 that fits: "
                  "pass --calibration inputs.npy to fit it to your inputs")
    if zk and args.state is None and args.out is None:  # checked after the model, before any work or file
        raise ModelError("a hiding commitment writes a SECRET prover state: name its path with --state PATH "
                         "(or name the commitment with --out PATH: the state then goes to PATH.state)")
    args.out = DEFAULT_COMMITMENT if args.out is None else args.out
    args.scheme = scheme = commit_scheme(getattr(args, "scheme", None), False, zk,
                                         model.num_parameters * args.max_proofs)
    basefold = scheme == "basefold"  # each scheme named (Network's own default, params=None, is the auto rule)
    plain = BasefoldParams() if basefold else CommitParams()
    hiding = basefold_params() if basefold else default_params()  # issue 17: one batched opening
    progress = None if getattr(args, "quiet", False) else progress_bar("committing")
    network = Network(model, zk=zk, max_proofs=args.max_proofs, progress=progress, params=hiding) if zk else \
        Network(model, zk=False, params=plain, progress=progress)
    data = graph_cli.parsed_back(network.commitment)
    with open(args.out, "wb") as handle:
        handle.write(data)
    largest_input = model.input_bound * 2.0 ** -model.input_frac
    print(f"committed {len(model.layers)} layers, {model.num_parameters} parameters "
          f"({model.scheme}, input scale 2^{model.input_frac}) -> {args.out} ({len(data)} bytes)")
    measured = _measured_error(args, model)
    if measured is not None:
        print(measured)
    print(f"worst-case output error <= {model.error_bound:.3g} (quantized vs float model) over every input with "
          f"|x| <= {largest_input:g}, {source}")
    if zk:
        state = _state_path(args, args.out)
        network.save_state(state)
        print(f"hiding {scheme} commitment for {args.max_proofs} zero-knowledge proofs, digest "
              f"{network.commitment.weights.digest().hex()}; secret prover state -> {state} (keep it private)")
    else:
        print(f"PUBLIC WEIGHTS: proofs reveal every weight; commitment digest {network.commitment.weights.root.hex()}"
              + (f" ({plain.describe()})" if basefold else ""))
    return 0


def _measured_error(args, model) -> str | None:
    """The line of the proven MLP's measured error against the float model (as the graph proof prints it), on
    the --calibration inputs or 64 seeded uniform [-1, 1] ones; None for a model file without its float model
    (the deprecated quantized format: only the worst case is known)."""
    try:
        graph = hezk.model.load(args.model)
    except (hezk.model.ModelFileError, OSError, ValueError):
        return None
    if args.calibration is not None:
        samples, source = np.load(args.calibration, allow_pickle=False), f"the calibration data {args.calibration}"
    else:
        rng = np.random.default_rng(0)
        samples = rng.uniform(-1.0, 1.0, (graph_cli.CALIBRATION_SAMPLES, *graph.input_shape))
        samples = np.clip(samples, -model.input_bound * 2.0 ** -model.input_frac,
                          model.input_bound * 2.0 ** -model.input_frac)
        source = f"{graph_cli.CALIBRATION_SAMPLES} seeded uniform [-1, 1] inputs (--calibration: yours)"
    return graph_cli.report_text(graph_cli.mlp_error_report(model, graph, samples.reshape(len(samples), -1)),
                                 source)


def _prove(args) -> int:
    if args.inputs is not None:
        return _prove_batch(args)
    if args.dask is not None:
        raise ModelError("--dask proves a batch: pass --inputs (a stacked .npy or a folder of .npy files)")
    graph = _graph_strategy(args, False)
    if graph is not None:
        return graph_cli.prove(args, graph)
    if args.private_input:
        raise ModelError(f"--private-input: the commitment {args.commitment!r} of this ReLU MLP was made by the MLP "
                         f"proof, whose proofs state their input; commit with 'commit --private-input' (the graph "
                         f"proof) to hide it")
    network, _ = _prover(args)
    x = _load_input(args.input, network.model.input_frac, network.model.input_bound)
    start = time.perf_counter()
    # a hiding network read from its state file reserves its copy in its journal (locked, fsynced) before proving
    proof = network.prove(x, progress=None if args.quiet else progress_bar("proving"))
    elapsed = time.perf_counter() - start
    data = proof.to_bytes()
    with open(args.out, "wb") as handle:
        handle.write(data)
    mode = f"zero knowledge, {network.proofs_left} proofs left" if network.zk else "PUBLIC WEIGHTS"
    print(f"proved in {elapsed:.2f}s -> {args.out} ({len(data)} bytes, {mode}, "
          f"{figure_text(network.commitment, x.shape[0] if x.ndim == 2 else 1)})")
    _print_output(proof.output, network.model.output_frac)
    return 0


def _prover(args):
    """(Network, prover state path or None) of --model and --commitment / --state (or --public-weights)."""
    model = _committed_model(args)
    if args.public_weights:  # the plain scheme (ligero or basefold) as the commitment file's bytes say
        return Network(model, zk=False, params=_plain_params(args.commitment)), None
    state = _state_path(args, args.commitment)
    if not os.path.isfile(state):
        raise ModelError(f"no prover state {state!r}: run 'commit' first (it writes the commitment and its "
                         "state), or pass --public-weights for a plain proof that reveals the weights")
    network = Network(model, state=state)
    if not os.path.isfile(args.commitment) or _read(args.commitment) != network.commitment.to_bytes():
        raise ModelError(f"the prover state {state!r} is not that of the commitment {args.commitment!r}")
    return network, state


def _plain_params(path: str):
    """The parameters of a plain commitment file at ``path`` (None: no such file, or not a plain commitment)."""
    try:
        committed = ModelCommitment.from_bytes(_read(path)) if os.path.isfile(path) else None
    except ProofRejected:
        return None
    return None if committed is None or committed.zk else committed.params


def _prove_batch(args) -> int:
    """--inputs: one proof per group of inputs, as tasks (proofs.batch), written into the folder --out; any model
    (the strategy as :func:`_prove` picks it), each hiding proof reserving its own copy."""
    from .batch import prove_batch
    graph = _graph_strategy(args, False)
    private = getattr(args, "private_input", False)
    if graph is not None:
        network = graph_cli.prover(args, graph)
        groups = _read_groups(args, len(network.qgraph.input_shape), graph_cli.load_array)
    else:
        if private:
            raise ModelError("--private-input: this MLP commitment's proofs state their input; commit with 'commit "
                             "--private-input' (the graph proof) to hide it")
        network, _ = _prover(args)
        groups = _input_groups(args, network.model.input_frac, network.model.input_bound)
    out = DEFAULT_PROOF[:-len(".bin")] + "s" if args.out == DEFAULT_PROOF else args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise ModelError(f"--out {out!r} is a file; batch mode writes its proofs into a folder")
    os.makedirs(out, exist_ok=True)
    start = time.perf_counter()
    # the copies are reserved in the state file's journal (locked, fsynced) before any task runs
    proofs = prove_batch(network, groups, dask=args.dask, progress=None if args.quiet else progress_bar("proofs"),
                         private_input=private)
    elapsed = time.perf_counter() - start
    for i, proof in enumerate(proofs):
        with open(os.path.join(out, f"proof_{i:05d}.bin"), "wb") as handle:
            handle.write(proof.to_bytes())
    mode = f"zero knowledge, {network.proofs_left} proofs left" if network.commitment.zk else "PUBLIC WEIGHTS"
    print(f"proved {len(proofs)} proofs in {elapsed:.2f}s ({len(proofs) / elapsed:.2f} proofs/s, --dask "
          f"{args.dask or 'none: in process'}) -> {out}/proof_00000.bin ... ({mode})")
    return 0


def _read_groups(args, sample_ndim: int, read=None) -> list:
    """The raw input groups of --inputs: one per .npy of a folder (sorted by name), or the samples of a stacked
    .npy cut into groups of --per-proof."""
    from .batch import input_groups
    read = _read_input if read is None else read
    if os.path.isdir(args.inputs):
        return input_groups([read(os.path.join(args.inputs, name)) for name in _input_names(args.inputs)],
                            sample_ndim=sample_ndim)
    return input_groups(read(args.inputs), args.per_proof, sample_ndim)


def _input_groups(args, frac: int, bound: int) -> list:
    """The MLP prover's input groups (:func:`_read_groups`), each within the model's input_bound (outside it: a
    usage error)."""
    return _read_groups(args, 1, lambda path: _load_input(path, frac, bound))


def _input_names(folder: str) -> list:
    """The .npy files of an --inputs folder, sorted by name (InputFileError when there is none)."""
    names = sorted(name for name in os.listdir(folder) if name.endswith(".npy"))
    if not names:
        raise InputFileError(f"--inputs folder {folder!r} holds no .npy file")
    return names


def _checked_groups(args, frac: int, bound: int) -> list:
    """The verifier's input groups (as :func:`_input_groups`), each (True, int64 group) or (False, why it is
    outside the committed input_bound): such a group's proof is rejected, the others still checked."""
    checked = []
    for i, group in enumerate(_read_groups(args, 1)):
        try:
            checked.append((True, bounded_input(group, frac, bound, f"input group {i}")))
        except ProofRejected as rejection:
            checked.append((False, str(rejection)))
    return checked


def _verify_batch(args, data: bytes) -> int:
    """--inputs and --proofs: every proof_NNNNN.bin of the folder against its input group, one task each
    (proofs.batch.verify_each); a line per proof on stdout, then accept (exit 0: all verify) or reject (exit 1,
    naming the rejected proofs); exit 2 on usage errors."""
    from .batch import verify_each
    folder = DEFAULT_PROOF[:-len(".bin")] + "s" if args.proofs is None else args.proofs
    try:
        if not os.path.isdir(folder):
            raise ModelError(f"--proofs {folder!r} is not a folder (batch mode reads proof_NNNNN.bin from it)")
        if args.outputs is not None and os.path.exists(args.outputs) and not os.path.isdir(args.outputs):
            raise ModelError(f"--outputs {args.outputs!r} is a file; batch mode writes its outputs into a folder")
        names = sorted(n for n in os.listdir(folder) if n.startswith("proof_") and n.endswith(".bin"))
        if not names:
            raise ModelError(f"--proofs folder {folder!r} holds no proof_NNNNN.bin")
        try:
            commitment = inference.read_commitment(data)
        except ProofRejected as error:
            print("reject")
            print(f"reject: the commitment: {error}", file=sys.stderr)
            return 1
        if isinstance(commitment, ModelCommitment) and args.private_input:
            raise ModelError("--private-input: an MLP commitment's proofs state their input (pass --inputs)")
        if isinstance(commitment, ModelCommitment):
            groups = _checked_groups(args, commitment.input_frac, commitment.input_bound)
        elif args.private_input:  # proofs of hidden inputs: one per proof file
            groups = [(True, None)] * len(names)
        else:  # the graph verifier checks each group's range itself (a group outside it: that proof rejected)
            groups = [(True, group) for group in _read_groups(args, inference.sample_ndim(commitment),
                                                              graph_cli.load_array)]
        if len(names) != len(groups):
            print("reject")
            print(f"reject: {len(names)} proofs in {folder!r} for {len(groups)} input groups", file=sys.stderr)
            return 1
        inside = [i for i, (ok, _) in enumerate(groups) if ok]  # a group outside input_bound: its proof rejected
        verified = verify_each(commitment, None if args.private_input else [groups[i][1] for i in inside],
                               [_read(os.path.join(folder, names[i])) for i in inside], dask=args.dask,
                               progress=None if args.quiet else progress_bar("verifying"),
                               allow_conjectured=args.allow_conjectured) if inside else []
        results = list(groups)
        for i, result in zip(inside, verified):
            results[i] = result
    except (ModelError, ProofError) as error:   # InputFileError included: unreadable inputs are usage errors
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.outputs is not None:
        os.makedirs(args.outputs, exist_ok=True)
    for i, (name, (ok, result)) in enumerate(zip(names, results)):
        print(f"{name}: accept" if ok else f"{name}: reject: {result}")
        if ok and args.outputs is not None:
            np.save(os.path.join(args.outputs, f"output_{i:05d}.npy"), _dequantized(commitment, result.output))
    rejected = [name for name, (ok, _) in zip(names, results) if not ok]
    if rejected:
        print("reject")
        print(f"reject: {len(rejected)} of {len(names)} proofs rejected: {', '.join(rejected)}", file=sys.stderr)
        return 1
    print("accept")
    rows = [len(verdict.output) for _, verdict in results]
    mode = "zero knowledge" if commitment.zk else "public weights"
    hidden = {"private_input": True} if args.private_input else {}
    print(f"accept: {len(names)} proofs of {sum(rows)} inputs ({mode}{', private inputs' if hidden else ''}, "
          f"{figure_text(commitment, max(rows), **hidden)} each)", file=sys.stderr)
    return 0


def _dequantized(commitment, output: np.ndarray) -> np.ndarray:
    """A proven output as floats: at the MLP commitment's output scale, or the graph structure's."""
    if isinstance(commitment, ModelCommitment):
        return output * 2.0 ** -commitment.output_frac
    return commitment.structure.dequantize(output)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _verify(args) -> int:
    data = _read(args.commitment)
    if args.inputs is not None or (args.private_input and args.proofs is not None):
        return _verify_batch(args, data)
    if args.dask is not None or args.proofs is not None or args.outputs is not None:
        print("error: --dask, --proofs and --outputs verify a batch: pass --inputs (a stacked .npy or a folder of "
              ".npy files)", file=sys.stderr)
        return 2
    if args.proof is None:
        args.proof = DEFAULT_PROOF
        if not os.path.isfile(args.proof):
            print(f"error: argument --proof/-p: file {args.proof!r} does not exist", file=sys.stderr)
            return 2
    if inference.is_graph_commitment(data):
        return graph_cli.verify(args, data)
    if args.private_input:
        print("error: --private-input: an MLP commitment's proofs state their input (pass --input)", file=sys.stderr)
        return 2
    try:
        commitment = ModelCommitment.from_bytes(data)
        x = bounded_input(_read_input(args.input), commitment.input_frac, commitment.input_bound, args.input)
        output = inference.verify(commitment, x, _read(args.proof),
                                  allow_conjectured=getattr(args, "allow_conjectured", False)).output
    except InputFileError as error:  # unreadable, not numeric, NaN: a usage error, not a rejection
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (ProofRejected, ModelError) as error:
        print("reject")
        print(f"reject: {error}", file=sys.stderr)
        return 1
    print("accept")
    print(f"accept ({'zero knowledge' if commitment.zk else 'public weights'}, "
          f"{figure_text(commitment, output.shape[0])})", file=sys.stderr)
    _print_output(output, commitment.output_frac, sys.stderr)
    if args.output:
        np.save(args.output, output * 2.0 ** -commitment.output_frac)
    return 0


def _run(argv) -> int:
    args = build_parser(command_of(argv)).parse_args(argv)
    if args.command == "verify":
        return _verify(args)
    try:
        return _commit(args) if args.command == "commit" else _prove(args)
    except (ModelError, ProofError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def main(argv=None) -> int:
    """Run the command line; returns the exit code (argparse exits with 2 on usage errors; Ctrl-C gives 130 and
    a missing optional dependency 2, each with one line on stderr: :func:`hezk.progress.run_command`)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # the library's deprecation notes reach the user
            warnings.filterwarnings("always", category=DeprecationWarning, module=r"proofs(\.|$)")
            return run_command(_run, argv)
    finally:  # printed by us (the caller's warning display may be a recorder); other warnings shown as they were
        for note in caught:
            if issubclass(note.category, DeprecationWarning) and "deprecated" in str(note.message):
                print(f"warning: {note.message}", file=sys.stderr)
            else:
                warnings.showwarning(note.message, note.category, note.filename, note.lineno, note.file, note.line)
