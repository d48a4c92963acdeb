"""Start-up and fixed overhead of the ``hezk`` command line (issue 35, item 4).

    python benchmarks/cli.py [--repeat 5]

Runs ``hezk --help``, ``hezk --version`` and each command on the smallest inputs as fresh processes: the
encrypted commands on a 4-3-2 model at the parameters a user gets (``plan``, ``keygen``, ``encrypt``, ``infer``
as the server and all in one process, ``decrypt``: N = 2^13, a few milliseconds of homomorphic work), the
proofs commands on a 4-8-2 ReLU MLP (``commit``, ``prove`` and ``verify`` with public weights, and the default
hiding commitment, Basefold: well under a second of work), ``--repeat`` times after one warm-up run each (the
warm-up writes the bytecode and numba caches a first run fills), and prints the wall time (median, min, max) and
the processes' CPU time (median: it does not count the time other processes hold the cores of a shared machine)
against the targets: 0.3 s for ``--help``, 1 s for a command's fixed overhead, on a quiet machine. The children
run without ``PYTHONDONTWRITEBYTECODE`` (an installed package has its bytecode cached) and with this source tree
first on their import path (the code measured is the checkout's, installed or not).

What the fixed cost is (``python -X importtime``, 2 cores, load ~1): numba's first cached kernel loads its CPU
target, ~0.45 s, of which ~0.3 s is SciPy (numba.np.arraymath imports scipy.linalg.cython_blas to check BLAS,
and scipy.linalg pulls numpy.f2py and charset_normalizer); numpy ~0.1 s; hezk's own modules ~0.1 s.
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
    ("hezk keygen", ["keygen", "--model", "model.npz", "--client", "client.key", "--context", "public.ctx",
                     "--no-progress"], COMMAND_TARGET),
    ("hezk encrypt", ["encrypt", "--client", "client.key", "--input", "x.npy", "--out", "request.bin"],
     COMMAND_TARGET),
    ("hezk infer (server)", ["infer", "--model", "model.npz", "--context", "public.ctx", "--request", "request.bin",
                             "--out", "reply.bin", "--no-progress"], COMMAND_TARGET),
    ("hezk decrypt", ["decrypt", "--client", "client.key", "--reply", "reply.bin", "--out", "y.npy"],
     COMMAND_TARGET),
    ("hezk infer (local)", ["infer", "--model", "model.npz", "--input", "x.npy", "--out", "y.npy", "--no-progress"],
     COMMAND_TARGET),
    ("hezk commit (4-8-2 MLP)", ["commit", "--model", "mlp.npz", "--out", "c.bin", "--public-weights"],
     COMMAND_TARGET),
    ("hezk prove", ["prove", "--model", "mlp.npz", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
                    "--public-weights", "--quiet"], COMMAND_TARGET),
    ("hezk verify", ["verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin"], COMMAND_TARGET),
    ("hezk commit (hiding)", ["commit", "--model", "mlp.npz", "--out", "h.bin", "--max-proofs", "16", "--quiet"],
     COMMAND_TARGET),
    ("hezk prove (hiding)", ["prove", "--model", "mlp.npz", "--input", "x.npy", "--commitment", "h.bin", "--out",
                             "hp.bin", "--quiet"], COMMAND_TARGET),
    ("hezk verify (hiding)", ["verify", "--commitment", "h.bin", "--input", "x.npy", "--proof", "hp.bin"],
     COMMAND_TARGET),
]
#: commands whose runs each use up something the next needs again (a hiding copy): the inputs are made again
#: before each run, untimed
REFRESH = {"hezk prove (hiding)": ["commit", "--model", "mlp.npz", "--out", "h.bin", "--max-proofs", "16",
                                   "--quiet"]}


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
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_repo.HERE.parent), env.get("PYTHONPATH")]))
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        _files(folder)
        for name, args, target in COMMANDS:
            run_once(args, folder, env)  # warm-up: bytecode and numba caches
            timed = []
            for _ in range(options.repeat):
                if name in REFRESH:
                    run_once(REFRESH[name], folder, env)
                timed.append(run_once(args, folder, env))
            walls, cpus = zip(*timed)
            median = statistics.median(walls)
            rows.append((name, median, min(walls), max(walls), statistics.median(cpus), target,
                         "yes" if median <= target else "NO"))
    print_table(f"hezk start-up and per-command overhead, seconds ({options.repeat} runs after a warm-up; load "
                f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
                ["command", "wall median", "min", "max", "CPU median", "target", "met"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
