"""Layer proofs: matmul, zkReLU, requantization, whole networks."""
