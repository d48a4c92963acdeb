"""Mutation testing of the verifiers, the commitments and the crypto core with mutmut (not part of the test run).

    pip install -e ".[test,mutation]"
    python tests/mutation/run.py                      # every module, a sample of mutants (see --sample)
    python tests/mutation/run.py proofs/commit.py --sample 0   # one module, all of its mutants

For each module: copy the working tree to a scratch folder (``--work``, never the repository itself), write
mutmut's configuration there (the module to mutate, the fast tests that exercise it), let mutmut generate the
mutants and record which test reaches which function, then run the chosen mutants: every mutant of a
*verifier-check* function (names matching ``CHECKS``) and a seeded random sample of ``--sample`` of the others
(0: all). mutmut runs only the tests that reach the mutated function. Survivors are classified: a mutant that
changes only the text or ``where`` of an exception it raises, or a transcript label used identically by prover
and verifier, is *diagnostic* (equivalent for soundness: the verifier still raises ProofRejected); the rest are
listed for a test or an argument (tests/mutation/survivors.md). Prints the score per module and overall.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: module -> the fast tests that exercise it
MODULES = {
    "proofs/commit.py": ["tests/proofs/test_commit.py", "tests/proofs/test_verifier_checks.py",
                         "tests/proofs/test_rejection_reasons.py", "tests/proofs/test_fiat_shamir_known_answers.py"],
    "proofs/zk.py": ["tests/proofs/test_zk.py", "tests/proofs/test_zk_seeding.py",
                     "tests/proofs/test_zk_opening_checks.py", "tests/proofs/test_verifier_checks.py",
                     "tests/proofs/test_rejection_reasons_zk.py", "tests/proofs/test_fiat_shamir_known_answers.py"],
    "proofs/sumcheck.py": ["tests/proofs/test_sumcheck.py", "tests/proofs/test_sumcheck_inputs.py",
                           "tests/proofs/test_verifier_checks.py", "tests/proofs/test_sumcheck_pickle.py",
                           "tests/proofs/test_rejection_reasons_sumcheck.py",
                           "tests/proofs/test_fiat_shamir_known_answers.py",
                           "tests/proofs/test_sumcheck_verifier_api.py"],
    "proofs/transcript.py": ["tests/proofs/test_transcript.py", "tests/proofs/test_verifier_checks.py"],
    "proofs/layers/relu.py": ["tests/proofs/test_layers.py", "tests/proofs/test_verifier_checks.py",
                              "tests/proofs/test_tamper.py", "tests/proofs/test_verifier_checks_more.py",
                              "tests/proofs/test_network_basefold.py",
                              "tests/proofs/test_rejection_reasons_layers.py"],
    "proofs/layers/network.py": ["tests/proofs/test_network.py", "tests/proofs/test_tamper.py",
                                 "tests/proofs/test_verifier_checks.py", "tests/proofs/test_network_basefold.py",
                                 "tests/proofs/test_network_checks.py",
                                 "tests/proofs/test_rejection_reasons_layers.py"],
    "proofs/layers/network_zk.py": ["tests/proofs/test_network.py", "tests/proofs/test_tamper.py",
                                    "tests/proofs/test_verifier_checks.py", "tests/proofs/test_verifier_checks_more.py",
                                    "tests/proofs/test_network_checks.py",
                                    "tests/proofs/test_rejection_reasons_layers.py",
                                    "tests/proofs/test_network_zk_checks.py"],
    "proofs/layers/step_relations.py": ["tests/proofs/test_training.py", "tests/proofs/test_zk_training.py",
                                        "tests/proofs/test_verifier_checks.py",
                                        "tests/proofs/test_verifier_checks_more.py",
                                        "tests/proofs/test_rejection_reasons_layers.py"],
    "proofs/layers/reusable.py": ["tests/proofs/test_verifier_checks.py", "tests/proofs/test_commitment_reuse_hiding.py",
                                  "tests/proofs/test_verifier_checks_more.py",
                                  "tests/proofs/test_rejection_reasons_layers.py",
                                  "tests/proofs/test_network_zk_checks.py"],
    "proofs/basefold.py": ["tests/proofs/test_basefold.py", "tests/proofs/test_basefold_zk.py",
                           "tests/proofs/test_network_basefold.py", "tests/proofs/test_network_basefold_zk.py",
                           "tests/proofs/test_step_basefold.py", "tests/proofs/test_network_zk_checks.py",
                           "tests/proofs/test_rejection_reasons_layers.py", "tests/proofs/test_basefold_checks.py"],
    "proofs/basefold_zk.py": ["tests/proofs/test_basefold_zk.py", "tests/proofs/test_network_basefold_zk.py",
                              "tests/proofs/test_network_zk_checks.py"],
    "crypto/ring.py": ["tests/crypto/test_ring.py"],
    "crypto/keyswitch.py": ["tests/crypto/test_ring.py", "tests/crypto/test_keyswitch.py",
                            "tests/crypto/test_ckks.py"],
    "crypto/ckks/evaluator.py": ["tests/crypto/test_ckks.py", "tests/crypto/test_ckks_errors.py",
                                 "tests/crypto/test_ckks_precision.py"],
}
#: functions whose mutants are always run: the verifiers' checks
#: ("Sumcheck" is not "check": the prover class's methods are not checks, the verifier class's are)
CHECKS = re.compile(r"verify|Verifier|(?<![sS]um)check|_queries|_begin|_challenges|_absorb|combine_evaluations|"
                    r"subclaim|require|_merkle_root_from|_statement|_agreement")
#: mutmut's exit codes for "no test reaches this function" (mutmut.stats.status_by_exit_code)
_NO_TESTS = {5, 33}
_DIAGNOSTIC = re.compile(r"raise \w+\(|ProofRejected\(|ProofError\(|ParameterError\(|\.absorb\(|challenge\w*\(\s*f?\"")


def _copy_tree(work: Path) -> None:
    if work.exists():
        shutil.rmtree(work)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file() and not name.startswith("out/"):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / name)


def _configure(work: Path, module: str, tests: list) -> None:
    tests = [t for t in tests if (work / t).exists()]
    # every top-level package of the tree (the mutated module imports its siblings)
    packages = sorted({p.parent.name for p in work.glob("*/__init__.py")} | {"tests"})
    config = ("\n[tool.mutmut]\n"
              f"source_paths = [{json.dumps(module)}]\n"
              f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
              f"also_copy = {json.dumps(packages)}\n"
              'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x", "-m", "not slow"]\n')
    with open(work / "pyproject.toml", "a") as handle:
        handle.write(config)


def _mutmut(work: Path, *args, timeout=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=work, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


def _results(work: Path, module: str) -> dict:
    meta = work / "mutants" / (module + ".meta")
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}


def _diff(work: Path, name: str) -> str:
    shown = _mutmut(work, "show", name, timeout=120).stdout
    return "\n".join(line for line in shown.splitlines()
                     if line[:1] in "+-" and not line.startswith(("+++", "---")))


def run_module(module: str, work: Path, sample: int, seed: int, children: int, reuse: bool = False,
               functions: str = "", run: bool = True) -> dict:
    if not (reuse and (work / "mutants" / (module + ".meta")).exists()):
        _copy_tree(work)
        _configure(work, module, MODULES[module])
        # generation, the clean run and the per-test stats; a name that matches nothing runs no mutant
        _mutmut(work, "run", "--max-children", str(children), "no-such-mutant*")
    names = sorted(_results(work, module))
    if functions:
        names = [n for n in names if re.search(functions, n.rsplit(".", 1)[-1])]
    checks = [n for n in names if CHECKS.search(n.rsplit(".", 1)[-1])]
    checks.sort(key=lambda n: "verify" not in n)  # the verifiers' own functions first
    others = [n for n in names if n not in checks]
    chosen = checks + (others if sample <= 0 else random.Random(seed).sample(others, min(sample, len(others))))
    done = _results(work, module)
    pending = [n for n in chosen if done.get(n) is None]  # with --reuse: results of an earlier run are kept
    for start in range(0, len(pending) if run else 0, 50):  # command-line length; results land in the .meta per batch
        _mutmut(work, "run", "--max-children", str(children), *pending[start:start + 50])
    codes = _results(work, module)
    report = {"module": module, "generated": len(names), "run": 0, "killed": 0, "diagnostic": [], "survived": [],
              "no_tests": []}
    for name in chosen:
        code = codes.get(name)
        if code is None:
            continue
        report["run"] += 1
        if code in _NO_TESTS:  # no selected test reaches the function: not killed, listed apart
            report["no_tests"].append(name)
            continue
        if code != 0:  # non-zero: a test failed (or timed out / crashed): killed
            report["killed"] += 1
            continue
        diff = _diff(work, name)
        # a first sort only (read every survivor): an empty diff (mutmut could not show it) is not diagnostic
        kind = "diagnostic" if diff and all(_DIAGNOSTIC.search(line) or "where" in line or "label" in line
                                            for line in diff.splitlines() if line.startswith("+")) else "survived"
        report[kind].append({"name": name, "check": name in checks, "diff": diff})
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=sorted(MODULES), help="modules to mutate (default: all)")
    parser.add_argument("--sample", type=int, default=25, help="non-check mutants per module, 0 for all")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--children", type=int, default=2, help="parallel test runs")
    parser.add_argument("--work", default="/tmp/hezk-mutation", help="scratch folder (deleted and rebuilt)")
    parser.add_argument("--json", help="write the full report here")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the scratch folder's mutants and results when it has them for the module")
    parser.add_argument("--functions", default="", help="only mutants of functions matching this regex")
    parser.add_argument("--report-only", action="store_true",
                        help="with --reuse: report the results already in the scratch folder, run nothing")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown modules {unknown}; choose from {sorted(MODULES)}")
    reports = []
    for module in args.modules:
        report = run_module(module, Path(args.work), args.sample, args.seed, args.children, args.reuse,
                            args.functions, run=not args.report_only)
        reports.append(report)
        live = len(report["survived"])
        score = (report["killed"] + len(report["diagnostic"])) / max(1, report["run"])
        print(f"{module}: {report['generated']} mutants, {report['run']} run, {report['killed']} killed, "
              f"{len(report['diagnostic'])} diagnostic-only, {live} survived, {len(report['no_tests'])} reached "
              f"by no test; score {100 * score:.1f}%", flush=True)
        for name in report["no_tests"]:
            print(f"  no test: {name}", flush=True)
        for item in report["survived"]:
            print(f"  survived{' (check)' if item['check'] else ''}: {item['name']}\n    " +
                  item["diff"].replace("\n", "\n    "), flush=True)
    run = sum(r["run"] for r in reports)
    killed = sum(r["killed"] for r in reports)
    diagnostic = sum(len(r["diagnostic"]) for r in reports)
    print(f"total: {run} run, {killed} killed ({100 * killed / max(1, run):.1f}%), {diagnostic} diagnostic-only; "
          f"score with diagnostic-only as equivalent {100 * (killed + diagnostic) / max(1, run):.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))
    return 0 if all(not any(i["check"] for i in r["survived"]) for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
