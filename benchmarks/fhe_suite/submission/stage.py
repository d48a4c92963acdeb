#!/usr/bin/env python3
"""Every stage executable of hezk's entry: the build links submission/build/<stage> here (hezk_entry.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from hezk_entry import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
