"""``python -m tensor_ops ...``: see ``tensor_ops.cli``."""
import sys

from tensor_ops.cli import main
from hezk.memory import for_a_program

for_a_program()
sys.exit(main())
