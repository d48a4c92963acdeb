"""Helpers shared by the tensor_ops tests."""
import itertools
import socket

import numpy as np


def small_ints(rng, shape) -> np.ndarray:
    """Integers in [-3, 3] as floats: products and sums stay exact, so plain einsum results compare exactly."""
    return rng.integers(-3, 4, size=shape).astype(float)


def encryption_patterns(n: int) -> list:
    """Every choice of which of ``n`` operands are encrypted, except none."""
    return [p for p in itertools.product([True, False], repeat=n) if any(p)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
