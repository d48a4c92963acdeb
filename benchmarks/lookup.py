"""What a lookup costs per element against zkReLU's bit decomposition, on the same n elements.

    python benchmarks/lookup.py [--quick]

Both rows prove an elementwise function of n values of b signed bits, as the graph proof does it
(:mod:`proofs.layers.graph`), from the commitment of the per-proof witness to the opening:

- zkReLU (zkDL's bit decomposition, :mod:`proofs.layers.relu_batch`): commit the b bit planes of x (b n
  entries), the select sumcheck (relu(x) from the sign bit), the bits sumcheck, one opening;
- lookup (LogUp-GKR, :mod:`proofs.lookup`): commit the multiplicities (2^b) and the outputs (n), the two
  fraction-sum GKRs (n leaves and 2^b leaves), the merge of the three claims and one opening. The table is
  sigmoid's (any function costs the same; relu's table would too).

Times are medians of this process's CPU time in ms (single thread), per element in microseconds. A ReLU fused
into a contraction (the common case) costs only its select sumcheck: the requantization commits the bits anyway.
"""
import argparse

try:
    import _repo  # noqa: F401  (run as a script: threads and import path first)
except ImportError:
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.<name>)

from benchmarks._timing import median_ms, print_table  # noqa: E402

import numpy as np  # noqa: E402

from proofs import field as F  # noqa: E402
from proofs.commit import CommitParams, commit, open_commitment, verify_opening  # noqa: E402
from proofs.graph_quantize import lookup_table  # noqa: E402
from proofs.layers.common import Claim  # noqa: E402
from proofs.layers.graph import _full_boxes, _open_weights, _verify_weights, bits_params  # noqa: E402
from proofs.layers.packing import Packing  # noqa: E402
from proofs.layers.relu_batch import prove_bits, prove_select, verify_bits, verify_select  # noqa: E402
from proofs.layers.requant import Decomposition, decompose  # noqa: E402
from proofs.lookup import multiplicities, prove_lookup, verify_lookup  # noqa: E402
from proofs.mle import mle_evaluate  # noqa: E402
from proofs.transcript import Transcript  # noqa: E402

PARAMS = bits_params(CommitParams())


def _relu(x, bits: int):
    """(prove, verify) of zkReLU on x (n values of ``bits`` signed bits)."""
    spec = Decomposition(0, bits, True)
    witness = decompose(x, spec)
    keys = list(range(len(spec.groups)))
    packing = Packing(tuple(witness.table(g).size for g in keys))
    packed = packing.pack([witness.table(g) for g in keys])
    point = Transcript("point").challenge_ext_vector("r", int(len(x)).bit_length() - 1)
    claim = Claim(point, mle_evaluate(F.to_field(np.maximum(x, 0)), point))
    blocks = [(0, start, count) for start, count in spec.groups]
    made = {}

    def prove():
        transcript = Transcript("bench relu")
        commitment, bits_witness = commit(packed, PARAMS)
        transcript.absorb("bits", commitment.to_bytes())
        select, _, statement = prove_select(witness, claim, transcript)
        proof, final = prove_bits(packed, packing, blocks, [statement], transcript)
        _, opening = open_commitment(bits_witness, final.point, transcript)
        made.update(commitment=commitment, select=select, proof=proof, opening=opening)

    def verify():
        transcript = Transcript("bench relu")
        transcript.absorb("bits", made["commitment"].to_bytes())
        _, statement = verify_select(spec, claim, made["select"], "relu", transcript)
        final = verify_bits(packing, blocks, [statement], made["proof"], transcript)
        verify_opening(made["commitment"], final.point, final.value, made["opening"], transcript)

    return prove, verify


def _lookup(x, bits: int):
    """(prove, verify) of a sigmoid lookup on x (n values of ``bits`` signed bits)."""
    inputs, outputs = lookup_table("sigmoid", bits, max(bits - 4, 0), 10)
    y = outputs[x - inputs[0]]
    selector = np.ones(len(x), dtype=np.uint64)
    t_in, t_out = F.to_field(inputs), F.to_field(outputs)
    packing = Packing((len(inputs), len(x)))
    boxes = _full_boxes(packing)
    made = {}

    def prove():
        transcript = Transcript("bench lookup")
        m = F.to_field(multiplicities(x, inputs))
        commitment, witness = commit(packing.pack([m, F.to_field(y)]), PARAMS)
        transcript.absorb("lookup", commitment.to_bytes())
        proof, found = prove_lookup(F.to_field(x), F.to_field(y), selector, t_in, t_out, m, transcript)
        items = []
        claims = [(1, Claim(found.witness_point, found.y_eval)), (0, Claim(found.table_point, found.m_eval))]
        opening = _open_weights(witness, packing, boxes, claims, transcript, items, "lookups / merge")
        made.update(commitment=commitment, proof=proof, items=items, opening=opening)

    def verify():
        transcript = Transcript("bench lookup")
        transcript.absorb("lookup", made["commitment"].to_bytes())
        found = verify_lookup(made["proof"], int(len(x)).bit_length() - 1, lambda point: F.ext_one(), t_in, t_out,
                              transcript)
        claims = [Claim(packing.point(1, found.witness_point), found.y_eval),
                  Claim(packing.point(0, found.table_point), found.m_eval)]
        _verify_weights(made["commitment"], packing, boxes, claims, made["opening"], transcript,
                        _Items(made["items"]), "lookups / merge")

    return prove, verify


class _Items:
    def __init__(self, items):
        self.items = items

    def take(self, tag, where):
        return self.items[0][1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one size, fewer repeats")
    args = parser.parse_args(argv)
    sizes = [1 << 12] if args.quick else [1 << 12, 1 << 16]
    repeats = 2 if args.quick else 3
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        for bits in (8, 12, 16):
            x = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n)
            for name, make in (("zkReLU bits", _relu), ("lookup", _lookup)):
                prove, verify = make(x, bits)
                t_prove = median_ms(prove, repeats)
                t_verify = median_ms(verify, repeats)
                rows.append([f"{name}, n = 2^{n.bit_length() - 1}, b = {bits}", t_prove, t_verify,
                             1e3 * t_prove / n, 1e3 * t_verify / n])
    print_table("elementwise function of n values of b bits: zkReLU's bit decomposition against a LogUp-GKR lookup",
                ["proof", "prove ms", "verify ms", "prove us/elem", "verify us/elem"], rows)


if __name__ == "__main__":
    main()
