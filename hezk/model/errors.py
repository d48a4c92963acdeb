"""The errors of the model description and its readers (both engines turn them into their own types)."""
from __future__ import annotations


class ModelFileError(ValueError):
    """A model file or graph the description cannot hold: the message names the file entry, node or value."""


class UnsupportedOperator(ModelFileError):
    """An operator (or an attribute of one) the description does not cover; ``op`` and ``node`` name it."""

    def __init__(self, op: str, node: str, detail: str = ""):
        self.op, self.node = op, node
        text = f"unsupported operator {op} (node {node!r})"
        super().__init__(text + (f": {detail}" if detail else ""))


class MissingInputShape(ModelFileError):
    """The file does not state the sample shape (a convolution first, a symbolic ONNX dimension): pass one."""
