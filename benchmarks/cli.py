"""Start-up and fixed overhead of the ``hezk`` command line (issue 35, item 4).

    python benchmarks/cli.py [--repeat 5]

Runs ``hezk --help``, ``hezk --version`` and each command on the smallest inputs (a 4-3-2 model for ``plan``,
an 4-8-2 ReLU MLP with public weights for ``commit``, ``prove`` and ``verify``: well under a second of work)
as fresh processes, ``--repeat`` times after one warm-up run each (the warm-up writes the bytecode and numba
caches a first run fills), and prints the wall time (median, min, max) and the processes' CPU time (median:
it does not count the time other processes hold the cores of a shared machine) against the targets: 0.3 s for
``--help``, 1 s for a command's fixed overhead, on a quiet machine. The children run without
``PYTHONDONTWRITEBYTECODE`` (an installed package has its bytecode cached).
"""
from __future__ import annotations

try:
    import _repo  # noqa: F401  (run as a script: the repository root on the import path)
except ImportError:
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.cli)

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks._timing import print_table  # noqa: E402

HELP_TARGET, COMMAND_TARGET = 0.3, 1.0


def _files(folder: str) -> None:
    """The smallest inputs: a CKKS model, a ReLU MLP, an input, then a commitment and a proof of it."""
    import numpy as np

    from tensor_ops.nn import Linear, Sequential, Square

    rng = np.random.default_rng(0)
    Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(2, 3)))],
               input_shape=(4,)).save(os.path.join(folder, "model.npz"))
    np.savez(os.path.join(folder, "mlp.npz"), w0=0.3 * rng.normal(size=(8, 4)), b0=np.zeros(8),
             w1=0.3 * rng.normal(size=(2, 8)), b1=np.zeros(2), activation="relu")
    np.save(os.path.join(folder, "x.npy"), rng.uniform(-1, 1, size=(1, 4)))


COMMANDS = [
    ("hezk --help", ["--help"], HELP_TARGET),
    ("hezk --version", ["--version"], HELP_TARGET),
    ("hezk plan (4-3-2 model)", ["plan", "--model", "model.npz"], COMMAND_TARGET),
    ("hezk commit (4-8-2 MLP)", ["commit", "--model", "mlp.npz", "--out", "c.bin", "--public-weights"],
     COMMAND_TARGET),
    ("hezk prove", ["prove", "--model", "mlp.npz", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
                    "--public-weights", "--quiet"], COMMAND_TARGET),
    ("hezk verify", ["verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin"], COMMAND_TARGET),
]


def run_once(args, folder: str, env) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of ``python -m hezk args`` in ``folder``; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "hezk", *args], cwd=folder, env=env, capture_output=True,
                            text=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"hezk {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per command (default 5)")
    options = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        _files(folder)
        for name, args, target in COMMANDS:
            run_once(args, folder, env)  # warm-up: bytecode and numba caches
            walls, cpus = zip(*(run_once(args, folder, env) for _ in range(options.repeat)))
            median = statistics.median(walls)
            rows.append((name, median, min(walls), max(walls), statistics.median(cpus), target,
                         "yes" if median <= target else "NO"))
    print_table(f"hezk start-up and per-command overhead, seconds ({options.repeat} runs after a warm-up; load "
                f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
                ["command", "wall median", "min", "max", "CPU median", "target", "met"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
