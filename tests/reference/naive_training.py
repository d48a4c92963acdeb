"""Naive integer SGD step of a ReLU MLP (Python ints, explicit loops): the twin of proofs.layers.training.

round(v / 2^s) is floor((v + 2^(s-1)) / 2^s) (round half up), 0 shift is the identity.
"""


def round_shift(value: int, shift: int) -> int:
    return value if shift == 0 else (value + (1 << (shift - 1))) >> shift


def matmul(a, b):
    """a (n x m) times b (m x k) as lists of lists of ints."""
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def transpose(a):
    return [list(row) for row in zip(*a)]


def naive_step(weights, x, y, shift, grad_shift, lr_shift):
    """Return (new weights, output) for one step; weights[i] is d_(i+1) x d_i, x is B x d_0, y is B x d_L."""
    weights = [[[int(v) for v in row] for row in w] for w in weights]
    acts, signs = [[[int(v) for v in row] for row in x]], []
    layers = len(weights)
    for i, w in enumerate(weights):
        z = [[round_shift(v, shift) for v in row] for row in matmul(acts[-1], transpose(w))]
        signs.append([[1 if v < 0 else 0 for v in row] for row in z])
        acts.append([[max(v, 0) for v in row] for row in z] if i + 1 < layers else z)
    output = acts.pop()
    grad = [[o - int(t) for o, t in zip(orow, trow)] for orow, trow in zip(output, y)]
    new = [None] * layers
    for i in range(layers - 1, -1, -1):
        grad_w = matmul(transpose(grad), acts[i])
        new[i] = [[w - round_shift(g, lr_shift) for w, g in zip(wrow, grow)] for wrow, grow in zip(weights[i], grad_w)]
        if i:
            grad_a = matmul(grad, weights[i])
            grad = [[(1 - s) * round_shift(g, grad_shift) for g, s in zip(grow, srow)]
                    for grow, srow in zip(grad_a, signs[i - 1])]
    return new, output
