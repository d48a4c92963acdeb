"""Re-run chosen mutants of an earlier ``run.py`` scratch folder against new or changed test files.

    python tests/mutation/recheck.py /tmp/hezk-mutation tests/crypto/test_ring_checks.py --status 0
    python tests/mutation/recheck.py /tmp/hezk-mutation tests/crypto/test_ring_checks.py --mutants NAME ...

Copies the test files from the repository into the scratch folder's ``mutants/`` tree, then for each mutant
(``--mutants``, or every mutant of the module whose recorded mutmut exit code is in ``--status``: 0 survived,
33 reached by no test) runs pytest on those files with ``MUTANT_UNDER_TEST`` set (mutmut's trampoline reads
it) and prints ``killed`` or ``survived``. It shows that a new test fails under the mutant it is meant to kill
(tests/mutation/survivors.md, "killed later"); mutmut's own results in the folder are left as they were.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", help="the scratch folder of an earlier run.py")
    parser.add_argument("tests", nargs="+", help="test files or node ids (repository paths) to run against each mutant")
    parser.add_argument("--copy", nargs="*", default=[], help="helper files the tests import, copied but not run")
    parser.add_argument("--mutants", nargs="*", default=[], help="mutant names")
    parser.add_argument("--status", type=int, nargs="*", default=[], help="recorded exit codes to re-run")
    parser.add_argument("--functions", help="every mutant whose function name matches this regex (any status, "
                                             "not run ones included: a freshly generated folder)")
    parser.add_argument("--json", help="write {mutant: 'killed' | 'survived'} here")
    parser.add_argument("--in-process", action="store_true",
                        help="one Python process for every mutant (pytest.main per mutant; mutmut's trampoline "
                             "reads MUTANT_UNDER_TEST at each call, and it does not mutate decorated, e.g. cached, "
                             "functions)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per mutant with --in-process (then killed)")
    parser.add_argument("--control-every", type=int, default=25,
                        help="with --in-process: run the tests without a mutant first and after every N mutants; "
                             "a failing control (state left behind by a mutant) stops the run, and the mutants "
                             "since the last passing control are left out of the results")
    args = parser.parse_args(argv)
    mutants_dir = Path(args.work) / "mutants"
    names = list(args.mutants)
    if args.status:
        for meta in mutants_dir.rglob("*.meta"):
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            names += sorted(n for n, c in codes.items() if c in args.status and n not in names)
    if args.functions:
        for meta in mutants_dir.rglob("*.meta"):
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            names += sorted(n for n in codes if re.search(args.functions, n.rsplit(".", 1)[-1]) and n not in names)
    for path in {test.split("::")[0] for test in args.tests} | set(args.copy):
        (mutants_dir / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, mutants_dir / path)
    results = {}
    command = ["-q", "-x", "-p", "no:cacheprovider", "-m", "not slow", *args.tests]
    if args.in_process:
        os.chdir(mutants_dir)
        sys.path.insert(0, str(mutants_dir))
        if not _run_in_process("", command, args.timeout):
            print("control run (no mutant) fails: every mutant would count as killed", flush=True)
            return 2
    pending = {}  # results since the last passing control
    for index, name in enumerate(names, 1):
        if args.in_process:
            passed = _run_in_process(name, command, args.timeout)
        else:
            env = dict(os.environ, MUTANT_UNDER_TEST=name, PYTHONDONTWRITEBYTECODE="1")
            passed = subprocess.run([sys.executable, "-m", "pytest", *command], cwd=mutants_dir, env=env,
                                    capture_output=True, text=True).returncode == 0
        pending[name] = "survived" if passed else "killed"
        print(f"{pending[name]}: {name}", flush=True)
        if args.in_process and (index % args.control_every == 0 or index == len(names)):
            if not _run_in_process("", command, args.timeout):
                print(f"control run fails after {name}: the {len(pending)} mutants since the last passing "
                      f"control are left out", flush=True)
                break
        if not args.in_process or index % args.control_every == 0 or index == len(names):
            results.update(pending)
            pending = {}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"{sum(v == 'killed' for v in results.values())} of {len(results)} killed")
    return 0


def _run_in_process(name: str, command: list, timeout: int) -> bool:
    """pytest.main under mutant ``name`` in this process; True when every test passed (a timeout is a kill)."""
    import contextlib
    import io
    import signal

    import pytest

    def expire(*_):
        raise TimeoutError(f"{name}: over {timeout} s")

    if name:
        os.environ["MUTANT_UNDER_TEST"] = name
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return pytest.main(command) == 0
    except TimeoutError:
        return False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.environ.pop("MUTANT_UNDER_TEST", None)


if __name__ == "__main__":
    sys.exit(main())
