"""Planning time of the einsum planner at N=2^14 (8192 slots), single thread, and the rotations of a
tiled reduction.

    python benchmarks/planning.py [--quick] [--repeat 3]

Each case is planned ``--repeat`` times (``tensor_ops.plan``, default layouts, no keys, nothing
encrypted); the table gives the median wall time and this process's CPU time (which does not count
the time other processes hold the cores on a shared machine), the steps of the plan, the step
objects created while planning (the strategies priced and dropped included), its rotations and
ciphertexts in and out. Target: <= 2 s per case (issue 12, item 4), judged on the CPU time (on a quiet
machine the wall time is the same; with the two cores shared it is up to twice that). "before" quotes the planning
times the issue measured before the planner kept moves shared between tiles, added tiles before
rotating and priced strategies by a per-tile floor before building them.

The second table: rotations of ``'i,i->'`` on 100,000 elements (13 ciphertexts per operand) against
log2(slots) = 13 (169 before: each tile was rotated-and-summed on its own); the plan is run on the
PlainBackend, which refuses any rotation not in ``plan.rotations()``, and checked against numpy.
``--quick`` plans the smaller sizes (256x256 / 128x128 / (2,4,32,32)).
"""
import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import tensor_ops  # noqa: E402
from crypto import CKKSParameters  # noqa: E402
from tensor_ops import PlainBackend  # noqa: E402
from tensor_ops.plan import builder as plan_builder  # noqa: E402

TARGET_S = 2.0
BEFORE_S = {"matmul 512 enc x plain": 548.0, "matmul 256 enc x enc": 25.0, "attention scores (2,4,64,64)": 24.0}
DOT_ROTATIONS_BEFORE = 169


def cases(quick: bool):
    """(name, expression, shapes, encrypted flags)."""
    n_ep, n_ee, n_at = (256, 128, 32) if quick else (512, 256, 64)
    return [
        ("matmul 512 enc x plain" if not quick else f"matmul {n_ep} enc x plain", "ij,jk->ik",
         [(n_ep, n_ep)] * 2, (True, False)),
        ("matmul 256 enc x enc" if not quick else f"matmul {n_ee} enc x enc", "ij,jk->ik", [(n_ee, n_ee)] * 2,
         (True, True)),
        ("attention scores (2,4,64,64)" if not quick else f"attention scores (2,4,{n_at},{n_at})",
         "bhqd,bhkd->bhqk", [(2, 4, n_at, n_at)] * 2, (True, True)),
    ]


class _CountSteps:
    """Counts the step objects the planner's builder creates while active (a context manager)."""

    def __enter__(self):
        self.count, emit = 0, plan_builder.Builder.emit
        self._emit = emit

        def counting(builder, *args, **kw):
            self.count += 1
            return emit(builder, *args, **kw)

        plan_builder.Builder.emit = counting
        return self

    def __exit__(self, *exc):
        plan_builder.Builder.emit = self._emit


def time_plan(expr, shapes, enc, params, repeat):
    walls, cpus = [], []
    for _ in range(repeat):
        with _CountSteps() as counter:
            w0, c0 = time.perf_counter(), time.process_time()
            p = tensor_ops.plan(expr, *shapes, params=params, encrypted=enc)
            cpus.append(time.process_time() - c0)
            walls.append(time.perf_counter() - w0)
    return p, statistics.median(walls), statistics.median(cpus), counter.count


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--repeat", type=int, default=3, help="plans per case (median)")
    args = ap.parse_args(argv)
    params = CKKSParameters.preset("N14")
    tensor_ops.plan("ij,jk->ik", (4, 4), (4, 4), params=params)   # imports and caches warm
    print(f"planning at N=2^14 ({params.slots} slots), single thread, median of {args.repeat}; target <= "
          f"{TARGET_S:.0f} s per case")
    head = f"{'case':<32}{'wall s':>8}{'cpu s':>8}{'before s':>10}{'steps':>8}{'created':>9}{'rotations':>11}" \
           f"{'cts in/out':>12}  ok"
    print(head)
    for name, expr, shapes, enc in cases(args.quick):
        p, wall, cpu, created = time_plan(expr, shapes, enc, params, args.repeat)
        c = p.cost()
        before = BEFORE_S.get(name)
        print(f"{name:<32}{wall:>8.2f}{cpu:>8.2f}{before if before else '-':>10}{len(p.steps):>8}{created:>9}"
              f"{c['rotations']:>11}{str(c['ciphertexts']) + '/' + str(c['output_ciphertexts']):>12}  "
              f"{'yes' if cpu <= TARGET_S else 'NO'}")
    n = 100_000
    p = tensor_ops.plan("i,i->", (n,), (n,), params=params)
    rng = np.random.default_rng(0)
    a, b = rng.integers(-3, 4, n).astype(float), rng.integers(-3, 4, n).astype(float)
    got = p.simulate(a, b, backend=PlainBackend(params.slots, rotations=p.rotations()))
    print(f"\n'i,i->' on {n:,} elements ({p.cost()['ciphertexts'] // 2} ciphertexts per operand): "
          f"{p.cost()['rotations']} rotations ({len(p.rotations())} keys), {DOT_ROTATIONS_BEFORE} before, "
          f"log2(slots) = {params.slots.bit_length() - 1}; PlainBackend result {'==' if got == a @ b else '!='} "
          f"numpy ({a @ b:.0f})")


if __name__ == "__main__":
    main()
