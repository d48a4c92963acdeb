"""Naive twin of proofs.quantize.forward_int: Python integers, explicit loops, floor division."""


def naive_round_shift(value: int, shift: int) -> int:
    """round(value / 2^shift) half up, with exact Python integers."""
    if shift == 0:
        return value
    return (value + 2 ** (shift - 1)) // 2 ** shift


def naive_forward(model, x_rows):
    """Forward pass of a QuantizedMLP on a list of integer rows, one multiply-add at a time."""
    outputs = []
    for row in x_rows:
        a = [int(v) for v in row]
        for layer in model.layers:
            weight = layer.weight.tolist()
            bias = layer.bias.tolist()
            acc = [sum(w * v for w, v in zip(weight[o], a)) + bias[o] for o in range(len(weight))]
            shifted = [naive_round_shift(v, layer.shift) for v in acc]
            a = [max(v, 0) for v in shifted] if layer.relu else shifted
        outputs.append(a)
    return outputs
