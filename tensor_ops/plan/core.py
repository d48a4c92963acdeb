"""The Plan: steps over registers, its queries (rotations, depth, cost, explain) and its execution."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from crypto.errors import LevelError, ShapeError

from ..backends import PlainBackend
from ..layout import SlotLayout
from ..parse import EinsumSpec
from ..tensor_base import CipherTensorBase, run_plan
from .cost import DEFAULT_COSTS, CostModel


@dataclass(frozen=True)
class PlainPrep:
    """A plaintext tensor computed in the clear: ``numpy.einsum(expr, *plain operands)`` (or a constant)."""

    expr: str
    operands: tuple[int, ...]
    indices: str
    value: complex | None = None


@dataclass(frozen=True)
class Plan:
    """A lowered einsum: steps over registers, the output layout and the notes of the strategies chosen."""

    spec: EinsumSpec
    encrypted: tuple[bool, ...]
    input_layouts: tuple
    steps: tuple
    preps: tuple
    output_regs: tuple[int, ...]
    output_layout: SlotLayout | None
    slots: int
    notes: tuple[str, ...]
    max_level: int | None = None
    costs: CostModel = DEFAULT_COSTS

    # -------------------------------------------------------------- queries
    def rotations(self) -> list[int]:
        """Exact rotation amounts the plan uses (give them to ``CKKSContext.keygen(rotations=...)``)."""
        return sorted({k for s in self.steps for k in s.rotation_steps(self.slots) if k})

    def depth(self) -> int:
        """Levels consumed on the longest path from an input to the output."""
        lv: dict[int, int] = {}
        for s in self.steps:
            lv[s.out] = max((lv.get(i, 0) for i in s.inputs()), default=0) + s.levels()
        return max((lv.get(r, 0) for r in self.output_regs), default=0)

    def cost(self) -> dict:
        """Operation counts: ``rotations`` (all; ``hoisted_rotations`` of them share a decomposition),
        ``multiplies`` (ct*ct + ct*pt), rescales, additions, ``ciphertexts`` (encrypted inputs, after
        tiling), output ciphertexts, rotation keys, and the cost model's estimate (1 = one rotation;
        keys included, as in the strategy notes)."""
        c = Counter()
        for s in self.steps:
            c.update(s.counts(self.slots))
        inputs = sum(lay.n_ciphertexts for lay, e in zip(self.input_layouts, self.encrypted) if e)
        return {"rotations": c["rotations"] + c["hoisted_rotations"], "hoisted_rotations": c["hoisted_rotations"],
                "multiplies": c["ct_mults"] + c["pt_mults"], "ct_mults": c["ct_mults"], "pt_mults": c["pt_mults"],
                "rescales": c["rescales"], "additions": c["additions"], "ciphertexts": inputs,
                "output_ciphertexts": len(self.output_regs), "rotation_keys": len(self.rotations()),
                "estimate": round(self.costs.of(c) + self.costs.key * len(self.rotations()), 2)}

    def explain(self, max_steps: int = 80) -> str:
        """A readable account: expression, layouts, strategy notes, depth, cost, then the steps."""
        lines = [f"plan for {self.spec.expression()}  (slots={self.slots})"]
        for n, (lay, enc) in enumerate(zip(self.input_layouts, self.encrypted)):
            what = lay.describe() if enc else f"plaintext shape {self.spec.shapes[n]}"
            lines.append(f"  operand {n} [{self.spec.inputs[n]}]: {'encrypted' if enc else 'plain'}, {what}")
        lines += [f"  * {n}" for n in self.notes]
        lines.append(f"  depth {self.depth()}" + (f" of {self.max_level} levels" if self.max_level is not None else ""))
        lines.append(f"  cost {self.cost()}")
        lines.append(f"  rotations {self.rotations()}")
        if self.output_layout is not None:
            lines.append(f"  output: {self.output_layout.describe()}")
        if len(self.steps) > max_steps:  # a large plan: what its steps are, in one line
            kinds = Counter(type(s).__name__ for s in self.steps)
            lines.append(f"  {len(self.steps)} steps: " + ", ".join(f"{n} {k}" for k, n in kinds.most_common()))
        for s in self.steps[:max_steps]:
            lines.append(f"    {type(s).__name__:<14} {s}")
        if len(self.steps) > max_steps:
            lines.append(f"    ... {len(self.steps) - max_steps} more steps")
        return "\n".join(lines)

    def __str__(self):
        return self.explain()

    def check_levels(self, available: int) -> None:
        """Refuse (LevelError) when the plan needs more levels than ``available``."""
        need = self.depth()
        if need > available:
            raise LevelError(f"plan for {self.spec.expression()} needs depth {need} but only {available} "
                             f"level(s) are available")

    # -------------------------------------------------------------- execution
    def run(self, backend, operands, on_step=None):
        """Execute on ``backend``; operands are ciphertext lists (encrypted) or arrays (plain).

        Returns the list of output registers (one per tile of ``output_layout``) or, when every
        operand is plaintext, the numpy result. ``on_step(step, value)`` is called after each step
        with the register it wrote (on the plain backend: the slot vector, to debug a packing).
        """
        if len(operands) != len(self.encrypted):
            raise ShapeError(f"plan expects {len(self.encrypted)} operands, got {len(operands)}")
        data = _RunData(self, backend, operands)
        if not any(self.encrypted):
            return data.prep(0)
        regs: dict = {}
        last_use = {}
        for n, s in enumerate(self.steps):
            for r in s.inputs():
                last_use[r] = n
        keep = set(self.output_regs)
        for n, s in enumerate(self.steps):
            s.apply(backend, regs, data)
            if on_step is not None:
                on_step(s, regs[s.out])
            for r in s.inputs():
                if last_use.get(r) == n and r not in keep:
                    regs.pop(r, None)
        return [regs[r] for r in self.output_regs]

    def execute(self, backend, *operands, on_step=None):
        """Run on ``backend`` with operands as the user holds them: CipherTensors or numpy arrays
        (on a PlainBackend, encrypted operands may be plain numpy arrays: they are packed with the
        plan's input layouts). Returns a CipherTensor, or a numpy array on the PlainBackend."""
        if isinstance(backend, PlainBackend) and not any(isinstance(o, CipherTensorBase) for o in operands):
            return backend.run(self, *operands, on_step=on_step)
        return run_plan(self, list(operands))

    def simulate(self, *arrays, backend=None, on_step=None):
        """Run the plan on the :class:`PlainBackend` (numpy slot vectors) and return the numpy result.

        Encrypted operands are packed with their input layouts; with ``backend`` given (e.g. one that
        checks rotation keys) it is used instead; ``on_step`` as in :meth:`run`.
        """
        be = backend if backend is not None else PlainBackend(self.slots, rotations=self.rotations())
        ops = [lay.pack(np.asarray(a)) if enc else np.asarray(a)
               for a, enc, lay in zip(arrays, self.encrypted, self.input_layouts)]
        out = self.run(be, ops, on_step)
        if not any(self.encrypted):
            return out
        return self.output_layout.unpack(out)


class _RunData:
    """Per-run inputs: operand ciphertexts, plaintext tensors computed once, constants encoded once."""

    def __init__(self, plan: Plan, backend, operands):
        self.plan, self.backend, self.slots = plan, backend, plan.slots
        self.cts = [list(op) if enc else None for op, enc in zip(operands, plan.encrypted)]
        self.plains = [None if enc else np.asarray(op) for op, enc in zip(operands, plan.encrypted)]
        self._preps: dict = {}

    def prep(self, n):
        if n not in self._preps:
            p = self.plan.preps[n]
            self._preps[n] = np.asarray(p.value) if p.value is not None else \
                np.einsum(p.expr, *[self.plains[i] for i in p.operands])
        return self._preps[n]

    def plain_in(self, source, indices, shape):
        """Plaintext tensor ``source`` with axes reordered to ``indices`` + broadcast to ``shape``."""
        p = self.plan.preps[source]
        arr = self.prep(source)
        have = [c for c in indices if c in p.indices]
        arr = np.transpose(arr, [p.indices.index(c) for c in have]) if have else arr
        arr = arr.reshape([arr.shape[have.index(c)] if c in have else 1 for c in indices])
        return np.broadcast_to(arr, shape)

    def constant(self, vec):
        """A plaintext constant (mask, diagonal), encoded by the backend (which may cache it)."""
        return self.backend.constant(vec)
