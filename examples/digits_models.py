"""Train the two small digit classifiers of the encrypted-inference examples, in plain numpy.

The scikit-learn digits (8x8 grey images, 1797 samples, bundled with scikit-learn, no download) are scaled
to [0, 1]. Both models use the square activation x^2 (CryptoNets, Gilad-Bachrach et al., ICML 2016): it
is exact under CKKS and costs one level.
- MLP: 64 -> Linear 32 -> x^2 -> Linear 10
- CNN: 1x8x8 -> Conv 4@3x3 (padding 1) -> AvgPool 2 -> x^2 -> Flatten -> Linear 10
Training is full-batch Adam (Kingma and Ba, ICLR 2015) on softmax cross-entropy, hand-written backprop.
Run it to train both, print test accuracies and save them as .npz files in ./out/ (or $HEZK_OUT).
"""
import os
import pathlib

import numpy as np

from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, Sequential, Square

QUICK = os.environ.get("HEZK_QUICK") == "1"


def digits_split(test_fraction=0.25, seed=0):
    """(x_train, y_train, x_test, y_test): images as (n, 64) floats in [0, 1]."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x, y = data.data / 16.0, data.target
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(len(y) * (1 - test_fraction))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def _adam(params, grad_fn, steps, rate=0.02):
    """Full-batch Adam; ``grad_fn(params) -> (loss, grads)``; returns new parameter arrays."""
    params = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for step in range(1, steps + 1):
        _, grads = grad_fn(params)
        for k in params:
            m[k] = 0.9 * m[k] + 0.1 * grads[k]
            v2[k] = 0.999 * v2[k] + 0.001 * grads[k] ** 2
            params[k] -= rate * (m[k] / (1 - 0.9**step)) / (np.sqrt(v2[k] / (1 - 0.999**step)) + 1e-8)
    return params


def _softmax_loss(logits, y):
    """Mean cross-entropy and its gradient with respect to the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    loss = -np.mean(np.log(prob[np.arange(len(y)), y] + 1e-12))
    prob[np.arange(len(y)), y] -= 1.0
    return loss, prob / len(y)


def _square_then_linear(hidden, p, y, grads):
    """Shared tail: logits = W2 (h^2) + b2; fills grads for W2, b2 and returns (loss, dL/dhidden)."""
    activated = hidden**2
    loss, dlogits = _softmax_loss(activated @ p["w2"].T + p["b2"], y)
    grads["w2"], grads["b2"] = dlogits.T @ activated, dlogits.sum(axis=0)
    return loss, 2 * hidden * (dlogits @ p["w2"])


def train_mlp(x, y, hidden=32, steps=300, seed=0):
    """64 -> hidden -> x^2 -> 10."""
    rng = np.random.default_rng(seed)
    init = {"w1": rng.normal(0, 0.3, (hidden, x.shape[1])), "b1": np.zeros(hidden),
            "w2": rng.normal(0, 0.1, (10, hidden)), "b2": np.zeros(10)}

    def grad_fn(p):
        grads = {}
        loss, dhidden = _square_then_linear(x @ p["w1"].T + p["b1"], p, y, grads)
        grads["w1"], grads["b1"] = dhidden.T @ x, dhidden.sum(axis=0)
        return loss, grads

    p = _adam(init, grad_fn, steps)
    return Sequential([Linear(p["w1"], p["b1"]), Square(), Linear(p["w2"], p["b2"])], input_shape=(64,))


def train_cnn(x, y, channels=4, steps=300, seed=0):
    """1x8x8 -> conv channels@3x3 pad 1 -> avgpool 2 -> x^2 -> flatten -> 10."""
    rng = np.random.default_rng(seed)
    images = x.reshape(-1, 1, 8, 8)
    patches = np.lib.stride_tricks.sliding_window_view(np.pad(images, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                       axis=(2, 3)).reshape(len(x), 1, 8, 8, 9)[:, 0]
    # average pooling as a (16, 64) matrix over the 8x8 positions
    pool = np.zeros((4, 4, 8, 8))
    for i in range(4):
        for j in range(4):
            pool[i, j, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = 0.25
    pool = pool.reshape(16, 64)
    flat_patches = patches.reshape(len(x), 64, 9)
    init = {"wc": rng.normal(0, 0.5, (channels, 9)), "bc": np.zeros(channels),
            "w2": rng.normal(0, 0.1, (10, channels * 16)), "b2": np.zeros(10)}

    def grad_fn(p):
        conv = flat_patches @ p["wc"].T + p["bc"]                       # (n, 64, c)
        pooled = np.einsum("qp,npc->ncq", pool, conv).reshape(len(x), -1)  # (n, c*16), channel-major
        grads = {}
        loss, dpooled = _square_then_linear(pooled, p, y, grads)
        dconv = np.einsum("qp,ncq->npc", pool, dpooled.reshape(len(x), channels, 16))
        grads["wc"] = np.einsum("npc,npk->ck", dconv, flat_patches)
        grads["bc"] = dconv.sum(axis=(0, 1))
        return loss, grads

    p = _adam(init, grad_fn, steps)
    return Sequential([Conv2d(p["wc"].reshape(channels, 1, 3, 3), p["bc"], stride=1, padding=1), AvgPool2d(2),
                       Square(), Flatten(), Linear(p["w2"], p["b2"])], input_shape=(1, 8, 8))


def report_agreement(encrypted, plain, labels):
    """Print how the decrypted outputs compare with the plaintext model; stop if fewer than 99% agree."""
    agree = np.mean(encrypted.argmax(1) == plain.argmax(1))
    print(f"max |encrypted - plaintext| output error {np.max(np.abs(encrypted - plain)):.2e}; encrypted "
          f"predictions equal the plaintext model's on {100 * agree:.1f}% of the images; encrypted accuracy "
          f"{np.mean(encrypted.argmax(1) == labels):.3f}")
    if agree < 0.99:
        raise SystemExit(f"agreement {agree:.3f} is below 99%")
    error = np.max(np.abs(encrypted - plain))  # scale 2^30 less 16 bits of noise, relative to the outputs
    assert error <= 2.0 ** -14 * max(1.0, np.max(np.abs(plain))), f"output error {error:.2e}"


def main():
    x_train, y_train, x_test, y_test = digits_split()
    out = pathlib.Path(os.environ.get("HEZK_OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    steps = 150 if QUICK else 400
    print(f"digits: {len(y_train)} training and {len(y_test)} test images of 8x8 pixels; {steps} Adam steps")
    for name, model, inputs in (("mlp", train_mlp(x_train, y_train, steps=steps), x_test),
                                ("cnn", train_cnn(x_train, y_train, steps=steps), x_test.reshape(-1, 1, 8, 8))):
        accuracy = np.mean(model.predict(inputs) == y_test)
        model.save(out / f"digits_{name}.npz")
        print(f"{name}: {model!r}: depth {model.depth()}, test accuracy {accuracy:.3f}, saved {out / f'digits_{name}.npz'}")


if __name__ == "__main__":
    main()
