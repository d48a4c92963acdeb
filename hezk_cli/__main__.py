"""``python -m hezk_cli``: the ``hezk`` console script."""
import sys

from hezk_cli import main

sys.exit(main())
