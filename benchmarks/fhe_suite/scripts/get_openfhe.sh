#!/usr/bin/env bash
# hezk's entry needs no OpenFHE: the harness's first build step only checks that Python finds hezk.
set -euo pipefail
python3 -c "import hezk, crypto, tensor_ops, numpy" 2>/dev/null || {
    echo "[hezk-entry] python3 cannot import hezk: pip install hezk (or pip install -e <hezk checkout>)" >&2
    exit 1
}
echo "[hezk-entry] hezk $(python3 -c 'import hezk; print(hezk.__version__)') found; no OpenFHE needed"
