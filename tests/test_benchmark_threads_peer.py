"""benchmarks/threads.py's OpenFHE columns: the workers' JSON read into rows, hezk/OpenFHE ratios at each thread count,
a failing worker reported instead of raised, and the ops worker itself (where the 3.10 venv exists)."""
import ast
import json
import os
import sys

import pytest

from benchmarks import threads as bench
from benchmarks.bootstrap import OPENFHE_PYTHON

OPS = {"log_n": 14, "best": {"mul_rescale": {"1": 0.030, "2": 0.020}, "rotate": {"1": 0.025, "2": 0.015}}}


def test_ops_worker_rows_are_keyed_by_hezk_labels():
    rows = bench.openfhe_rows(OPS, 2)
    assert rows == {"ct x ct + relin + rescale N14": (0.030, 0.020), "rotation N14": (0.025, 0.015)}


def test_bootstrap_worker_rows_take_the_best_of_each_count():
    result = {"by_threads": {"1": {"best": 30.0}, "2": {"best": 18.0}}, "best": 30.0}
    assert bench.openfhe_rows(result, 2) == {"bootstrap N16_BOOT": (30.0, 18.0)}
    assert bench.openfhe_rows({"skipped": "no venv"}, 2) == {}


def test_ratios_are_hezk_over_openfhe_at_the_same_count():
    rows = [["ct x ct + relin + rescale N14", 24.0, 15.0, 1.6, "yes"], ["Basefold commit", 100.0, 60.0, 1.67, "yes"]]
    out = bench.ratio_rows(rows, bench.openfhe_rows(OPS, 2), 2)
    assert len(out) == 1                      # only the rows OpenFHE timed
    label, h1, o1, r1, h2, o2, r2, speedup = out[0]
    assert (label, h1, h2) == ("ct x ct + relin + rescale N14", 24.0, 15.0)
    assert o1 == pytest.approx(30.0) and o2 == pytest.approx(20.0)
    assert r1 == pytest.approx(24 / 30) and r2 == pytest.approx(15 / 20) and speedup == pytest.approx(1.5)


def test_failing_worker_is_reported_not_raised(tmp_path, monkeypatch):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: openfhe' >&2\nexit 3\n")
    python.chmod(0o755)
    result = bench.openfhe_worker(str(python), "openfhe_ops.py", ["--threads", 1, 2])
    assert "exit 3" in result["skipped"] and "openfhe" in result["skipped"]


def test_worker_json_line_is_parsed_without_this_checkout_on_its_path(tmp_path, monkeypatch):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho log line\necho \"{\\\"pythonpath\\\": \\\"$PYTHONPATH\\\", "
                      "\\\"omp\\\": \\\"$OMP_NUM_THREADS\\\"}\"\n")
    python.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert bench.openfhe_worker(str(python), "openfhe_ops.py", []) == {"pythonpath": "", "omp": ""}


def test_each_count_runs_in_its_own_worker_with_its_omp_count(tmp_path):
    """OpenFHE fixes its thread count at start: one process per count, OMP_NUM_THREADS=n, figures merged."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"{\\\"log_n\\\": 14, \\\"best\\\": {\\\"rotate\\\": "
                      "{\\\"$OMP_NUM_THREADS\\\": $OMP_NUM_THREADS}}}\"\n")
    python.chmod(0o755)
    merged = bench.openfhe_counts(str(python), "openfhe_ops.py", [], (1, 2), 3)
    assert merged["best"] == {"rotate": {"1": 1, "2": 2}}
    python.write_text("#!/bin/sh\nexit 4\n")
    assert "skipped" in bench.openfhe_counts(str(python), "openfhe_ops.py", [], (1, 2), 3)


def test_ops_worker_has_only_allowed_imports():
    path = os.path.join(os.path.dirname(bench.__file__), "peers", "openfhe_ops.py")
    tree = ast.parse(open(path).read())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots - set(sys.stdlib_module_names) == {"openfhe", "numpy"}


@pytest.mark.slow
@pytest.mark.skipif(not os.access(OPENFHE_PYTHON, os.X_OK), reason="no OpenFHE 3.10 venv (../shared/PEERS.md)")
def test_ops_worker_times_both_operations_at_each_count():
    result = bench.openfhe_counts(OPENFHE_PYTHON, "openfhe_ops.py", ["--log-n", 12, "--depth", 2], (1, 2), 1)
    assert "skipped" not in result, result
    assert result["effective_threads"] == {"1": 1}                 # the first process's count
    assert set(result["best"]) == {"mul_rescale", "rotate"}
    assert all(0 < t < 10 for v in result["best"].values() for t in v.values())
    assert json.dumps(bench.openfhe_rows(result, 2))               # keyed as hezk's rows ("N12")


@pytest.mark.skipif(not os.path.exists(OPENFHE_PYTHON), reason="needs the OpenFHE 3.10 venv (../shared/PEERS.md)")
def test_the_thread_switch_reaches_the_runtime_openfhe_runs_on():
    """One libgomp mapped after omp_runtime (a second copy loaded by path would take the counts openfhe never reads),
    and the count set there is the one read back."""
    import subprocess
    peers = os.path.join(os.path.dirname(bench.__file__), "peers")
    code = ("import sys; sys.path.insert(0, %r); import openfhe; from openfhe_ops import omp_runtime; "
            "s, g = omp_runtime(openfhe); s(1); one = g(); s(2); two = g(); "
            "maps = {l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l}; "
            "print(len(maps), one, two)" % peers)
    out = subprocess.run([OPENFHE_PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OMP_NUM_THREADS="2"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "2"]
