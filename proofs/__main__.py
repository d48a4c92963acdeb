"""``python -m proofs``: see :mod:`proofs.cli`."""
import sys

from .cli import main
from hezk.memory import for_a_program

for_a_program()
sys.exit(main())
