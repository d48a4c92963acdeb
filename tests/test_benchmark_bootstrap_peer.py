"""benchmarks/bootstrap.py's OpenFHE half: the worker is skipped with its reason when its interpreter is missing,
the memory check refuses, and the comparison table prints the given figures and the hezk/OpenFHE ratio.
No OpenFHE needed: the worker runs only on machines with the 3.10 venv (../shared/PEERS.md)."""
import ast
import os
import sys

import pytest
from hypothesis import given, settings, strategies as st

from benchmarks import bootstrap as bench


def hezk_figures(seconds=14.0, median=15.0, bits=20.6, worst=14.3):
    return dict(seconds=seconds, median=median, cpu=13.5, bits=bits, worst_bits=worst, levels_left=8,
                rss_gb=10.05, keygen=30.2)


def openfhe_figures(best=35.1, median=36.0, bits=15.9, worst=15.0):
    return dict(best=best, median=median, best_cpu=34.0, bits=bits, worst_bits=worst, levels_left=7, rss_gb=10.9,
                keygen_seconds=31.7)


def test_missing_interpreter_is_skipped_with_its_reason(tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    path, reason = bench.openfhe_interpreter(str(missing))
    assert path is None
    assert reason.startswith("skipped") and str(missing) in reason and "3.10" in reason


def test_none_skips_and_an_executable_is_taken(tmp_path):
    assert bench.openfhe_interpreter("none") == (None, "skipped: --openfhe none")
    assert bench.openfhe_interpreter(sys.executable) == (sys.executable, None)
    plain = tmp_path / "python"
    plain.write_text("")                                # present but not executable: skipped
    assert bench.openfhe_interpreter(str(plain))[0] is None


def test_default_interpreter_is_the_venv(monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "OPENFHE_PYTHON", str(tmp_path / "absent"))
    path, reason = bench.openfhe_interpreter(None)
    assert path is None and str(tmp_path / "absent") in reason


def test_failing_worker_is_reported_not_raised(tmp_path, monkeypatch):
    worker = tmp_path / "worker.py"
    worker.write_text("import sys\nprint('ModuleNotFoundError: openfhe', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.setattr(bench, "OPENFHE_WORKER", str(worker))
    out = bench.run_openfhe(sys.executable, repeats=1, log_n=12, insecure=True)
    assert out["skipped"].startswith("failed (exit 3)") and "openfhe" in out["skipped"]


def test_worker_json_line_is_parsed_with_one_thread(tmp_path, monkeypatch):
    worker = tmp_path / "worker.py"
    worker.write_text("import json, os, sys\nprint('log line')\n"
                      "print(json.dumps(dict(argv=sys.argv[1:], omp=os.environ.get('OMP_NUM_THREADS'))))\n")
    monkeypatch.setattr(bench, "OPENFHE_WORKER", str(worker))
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    out = bench.run_openfhe(sys.executable, repeats=2, log_n=16, slots=32768)
    assert out["omp"] == "1"
    assert out["argv"] == ["--repeats", "2", "--log-n", "16", "--slots", "32768"]
    out = bench.run_openfhe(sys.executable, repeats=1, log_n=12, insecure=True, levels_after=7)
    assert out["argv"] == ["--repeats", "1", "--log-n", "12", "--insecure", "--levels-after", "7"]


def test_memory_check_refuses_below_the_limit():
    with pytest.raises(SystemExit, match="min-available-gb 12"):
        bench.check_memory("OpenFHE", 12.0, available=lambda: 5.0)
    bench.check_memory("hezk", 12.0, available=lambda: 20.0)


def test_table_prints_the_figures_and_the_ratio():
    table = bench.comparison_table(hezk_figures(), openfhe_figures())
    lines = table.splitlines()
    best = next(ln for ln in lines if ln.startswith("bootstrap best (s)")).split()
    assert best[-2:] == ["14.00", "35.10"]
    assert next(ln for ln in lines if ln.startswith("levels left")).split()[-2:] == ["8", "7"]
    assert next(ln for ln in lines if ln.startswith("peak RSS")).split()[-2:] == ["10.05", "10.90"]
    assert f"{14.0 / 35.1:.2f}x best" in lines[-1] and f"{15.0 / 36.0:.2f}x median" in lines[-1]
    assert "not met" in lines[-1]                       # 0.40x but worst case 14.3 < 15.0 bits


@settings(max_examples=30, deadline=None)
@given(h=st.floats(0.5, 200), o=st.floats(0.5, 200), hw=st.floats(5, 30), ow=st.floats(5, 30))
def test_goal_verdict_follows_ratio_and_worst_case_precision(h, o, hw, ow):
    last = bench.comparison_table(hezk_figures(seconds=h, worst=hw), openfhe_figures(best=o, worst=ow)) \
        .splitlines()[-1]
    met = h / o <= 0.7 and hw >= ow
    assert ("goal <= 0.7x" in last) and (("met;" in last and "not met" not in last) if met else "not met" in last)
    assert f"{h / o:.2f}x best" in last


def test_worker_has_only_allowed_imports():
    path = os.path.join(os.path.dirname(bench.__file__), "peers", "openfhe_bootstrap.py")
    tree = ast.parse(open(path).read())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert roots - set(sys.stdlib_module_names) == {"openfhe", "numpy", "openfhe_ops"}   # the worker beside it
