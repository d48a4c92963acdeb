#!/usr/bin/env bash
# The harness's build step for hezk's entry: nothing to compile. Usage: scripts/build_task.sh ./submission
#  1. checks that python3 imports hezk;
#  2. links the seven stage executables submission/build/<stage> to submission/stage.py;
#  3. publishes the model and its three plans in submission/build/model/ (hezk_entry.py export: server_model.npz,
#     replicated_plan.json, packed.json, plan.json), unless they are newer than the weights:
#     weights: $HEZK_FHE_WEIGHTS (named-weights .npz), else harness/mnist/mnist_ffnn_model.pth (converted);
#     calibration images: $HEZK_FHE_CALIBRATION (.npy, pixel file), else torchvision:harness/mnist/data;
#     $HEZK_FHE_DEGREE (ReLU polynomial degree, default 4), $HEZK_FHE_FIT (weighted, the default, or minimax: the
#     ReLU fit, hezk_entry.weighted_fit), $HEZK_FHE_KEY_BUDGET (bytes of Galois keys).
set -euo pipefail
ROOT="$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )/.." &> /dev/null && pwd )"
TASK_DIR="$1"
BUILD="$TASK_DIR/build"
"$ROOT/scripts/get_openfhe.sh" > /dev/null
mkdir -p "$BUILD"
chmod +x "$TASK_DIR/stage.py"
for stage in client_key_generation server_preprocess_model client_preprocess_input client_encode_encrypt_input \
             server_encrypted_compute client_decrypt_decode client_postprocess; do
    ln -sfn ../stage.py "$BUILD/$stage"
done
WEIGHTS="${HEZK_FHE_WEIGHTS:-}"
if [ -z "$WEIGHTS" ]; then
    PTH="$ROOT/harness/mnist/mnist_ffnn_model.pth"
    if [ ! -f "$PTH" ]; then
        echo "[hezk-entry] no model: train it first (python3 harness/mnist/mnist.py) or set HEZK_FHE_WEIGHTS" >&2
        exit 1
    fi
    WEIGHTS="$BUILD/mnist_ffnn_weights.npz"
    if [ ! -f "$WEIGHTS" ] || [ "$PTH" -nt "$WEIGHTS" ]; then
        python3 "$TASK_DIR/stage.py" pth-to-npz "$PTH" "$WEIGHTS"
    fi
fi
CALIBRATION="${HEZK_FHE_CALIBRATION:-torchvision:$ROOT/harness/mnist/data}"
if [ ! -f "$BUILD/model/plan.json" ] || [ ! -f "$BUILD/model/replicated_plan.json" ] \
        || [ "$WEIGHTS" -nt "$BUILD/model/plan.json" ] \
        || [ "$TASK_DIR/hezk_entry.py" -nt "$BUILD/model/plan.json" ]; then
    EXTRA=()
    if [ -n "${HEZK_FHE_KEY_BUDGET:-}" ]; then EXTRA+=(--key-budget "$HEZK_FHE_KEY_BUDGET"); fi
    python3 "$TASK_DIR/stage.py" export --weights "$WEIGHTS" --calibration "$CALIBRATION" --out "$BUILD/model" \
        --degree "${HEZK_FHE_DEGREE:-4}" --fit "${HEZK_FHE_FIT:-weighted}" "${EXTRA[@]}"
fi
echo "[hezk-entry] built: $BUILD"
