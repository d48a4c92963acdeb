"""proofs package."""
