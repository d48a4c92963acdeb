"""The errors of the model description and its readers (both engines turn them into their own types)."""
from __future__ import annotations


class ModelFileError(ValueError):
    """A model file or graph the description cannot hold: the message names the file entry, node or value."""


class UnsupportedOperator(ModelFileError):
    """An operator (or an attribute of one) the description does not cover; ``op`` and ``node`` name it,
    ``hint`` the rewrite that would make it run (when one exists). A reader that finds several raises one
    ``UnsupportedOperator.collect(found)``: ``problems`` lists every one (``op``/``node``: the first)."""

    def __init__(self, op: str, node: str, detail: str = "", hint: str = ""):
        self.op, self.node, self.detail, self.hint = op, node, detail, hint
        self.problems = (self,)
        super().__init__(self.line())

    def line(self) -> str:
        text = f"unsupported operator {self.op} (node {self.node!r})" + (f": {self.detail}" if self.detail else "")
        return text + (f" (rewrite: {self.hint})" if self.hint else "")

    @classmethod
    def collect(cls, problems) -> "UnsupportedOperator":
        """One error listing every problem in ``problems`` (UnsupportedOperator objects, at least one)."""
        problems = tuple(problems)
        if len(problems) == 1:
            return problems[0]
        first = problems[0]
        error = cls(first.op, first.node, first.detail, first.hint)
        error.problems = problems
        error.args = (f"{len(problems)} unsupported operators: " + "; ".join(p.line() for p in problems),)
        return error


class MissingInputShape(ModelFileError):
    """The file does not state the sample shape (a convolution first, a symbolic ONNX dimension): pass one."""
