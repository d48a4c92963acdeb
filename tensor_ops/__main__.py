"""``python -m tensor_ops ...``: see ``tensor_ops.cli``."""
import sys

from tensor_ops.cli import main

sys.exit(main())
