"""``python -m hezk``: the ``hezk`` console script."""
import sys

from hezk.cli import program

sys.exit(program())
