"""Layer proofs: matmul (:class:`Linear`), zkReLU (:class:`ReLU`), requantization, whole networks (:class:`Network`).

The re-exports below are imported on first use (``hezk._lazy``), so a lower module that needs one light
submodule (``proofs.relations`` takes ``proofs.layers.packing``) does not import the network prover, which
imports ``proofs.relations`` back."""
from typing import TYPE_CHECKING

from hezk._lazy import lazy_package

lazy_package(__name__)

if TYPE_CHECKING:  # static tools (and lazy_package, which reads this block) see the imports
    from .network import ModelCommitment, Network, NetworkProof, verify_network
    from .spec import Linear, ReLU, build_model

__all__ = ["Linear", "ReLU", "build_model", "ModelCommitment", "Network", "NetworkProof", "verify_network"]
