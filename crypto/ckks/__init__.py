"""CKKS-specific code: encoder, evaluator, precision statistics."""
