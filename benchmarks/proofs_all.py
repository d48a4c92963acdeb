"""All proof benchmarks in one run: inference proofs (benchmarks/proofs.py) then training steps
(benchmarks/proofs_training.py).

    python benchmarks/proofs_all.py [--quick] [--no-ezkl]
"""
import argparse
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
from benchmarks import proofs, proofs_training  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick cases of both benchmarks")
    parser.add_argument("--no-ezkl", action="store_true", help="skip EZKL even if it imports")
    args = parser.parse_args()
    sys.argv = [sys.argv[0]] + ["--quick"] * args.quick + ["--no-ezkl"] * args.no_ezkl
    proofs.main()
    print()
    proofs_training.run(args.quick)


if __name__ == "__main__":
    main()
