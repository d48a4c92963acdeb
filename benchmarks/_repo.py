"""Imported first by the proof benchmarks: one BLAS and numba thread (comparable with single-threaded peers),
and the repository root ahead of this folder on the import path (``benchmarks/proofs.py`` is named like the
``proofs`` package it measures)."""
import os
import pathlib
import sys

if "numba" not in sys.modules:  # a script starting: set before the libraries read them. Imported into a running
    # process (the tests), never: numba re-reads its settings at each compilation and refuses a thread count
    # other than the one its pool was launched with
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
