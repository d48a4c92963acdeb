"""The cost model the planner prices strategies with (one key-switched rotation = 1)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """Relative cost of the HE primitives (one key-switched rotation = 1).

    Defaults are the ratios benchmarks/einsum.py measured for hezk's CKKS at N=2^14 on a 2-core
    machine (noisy under load): a hoisted rotation (sharing the key-switch decomposition) 0.43-0.78,
    0.5 at 3-8 rotations on a quiet machine; ct*ct with relinearization 0.74-0.92; rescale 0.22;
    ct*pt under 0.01 once encoded (0.05 leaves room for the encoding). Pass another CostModel to
    ``plan(costs=...)`` for other hardware.
    """

    rotation: float = 1.0
    hoisted_rotation: float = 0.5
    ct_mult: float = 0.8
    pt_mult: float = 0.05
    rescale: float = 0.2
    add: float = 0.01
    key: float = 0.6  # each distinct rotation key: keygen time, memory and bytes sent to the server

    def of(self, counts: Counter) -> float:
        return (counts["rotations"] * self.rotation + counts["hoisted_rotations"] * self.hoisted_rotation
                + counts["ct_mults"] * self.ct_mult + counts["pt_mults"] * self.pt_mult
                + counts["rescales"] * self.rescale + counts["additions"] * self.add)


DEFAULT_COSTS = CostModel()
