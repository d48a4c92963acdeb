"""Two plots for encrypted inference (PNG files in ./out/, or $HEZK_OUT):

- ``precision_vs_depth.png``: bits of precision (-log2 of the worst absolute error over all slots) of a
  chain of ciphertext x ciphertext multiplications, each followed by a rescale, against the depth used, with
  the N14 preset's parameters (scale 2^50, as every preset), on an axis from 0 to the scale's bits;
  every level costs a little precision, which is why the planner picks the minimal depth.
- ``activations.png``: polynomial fits of ReLU, GELU, SiLU and sigmoid on [-6, 6] at degrees 2, 4 and 8
  (Chebyshev interpolation) against the true functions, with each fit's depth.
"""
import os
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from crypto import CKKSContext, CKKSParameters  # noqa: E402
from tensor_ops.activations import fit_activation  # noqa: E402

QUICK = os.environ.get("HEZK_QUICK") == "1"
OUT = pathlib.Path(os.environ.get("HEZK_OUT", "out"))


def precision_by_depth(max_depth, preset="N14"):
    """[(depth, bits)] for y <- y * z (ct x ct, relinearize, rescale), |values| near 1, with the parameters of
    ``preset`` (scale 2^50, as every preset)."""
    params = CKKSParameters.preset(preset)
    max_depth = min(max_depth, params.max_level)
    ctx = CKKSContext.keygen(params)
    ev = ctx.evaluator
    rng = np.random.default_rng(0)
    n = params.slots
    x = rng.uniform(-1, 1, n)
    z = rng.choice([-1.0, 1.0], n) * rng.uniform(0.8, 1.2, n)
    ct, cz, expected = ctx.encrypt(x), ctx.encrypt(z), x.copy()
    points = []
    for depth in range(1, max_depth + 1):
        ct = ev.mul_rescale(ct, cz)
        expected = expected * z
        error = np.max(np.abs(ctx.decrypt(ct) - expected))
        # |expected| <= 1.2^depth; measured at N14 (scale 2^50): 35.5 bits at depth 1 down to 33.5 at depth 6
        assert error <= 2.0 ** -(params.log_scale - 20), (depth, error)
        points.append((depth, -np.log2(error)))
    print(f"precision by depth with {params!r}:")
    for depth, bits in points:
        print(f"  depth {depth}: {bits:.1f} bits")
    return params, points


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    params, points = precision_by_depth(3 if QUICK else 6)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([d for d, _ in points], [b for _, b in points], "o-")
    ax.set_xlabel("multiplicative depth (ct x ct + rescale)")
    ax.set_ylabel("precision (bits, worst slot)")
    ax.axhline(params.log_scale, color="gray", ls=":", label=f"scale 2^{params.log_scale}")
    ax.set_ylim(0, params.log_scale + 4)  # the whole range: the loss per level in proportion
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title(f"CKKS N=2^{params.log_n} (preset), scale 2^{params.log_scale}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "precision_vs_depth.png", dpi=100)
    print(f"wrote {OUT / 'precision_vs_depth.png'}")

    x = np.linspace(-6, 6, 400)
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.5))
    for ax, name in zip(axes, ["relu", "gelu", "silu", "sigmoid"]):
        ax.plot(x, fit_activation(name, 2, 6).target(x), "k", lw=2, label=name)
        for degree in (2, 4, 8):
            poly = fit_activation(name, degree, (-6, 6))
            ax.plot(x, poly(x), "--", label=f"degree {degree} (depth {poly.depth})")
            print(f"{name} degree {degree}: depth {poly.depth}, max error on [-6, 6] {poly.max_error():.3f}")
        ax.set_title(name)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "activations.png", dpi=100)
    print(f"wrote {OUT / 'activations.png'}")


if __name__ == "__main__":
    main()
