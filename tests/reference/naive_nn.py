"""Naive loop references for the layers of tensor_ops.nn (slow, obviously correct)."""
import numpy as np


def conv2d(x, weight, bias, stride, padding):
    """x (C, H, W), weight (O, C, kh, kw): the textbook cross-correlation with zero padding."""
    c, h, w = x.shape
    o, _, kh, kw = weight.shape
    ho = (h + 2 * padding - kh) // stride + 1
    wo = (w + 2 * padding - kw) // stride + 1
    y = np.zeros((o, ho, wo))
    for oc in range(o):
        for i in range(ho):
            for j in range(wo):
                total = bias[oc]
                for ic in range(c):
                    for u in range(kh):
                        for v in range(kw):
                            r, s = i * stride + u - padding, j * stride + v - padding
                            if 0 <= r < h and 0 <= s < w:
                                total += weight[oc, ic, u, v] * x[ic, r, s]
                y[oc, i, j] = total
    return y


def avgpool2d(x, kernel, stride):
    c, h, w = x.shape
    ho, wo = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    y = np.zeros((c, ho, wo))
    for ch in range(c):
        for i in range(ho):
            for j in range(wo):
                y[ch, i, j] = np.mean(x[ch, i * stride:i * stride + kernel, j * stride:j * stride + kernel])
    return y


def horner(coefficients, t):
    """sum_i c_i t^i by Horner's rule."""
    result = np.zeros_like(np.asarray(t, dtype=np.float64))
    for c in reversed(coefficients):
        result = result * t + c
    return result
