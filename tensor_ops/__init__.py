"""tensor_ops package."""
