"""``python -m proofs``: see :mod:`proofs.cli`."""
import sys

from .cli import main

sys.exit(main())
