"""Layer proofs: matmul (:class:`Linear`), zkReLU (:class:`ReLU`), requantization, whole networks (:class:`Network`)."""
from .network import ModelCommitment, Network, NetworkProof, verify_network
from .spec import Linear, ReLU, build_model

__all__ = ["Linear", "ReLU", "build_model", "ModelCommitment", "Network", "NetworkProof", "verify_network"]
