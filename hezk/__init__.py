"""hezk: privacy-preserving compute on tensors, one namespace for both halves.

Encrypted compute (RNS-CKKS, the einsum planner, encrypted inference) lives in :mod:`crypto` and
:mod:`tensor_ops`; verifiable compute (sumcheck proofs of quantized networks) in :mod:`proofs`. This package
holds the foundations both engines share, below them:

- :mod:`hezk.model`: the model description (a graph of tensor operations) and its readers (ONNX, ``.npz``);
- :mod:`hezk.record`: the one byte container of every stored or sent record;
- :mod:`hezk.tasks`: batches over Dask workers (in process without the ``distributed`` extra);
- :mod:`hezk.progress`: progress reporting; :mod:`hezk.memory`: the opt-in allocator setting;

and, as attributes of ``hezk`` itself, the public API of both halves (``hezk.CKKSContext``, ``hezk.einsum``,
``hezk.load_model``, ``hezk.Network``, ...) and the one-liners from the model you bring (``hezk.compile``,
``hezk.commit``, ``hezk.verify``, ``hezk.from_torch``: :mod:`hezk.api`). Those attributes are resolved on
first use (PEP 562), so importing a foundation (``import hezk.record``, as the engines do) never imports the
engines: the facade is the top floor of the import graph, the foundations its bottom one (docs/architecture.md).
"""
from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("hezk")  # one source: the version in pyproject.toml
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

#: public name -> (module, attribute): the API of both halves, imported on first use
_PUBLIC = {
    # encrypted compute: parameters, keys, ciphertexts
    "CKKSParameters": ("crypto", "CKKSParameters"),
    "CKKSContext": ("crypto", "CKKSContext"),
    "Ciphertext": ("crypto", "Ciphertext"),
    "HEError": ("crypto", "HEError"),
    "ParameterError": ("crypto", "ParameterError"),
    # the einsum planner and encrypted tensors
    "einsum": ("tensor_ops", "einsum"),
    "plan": ("tensor_ops", "plan"),
    "encrypt": ("tensor_ops", "encrypt"),
    "CipherTensor": ("tensor_ops", "CipherTensor"),
    # encrypted inference
    "Sequential": ("tensor_ops", "Sequential"),
    "Client": ("tensor_ops", "Client"),
    "Server": ("tensor_ops", "Server"),
    "choose_parameters": ("tensor_ops", "choose_parameters"),
    "InputRangeError": ("tensor_ops", "InputRangeError"),
    "OutputRangeError": ("tensor_ops", "OutputRangeError"),
    "from_graph": ("tensor_ops.nn", "from_graph"),
    # the shared model description
    "load_model": ("hezk.model", "load"),
    "Graph": ("hezk.model", "Graph"),
    "ModelFileError": ("hezk.model", "ModelFileError"),
    # from your model, both halves in a line each (hezk.api; torch optional)
    "from_torch": ("hezk.model.torch_export", "from_torch"),
    "compile": ("hezk.api", "compile"),
    "CompiledModel": ("hezk.api", "CompiledModel"),
    "commit": ("hezk.api", "commit"),
    "Prover": ("hezk.api", "Prover"),
    "prove": ("hezk.api", "prove"),
    "verify": ("hezk.api", "verify"),
    "Verified": ("hezk.api", "Verified"),
    # proofs
    "Network": ("proofs", "Network"),
    "verify_network": ("proofs", "verify_network"),
    "ProofError": ("proofs", "ProofError"),
    "ProofRejected": ("proofs", "ProofRejected"),
    "Verdict": ("proofs", "Verdict"),
    "commit_step": ("proofs", "commit_step"),
    "prove_training_step": ("proofs", "prove_training_step"),
    "verify_training_step": ("proofs", "verify_training_step"),
    # threads of the compiled kernels, process-wide (hezk.threads; HEZK_THREADS, default the cores available)
    "set_threads": ("hezk.threads", "set_threads"),
    "get_threads": ("hezk.threads", "get_threads"),
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str):
    """The public API, imported on first use (PEP 562); AttributeError for any other name."""
    try:
        module, attribute = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'hezk' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
