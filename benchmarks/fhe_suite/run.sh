#!/usr/bin/env bash
# hezk's entry to the FHE Benchmarking Suite's ML-inference workload, offline, on the stand-in data:
#   benchmarks/fhe_suite/run.sh [ROOT] [SIZES...]      (default ROOT=${TMPDIR:-/tmp}/hezk_fhe_suite, SIZES=0 1 2 3)
# makes ROOT a harness root (the stand-in datasets and trained model: standin.py; the entry installed as
# submission/ and scripts/ and built), runs every size through local_harness.py and prints the per-stage table.
# HEZK_FHE_DASK=local:2 evaluates the requests on Dask workers; OMP, NUMBA and HEZK threads are 1 unless set
# (one core per process: hezk's own pool defaults to every core of the process's affinity).
set -euo pipefail
HERE="$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )"
ROOT="${1:-${TMPDIR:-/tmp}/hezk_fhe_suite}"
shift || true
SIZES=("$@")
if [ ${#SIZES[@]} -eq 0 ]; then SIZES=(0 1 2 3); fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" NUMBA_NUM_THREADS="${NUMBA_NUM_THREADS:-1}" \
       HEZK_THREADS="${HEZK_THREADS:-1}"
mkdir -p "$ROOT"
if [ ! -f "$ROOT/standin/weights.npz" ]; then
    python3 "$HERE/standin.py" --root "$ROOT"
fi
python3 "$HERE/local_harness.py" --root "$ROOT" --install --seed 3 "${SIZES[@]}"
python3 "$HERE/local_harness.py" --root "$ROOT" --table
