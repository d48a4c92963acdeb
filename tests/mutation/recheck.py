"""Re-run chosen mutants of an earlier ``run.py`` scratch folder against new or changed test files.

    python tests/mutation/recheck.py /tmp/hezk-mutation tests/crypto/test_ring_mutants.py --status 0
    python tests/mutation/recheck.py /tmp/hezk-mutation tests/crypto/test_ring_mutants.py --mutants NAME ...

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
    parser.add_argument("--json", help="write {mutant: 'killed' | 'survived'} here")
    args = parser.parse_args(argv)
    mutants_dir = Path(args.work) / "mutants"
    names = list(args.mutants)
    if args.status:
        for meta in mutants_dir.rglob("*.meta"):
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            names += sorted(n for n, c in codes.items() if c in args.status and n not in names)
    for path in {test.split("::")[0] for test in args.tests} | set(args.copy):
        (mutants_dir / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, mutants_dir / path)
    results = {}
    for name in names:
        env = dict(os.environ, MUTANT_UNDER_TEST=name, PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
                               *args.tests], cwd=mutants_dir, env=env, capture_output=True, text=True)
        results[name] = "survived" if done.returncode == 0 else "killed"
        print(f"{results[name]}: {name}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"{sum(v == 'killed' for v in results.values())} of {len(results)} killed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
