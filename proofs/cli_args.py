"""The argument definitions of ``python -m proofs`` / ``hezk commit | prove | verify`` (see :mod:`proofs.cli`):
argparse only, so building the parser (``hezk --help``, parsing a command line) imports no prover."""
from __future__ import annotations

import argparse
import os

__all__ = ["build_parser", "COMMANDS", "DEFAULT_COMMITMENT", "DEFAULT_PROOF", "MODEL_HELP", "PUBLIC_WEIGHTS_HELP"]

COMMANDS = ("commit", "prove", "verify")
PUBLIC_WEIGHTS_HELP = ("plain (non-hiding) commitment and proofs: they REVEAL THE WEIGHTS (anyone holding one "
                       "proof can recover every weight and bias from its opened columns); only for public models")
DEFAULT_COMMITMENT = "c.bin"
DEFAULT_PROOF = "proof.bin"


MODEL_HELP = ("model file: ONNX (opset >= 13) or .npz (a quantized model, or float weights that name their "
              "activation, activation='relu'); a ReLU MLP (see proofs.model), or any graph of Gemm, MatMul, Conv "
              "(grouped, depthwise), pools, MaxPool, Add, BatchNormalization, Relu, Clip (ReLU6, "
              "clamp, Min / Max with a constant), Square (Mul(x, x)), Sigmoid, Tanh, Gelu, Silu (lookup tables), "
              "Flatten, Reshape, Transpose, attention (MatMul of two computed tensors, Softmax, LayerNormalization: "
              "an nn.TransformerEncoderLayer) (the graph proof)")


def _existing_file(path: str) -> str:
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"file {path!r} does not exist")
    return path


def _existing_path(path: str) -> str:
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{path!r} does not exist")
    return path


def _writable_path(path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"folder {folder!r} of the output file does not exist")
    return path


def build_parser(only=None) -> argparse.ArgumentParser:
    """The parser of ``python -m proofs``. With ``only`` (a command name, "" for none, None for all), the other
    commands get their name and help line but no options (the parser of one command line, or of ``--help``,
    imports no prover)."""
    parser = argparse.ArgumentParser(prog="python -m proofs",
                                     description="Sumcheck proofs of quantized models: MLPs, CNNs, graphs (commit, prove, verify).")
    commands = parser.add_subparsers(dest="command", required=True)
    commit = commands.add_parser("commit", help="commit to a model's weights (writes c.bin, prints its digest)")
    prove = commands.add_parser("prove", help="prove y = model(x) for an input batch")
    verify = commands.add_parser("verify", help="verify a proof; prints accept/reject, exit code 0/1")
    if only in (None, "commit"):
        _commit_options(commit)
    if only in (None, "prove"):
        _prove_options(prove)
    if only in (None, "verify"):
        _verify_options(verify)
    return parser


def _bits(option: str, low: int, high: int):
    """An argparse type: an integer in [low, high] (the option named in the error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{option} {value} must be in [{low}, {high}]")
        return value
    return parse


def _commit_options(commit) -> None:
    from .layers.network_zk import DEFAULT_MAX_PROOFS

    commit.add_argument("--model", "-m", required=True, type=_existing_file, help=MODEL_HELP)
    commit.add_argument("--out", "-o", "--output", "--commitment", dest="out", default=None, type=_writable_path,
                        help=f"where to write the commitment (default: {DEFAULT_COMMITMENT} in the current folder); "
                             "when given, a hiding commitment's SECRET prover state goes to this path + .state "
                             "unless --state names it")
    commit.add_argument("--max-proofs", type=int, default=DEFAULT_MAX_PROOFS,
                        help=f"proofs the hiding commitment supports (default {DEFAULT_MAX_PROOFS}; each is one "
                             "more hiding copy of the weights)")
    commit.add_argument("--state", type=_writable_path, default=None,
                        help="where to write the SECRET prover state of a hiding commitment (keep it as private "
                             "as the weights); required unless --out is given (then: that path + .state)")
    commit.add_argument("--calibration", type=_existing_file, default=None,
                        help="float .npy of representative inputs: a float model's input bound (and so its stated "
                             "worst-case output error) is their largest |x| rounded up to a power of two "
                             "(default: the model file's input_bound, else the widest of 8, 4, 2, 1 that fits); "
                             "a graph model's per-layer scales (default: 64 seeded uniform [-1, 1] inputs)")
    commit.add_argument("--act-bits", type=_bits("--act-bits", 2, 24), default=12,
                        help="a graph model's activation width in bits (default 12: each requantized tensor fits "
                             "it on the calibration data; fewer bits: smaller accumulators and proofs, more error)")
    commit.add_argument("--weight-bits", type=_bits("--weight-bits", 2, 16), default=8,
                        help="a graph model's weight width in bits (default 8; a layer whose worst case would wrap "
                             "the field is given fewer, down to 4)")
    commit.add_argument("--public-weights", action="store_true", help=PUBLIC_WEIGHTS_HELP)
    commit.add_argument("--private-input", action="store_true",
                        help="commit for proofs that may hide their input (prove --private-input): a ReLU MLP is "
                             "then committed by the graph proof (every other model always is); hiding weights only")
    commit.add_argument("--quiet", action="store_true", help="no progress bar")
    commit.add_argument("--scheme", choices=("auto", "ligero", "basefold"), default="auto",
                        help="the commitment: auto (default) takes the smaller proof at >= 100 bits: basefold for a "
                             "hiding ReLU MLP of at most 2^17 parameters x copies (16->16->4: 92 kB proofs verified in "
                             "24 ms, against ligero's 250 kB and 46 ms, for about the same prover time, 93 against "
                             "85 ms; but its commitment and prover state grow ~40x faster: 784->64->10 with 16 copies "
                             "takes 46 s, 58 MB and a 1.1 GB state against 1.7 s, 3.9 MB and 31 MB), ligero for "
                             "larger ones, for a graph "
                             "model (a small CNN: 436 kB against basefold's 3.7 MB, proved 25x faster) and for "
                             "--public-weights; ligero (Ligero-style: the faster prover) or basefold (O(log^2 n) "
                             "batched openings: smaller proofs of large models with --public-weights; a graph "
                             "model: hiding only, proof stores up to 2^19 entries) to choose; prove and verify "
                             "read it from the commitment's bytes")


def _prove_options(prove) -> None:
    prove.add_argument("--model", "-m", required=True, type=_existing_file, help=MODEL_HELP)
    inputs = prove.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--input", "-i", type=_existing_file, help="input .npy (batch, in_features): one proof")
    inputs.add_argument("--inputs", type=_existing_path,
                        help="batch mode, any model: a stacked .npy (N, *sample shape), one proof per --per-proof "
                             "samples, or a folder of .npy files, one proof each; proofs go to the folder --out as "
                             "proof_00000.bin, ... (each uses one hiding copy, reserved before any proof runs)")
    prove.add_argument("--per-proof", type=int, default=1, help="batch mode: rows of a stacked --inputs per proof")
    prove.add_argument("--dask", default=None,
                       help="batch mode: prove as tasks on dask.distributed, local:K (K local worker processes, one "
                            "thread each) or tcp://HOST:PORT (a scheduler); the SECRET prover state is sent to each "
                            "worker once; without the distributed extra installed, in this process")
    prove.add_argument("--out", "-o", "--output", "--proof", dest="out", default=DEFAULT_PROOF, type=_writable_path,
                       help=f"where to write the proof (default: {DEFAULT_PROOF} in the current folder)")
    prove.add_argument("--commitment", "-c", default=DEFAULT_COMMITMENT,
                       help=f"the commitment made by 'commit' (default: {DEFAULT_COMMITMENT}); its prover state "
                            "is read from --state")
    prove.add_argument("--state", default=None,
                       help="the secret prover state written by 'commit' (default: the commitment's path + .state); "
                            "each proof reserves its copy in its journal STATE.spent under a lock before proving. "
                            "NEVER copy or restore a prover state: an older copy would reuse copies and reveal the "
                            "weights (a state without its journal is refused)")
    prove.add_argument("--public-weights", action="store_true", help=PUBLIC_WEIGHTS_HELP)
    prove.add_argument("--private-input", action="store_true",
                       help="hide the input too (a zero-knowledge graph proof: the input is committed in the proof "
                            "and its range proven; verify with --private-input instead of --input); a ReLU MLP "
                            "must have been committed with 'commit --private-input'; with --inputs, every proof")
    prove.add_argument("--quiet", action="store_true", help="no progress bar")


def _verify_options(verify) -> None:
    verify.add_argument("--commitment", "-c", default=DEFAULT_COMMITMENT, type=_existing_file,
                        help=f"commitment file from 'commit' (default: {DEFAULT_COMMITMENT})")
    verify_inputs = verify.add_mutually_exclusive_group(required=True)
    verify_inputs.add_argument("--input", "-i", type=_existing_file, help="input .npy the proof is about")
    verify_inputs.add_argument("--private-input", action="store_true",
                               help="the proof is about a hidden input (made with prove --private-input): accept "
                                    "when some input in the model's range gives the proof's output; with --proofs "
                                    "DIR, every proof of the folder (batch mode)")
    verify_inputs.add_argument("--inputs", type=_existing_path,
                               help="batch mode: the --inputs given to 'prove' (a stacked .npy cut by --per-proof, "
                                    "or a folder of .npy files), checked against the folder --proofs; one line per "
                                    "proof, exit code 0 only if every proof verifies")
    verify.add_argument("--proof", "-p", default=None, type=_existing_file,
                        help=f"proof file from 'prove' (default: {DEFAULT_PROOF})")
    verify.add_argument("--proofs", default=None,
                        help="batch mode: the folder of proof_NNNNN.bin written by 'prove --inputs' (default: proofs)")
    verify.add_argument("--per-proof", type=int, default=1, help="batch mode: rows of a stacked --inputs per proof")
    verify.add_argument("--dask", default=None,
                        help="batch mode: verify as tasks on dask.distributed, local:K (K local worker processes) or "
                             "tcp://HOST:PORT; without the distributed extra installed, in this process")
    verify.add_argument("--output", "-y", default=None, type=_writable_path,
                        help="where to write the proven output (.npy, dequantized floats, batch first) on accept")
    verify.add_argument("--outputs", default=None,
                        help="batch mode: a folder for the proven outputs, output_NNNNN.npy per accepted proof")
    verify.add_argument("--quiet", action="store_true", help="batch mode: no progress bar")
    verify.add_argument("--allow-conjectured", action="store_true",
                        help="accept Basefold parameters whose soundness rests on the Reed-Solomon proximity "
                             "conjecture (refused by default; the reported bits are then conjectured)")
