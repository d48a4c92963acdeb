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
    encode: float = 0.3  # encoding one plaintext (a one-time server cost for weights)
    # Set by :meth:`measure`: seconds of one rotation, at parameters of ``measured_size`` = N x (Q + P limbs).
    rotation_seconds: float = 0.0
    measured_size: int = 0

    def of(self, counts: Counter) -> float:
        return (counts["rotations"] * self.rotation + counts["hoisted_rotations"] * self.hoisted_rotation
                + counts["ct_mults"] * self.ct_mult + counts["pt_mults"] * self.pt_mult
                + counts["rescales"] * self.rescale + counts["additions"] * self.add)


    @classmethod
    def measure(cls, params, repeats: int = 7, seed: int = 0) -> "CostModel":
        """Per-operation times measured on this machine at ``params`` (top level), warm: every operation runs
        once untimed first (JIT compilation excluded), then the fastest of ``repeats`` runs in CPU time (the
        least disturbed by other processes; single-threaded kernels). Returned as the
        ratios to one rotation plus ``rotation_seconds``; ``hoisted_rotation`` is the marginal cost of one more
        rotation sharing a decomposition, ``pt_mult`` a ct*pt product with its accumulation (one addition).
        Costs about a second at N=2^13 (keygen of 12 rotation keys included)."""
        import time

        import numpy as np

        from crypto import CKKSContext

        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            from crypto.errors import ParameterError
            raise ParameterError(f"repeats={repeats!r} must be a positive integer")
        steps = tuple(range(1, 13))  # twelve keys in turn: more than a CPU cache holds, as a plan streams them
        ctx = CKKSContext.keygen(params, rotations=steps, seed=seed)
        ev = ctx.evaluator
        values = np.random.default_rng(seed).uniform(-1, 1, ctx.params.slots)
        ct = ctx.encrypt(values)
        pt = ctx.encode(values, level=ct.level)
        product = ev.mul(ct, pt)

        def timed(run) -> float:
            # CPU time of this process: what one thread takes on a free core (wall time on a shared machine
            # measured rotations 3x slower under a load of 10 on 2 cores, short operations not at all)
            run()
            times = []
            for _ in range(repeats):
                start = time.process_time()
                run()
                times.append(time.process_time() - start)
            return min(times)

        # distinct steps in turn, as a plan runs them: one step repeated keeps its key in the CPU cache and
        # measured 1.6 ms against 8 ms per rotation of several steps in turn (N=2^13, loaded 2-core machine)
        rotation = timed(lambda: [ev.rotate(ct, k) for k in steps]) / len(steps)
        hoisted = max(timed(lambda: ev.rotate_hoisted(ct, steps)) - rotation, 0.0) / (len(steps) - 1)
        # ct x pt products accumulated over distinct plaintexts, as a plan's diagonals run (one plaintext
        # repeated stays in the CPU cache and measured several times faster than a plan's accumulation)
        plaintexts = [ctx.encode(values * (1 + i / 16), level=ct.level) for i in range(16)]

        def accumulate():
            total = product
            for p in plaintexts:
                total = ev.add(total, ev.mul(ct, p))

        ratios = dict(hoisted_rotation=hoisted, ct_mult=timed(lambda: ev.mul(ct, ct)),
                      pt_mult=timed(accumulate) / len(plaintexts), rescale=timed(lambda: ev.rescale(product)),
                      add=timed(lambda: ev.add(product, product)), encode=timed(lambda: ctx.encode(values, level=ct.level)))
        size = ctx.params.n * (ctx.params.limbs_at(ct.level) + len(ctx.params.p_moduli))
        return cls(**{k: v / rotation for k, v in ratios.items()}, rotation=1.0, key=cls.key,
                   rotation_seconds=rotation, measured_size=size)

    def seconds(self, name: str, size: int) -> float:
        """Seconds of one operation ``name`` (a field: "rotation", "ct_mult", ...) at parameters of ``size`` =
        N x (limbs + P limbs), scaled linearly from the measurement; requires :meth:`measure`'s model."""
        if not self.rotation_seconds:
            from crypto.errors import ParameterError
            raise ParameterError("this CostModel holds relative costs only: make one with CostModel.measure(params)")
        return getattr(self, name) * self.rotation_seconds * size / self.measured_size


DEFAULT_COSTS = CostModel()
