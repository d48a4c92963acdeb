"""A stand-in for the suite's MNIST data and model, made without a network.

The suite's harness downloads MNIST with torchvision and trains ``SimpleFFNN`` (784 -> 128 -> 64 -> 10, ReLU)
itself. Machines without that route use this instead: scikit-learn's bundled digits (8x8, 1797 images),
each upscaled bilinearly to 20x20 and centred in a 28x28 frame with 4 blank pixels around it (MNIST's own
framing), pixels in [0, 1]. The images are split once (by a fixed seed) into a training part and a test part,
so no test image, nor any shifted copy of one, is ever trained on. Both parts are enlarged with copies shifted
by up to 2 pixels and rescaled in brightness: the training part to train on, the test part to a pool of
10,000 test images, the size of MNIST's test set (the suite's large instance takes all of it).

    python standin.py --root DIR     # DIR/datasets/<size>/dataset_{pixels,labels}.txt for every size,
                                     # DIR/standin/weights.npz (the trained float model) and its accuracy

The model is the suite's architecture trained by scikit-learn's ``MLPClassifier`` on inputs normalised as the
harness normalises them, (pixel - 0.1307) / 0.3081; its weights are written with torch's ``state_dict`` names
(``fc1.weight``: (out, in), ...) and the activation named, the file a real run makes from the harness's
``mnist_ffnn_model.pth`` (``submission/hezk_entry.py export``).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import warnings

import numpy as np

SIZES = ("single", "small", "medium", "large")
POOL = 10_000  # MNIST's test set size
MEAN, STD = 0.1307, 0.3081  # the harness's normalisation


def _to_28(images8: np.ndarray) -> np.ndarray:
    """(n, 8, 8) digits in [0, 16] -> (n, 28, 28) in [0, 1]: bilinear 8 -> 20, framed by 4 blank pixels."""
    from scipy.ndimage import zoom

    out = np.zeros((len(images8), 28, 28))
    for i, image in enumerate(images8):
        out[i, 4:24, 4:24] = np.clip(zoom(image / 16.0, 20 / 8, order=1), 0.0, 1.0)
    return out


def _variants(images: np.ndarray, labels: np.ndarray, count: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``count`` images: the originals first, then copies shifted by -2..2 pixels on each axis (inside the
    blank frame, so nothing is cut) with brightness scaled by 0.8..1.0."""
    picks = np.concatenate([np.arange(len(images)), rng.integers(0, len(images), max(0, count - len(images)))])[:count]
    out = images[picks].copy()
    for j in range(len(images), count):
        dy, dx = rng.integers(-2, 3, 2)
        out[j] = np.roll(out[j], (dy, dx), axis=(0, 1)) * rng.uniform(0.8, 1.0)
    return out.reshape(count, 784), labels[picks]


def make_data(seed: int = 0, train_count: int = 12_000, pool: int = POOL):
    """(x_train, y_train, x_test, y_test): pixels (n, 784) in [0, 1]; the test part has ``pool`` images."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = _to_28(digits.images), digits.target
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    cut = int(0.7 * len(labels))
    train, test = order[:cut], order[cut:]
    x_train, y_train = _variants(images[train], labels[train], train_count, rng)
    x_test, y_test = _variants(images[test], labels[test], pool, rng)
    return x_train, y_train, x_test, y_test


def normalise(pixels: np.ndarray) -> np.ndarray:
    """The harness's input normalisation (``harness/mnist/test.py``)."""
    return (np.asarray(pixels, dtype=np.float64) - MEAN) / STD


def train(x_train, y_train, seed: int = 0, epochs: int = 25) -> dict:
    """The suite's architecture (784 -> 128 -> 64 -> 10, ReLU) trained on normalised pixels; its weights under
    torch's ``state_dict`` names, (out, in) matrices."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    mlp = MLPClassifier(hidden_layer_sizes=(128, 64), activation="relu", alpha=1e-3, batch_size=128,
                        learning_rate_init=1e-3, max_iter=epochs, random_state=seed)
    with warnings.catch_warnings():  # a fixed number of epochs, as the harness trains
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(normalise(x_train), y_train)
    (w1, w2, w3), (b1, b2, b3) = mlp.coefs_, mlp.intercepts_
    return {"fc1.weight": w1.T, "fc1.bias": b1, "fc2.weight": w2.T, "fc2.bias": b2,
            "fc3.weight": w3.T, "fc3.bias": b3}


def float_predict(weights: dict, pixels: np.ndarray) -> np.ndarray:
    """Class of each image under the float model (what the harness's ``cleartext_impl.py`` computes)."""
    h = np.maximum(normalise(pixels) @ weights["fc1.weight"].T + weights["fc1.bias"], 0)
    h = np.maximum(h @ weights["fc2.weight"].T + weights["fc2.bias"], 0)
    return (h @ weights["fc3.weight"].T + weights["fc3.bias"]).argmax(axis=1)


def write_pixels(path: pathlib.Path, pixels: np.ndarray) -> None:
    """The harness's pixel file: one image per line, 784 values with 6 decimals, space-separated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, pixels, fmt="%.6f", delimiter=" ")


def write_labels(path: pathlib.Path, labels) -> None:
    """The harness's label file: one integer per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{int(v)}\n" for v in labels))


def write_dataset(root: pathlib.Path, x_test, y_test, sizes=SIZES) -> None:
    """``datasets/<size>/dataset_{pixels,labels}.txt``: the test pool, as the harness's step 1 writes it."""
    for size in sizes:
        write_pixels(root / "datasets" / size / "dataset_pixels.txt", x_test)
        write_labels(root / "datasets" / size / "dataset_labels.txt", y_test)


def make_root(root: pathlib.Path, seed: int = 0, train_count: int = 12_000, pool: int = POOL, epochs: int = 25,
              sizes=SIZES) -> float:
    """Populate ``root``: the datasets of ``sizes``, ``standin/weights.npz`` (the trained float model) and
    ``standin/calibration.npy`` (2,000 training images at most, for the activations' ranges); returns the
    float model's accuracy on the test pool (also written to ``standin/float_accuracy.json``)."""
    x_train, y_train, x_test, y_test = make_data(seed, train_count, pool)
    weights = train(x_train, y_train, seed, epochs)
    out = root / "standin"
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "weights.npz", activation="relu", **weights)
    np.save(out / "calibration.npy", x_train[np.random.default_rng(seed).permutation(len(x_train))[:2000]])
    write_dataset(root, x_test, y_test, sizes)
    accuracy = float(np.mean(float_predict(weights, x_test) == y_test))
    (out / "float_accuracy.json").write_text(json.dumps({"test_pool": len(y_test), "accuracy": accuracy}))
    return accuracy


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, required=True, help="harness root to populate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    accuracy = make_root(args.root, args.seed)
    print(f"[standin] float model accuracy on the {POOL}-image test pool: {accuracy:.4f}")


if __name__ == "__main__":
    main()
