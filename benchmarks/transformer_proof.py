"""The proof half of issue 34's benchmark: a torch ``nn.TransformerEncoderLayer`` (batch first, GELU, no dropout)
exported by torch, read by :mod:`hezk.model`, quantized (:func:`proofs.graph_quantize.quantize_graph`: attention's
products as bilinear ops, Softmax and LayerNorm lowered to lookups, row kernels and products) and proven.

    python benchmarks/transformer_proof.py [--quick] [--gpt2] [--no-hiding] [--hidden-only] [--scheme basefold]
                                           [--parts]

Rows: the 16 x 32, 2-head layer (feed-forward 64) and a BERT-tiny-size one (width 128, 2 heads, sequence 32,
feed-forward 512); ``--gpt2`` adds a GPT-2-small-size block (width 768, 12 heads, sequence 32, feed-forward 3072;
about 5 GB, public weights only unless the hiding run is wanted too); ``--quick``: the first row only. For each:
commit, prove and verify wall time (seconds, one thread, one sample), the prove's CPU time (what a shared machine's
load does not inflate), proof bytes, the process's peak RSS so far, and the proven output's largest error against
onnxruntime as a fraction of onnxruntime's largest output magnitude; the load average before and after. The hiding
proof is the default ``hezk commit`` (weights private, Ligero; its requantizations range-checked by the range lookup,
:mod:`proofs.layers.graph_zk`); ``--public-weights`` is the plain one (``--hidden-only`` skips it). ``--scheme
basefold``: the hiding proof over hiding Basefold stores (:func:`proofs.layers.graph_zk.graph_basefold_params`: one
batch opening of the weights, the proof store, the lookup store and every mask); ``--parts``: each hiding proof's
bytes by part (which store's opening, the sumchecks, the stated values). Measured (one core, prove CPU, load
8-11): GPT-2-small block hidden, Ligero 3.80 MB (weights' opening 1.47 MB, lookup store 1.08, proof store 0.76,
masks 0.17, sumchecks 0.11), 5.45 s (load 1.1; the code before issue 34's encoding and round kernels: 7.88 s
at load 2.5, 10.1 s at load 8-11), 101.3 bits; hiding Basefold 0.97 MB (batch opening 0.66 MB, masked
sumchecks 0.11), 22.2 s, verify 0.44 s CPU, 102.0 bits per hash (87.4 statistical), 4.9 GB (load 4): rate 1/2 with
rows of 2^22 symbols and a 12-bit proof of work before each fold (``fold_grinding_bits``, :mod:`proofs.basefold`;
without it only rows of 2^16 reached 100 bits for its 2^25 committed entries over F_p^4: 7.83 MB, 20.3 s, 3.3 GB).
Hiding Basefold, same run: the 16 x 32 layer 0.41 MB (2.57 s), BERT-tiny's 0.50 MB (4.16 s), >= 102.8 bits.

Through the command lines (the GPT-2-small block exported by this script's ``export``, 16 calibration samples,
``hezk commit`` then ``hezk prove``, default hiding Ligero with 16 copies, wall time and peak RSS, 2026-12-06):
commit 51.9 s / 17.0 GB and prove 13.3 s / 4.1 GB with a 2.26 GB prover state before the copies were committed
one code at a time and the state kept each copy's randomness only; after, commit 38.6 s / 7.3 GB, state 111 MB,
prove 9.1 s / 2.2 GB (proof 3.88 MB, verify 2.4 s). One hiding Basefold prove in process (freed memory kept, one
thread) spent 6.5 s committing the proof and lookup stores, 3.7 s in the relations' sumchecks and 8.8 s in the
batch opening (19.6 s): the lookup store's 2^22.23 entries committed 2^23 and the weights' 2^22.76 2^24 (each
matrix padded to powers of two on both axes). Since 2026-12-07 a hiding Basefold store commits the power-of-two
pieces of its tensors' real boxes (``proofs.layers.basefold_channel.StorePlan``; the relations' masks in the
store's own padding; the range lookup over the real entries only): the stores are 2^23 (weights), 2^22, 2^22,
the parameters rate 1/4 with 130 queries, and the GPT-2-small block's hidden Basefold prove takes 11.9-12.2 s
against 21.1-22.1 s for the code before (interleaved runs at the same machine state, one thread; 10.9 s at a
faster moment of this shared machine), 0.88 MB (0.96 before; batch opening 0.57 MB, masked sumchecks 0.11),
verify 0.38 s, 101.4 bits, peak RSS 3.4 GB; this script's first prove of a run measured 13.5 s (load 0.9).
With the bit planes and range remainders boxed too (the session's last code, the proof store 2.79M of its 2^22
entries used): 10.2-10.6 s against 19.1 s for the code before, run in the same minutes.
The default hiding Ligero proof of the same block, after the same change (every store layout commits its boxes'
pieces, ``proofs.relations.StoreLayout.blocks``), interleaved with the code before: prove 6.1-6.7 -> 4.8-5.8 s,
3.87 -> 3.15 MB, commit (2 copies) 10-14 -> 6.7-7.1 s, commit of the default 16 copies 63.1 -> 44.4 s (one run each,
load ~1). Through the command lines, default Ligero with 16 copies (wall, peak RSS): commit 49.7 s / 5.9 GB
(commitment 18 MB, prover state 83 MB), prove 9.2 s / 1.7 GB (3.17 MB), verify 1.9 s / 0.3 GB.
Through the command lines (``hezk commit --scheme basefold --max-proofs 2``, ``hezk prove``, ``hezk verify``;
one thread, wall, peak RSS): 22.7 s / 3.0 GB, 18.5 s / 3.0 GB (reading and quantizing the model included),
1.7 s / 0.2 GB. Since 2026-12-07 (second stop) this script applies hezk's program settings (freed memory kept,
numpy's huge page hint off: :func:`hezk.memory.for_a_program`) and one kernel thread (``HEZK_THREADS=1``; before,
it ran the provers' kernels on every core while its table said one thread): the hiding Basefold prove of the
GPT-2-small block is **9.4 s** (0.88 MB, verify 0.41 s, 101.4 bits; the first prove of its process, load ~1),
against 11.7-12.2 s for the same code with numpy's huge page hint on (3.3 s of system time: a synchronous
compaction at each fresh table page's first touch) and 10.0-10.1 s for the code before this stop's kernel work
with the hint off (interleaved: 10.08 / 9.45 / 10.00 / 8.98 s, before / after). Through the command lines
(Basefold, 2 copies, one thread, wall / peak RSS): ``hezk commit`` 15.5 s / 3.0 GB, ``hezk prove`` 15.3 s /
3.0 GB (reading and quantizing the model and rebuilding the copy's code included), ``hezk verify`` 1.9 s.
What is left in the 9.4 s: the two prove-time stores' encodings and Merkle trees (about 2 s), the relations'
sumchecks (about 2.9 s), the opening's masked reduction, claim weights and batch opening (about 4 s).
"""
import argparse
import contextlib
import io
import os
import resource
import time

try:
    import _repo  # noqa: F401  (run as a script: threads and import path first)
except ImportError:
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.<name>)

from benchmarks._timing import print_table  # noqa: E402

import numpy as np  # noqa: E402

SIZES = {"16 x 32, 2 heads": (32, 2, 64, 16), "BERT-tiny layer": (128, 2, 512, 32),
         "GPT-2-small block": (768, 12, 3072, 32)}


def export(width: int, heads: int, feedforward: int, sequence: int, seed: int = 0):
    """The ONNX model of the layer on a (1, sequence, width) input (torch's TorchScript exporter, opset 17)."""
    import onnx
    import torch

    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(width, heads, feedforward, dropout=0.0, activation="gelu",
                                             batch_first=True).eval()

    class OnlyX(torch.nn.Module):  # the exporter would pass the default is_causal as a tensor otherwise
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x)

    buffer = io.BytesIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(OnlyX().eval(), (torch.zeros(1, sequence, width),), buffer, input_names=["x"],
                          output_names=["y"], dynamo=False, opset_version=17)
    return onnx.load_from_string(buffer.getvalue())


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def breakdown(proof, net) -> list:
    """(part, count, bytes) of a hiding graph proof's relation items (batch 1): each store's opening (Ligero: one
    per store; hiding Basefold: the one batch), the sumchecks, the stated values, the commitments."""
    from collections import Counter
    from proofs.layers.graph_zk import Shapes
    from proofs.zk import HidingOpening

    # the Ligero channel opens its stores in the layouts' order (model, proof store, lookup store), then the masks
    shapes = Shapes(net.qgraph, 1)
    opened = ["model weights", "proof store"] + (["lookup store"] if shapes.lookups or shapes.range_ops else []) + \
        ["relation masks"]
    sizes, counts = Counter(), Counter()
    relations = proof.relations
    for commitment in relations.commitments:
        sizes["proof store commitment"] += len(commitment.to_bytes())
        counts["proof store commitment"] += 1
    for item in relations.items:
        if isinstance(item, np.ndarray):
            part, size = "stated values", item.size * 4
        else:
            part, size = type(item).__name__, len(item.to_bytes())
            if isinstance(item, HidingOpening):
                part = f"Ligero opening: {opened.pop(0) if opened else 'store'}"
        sizes[part] += size
        counts[part] += 1
    return [(part, counts[part], size) for part, size in sizes.most_common()]


def run(name: str, hiding: bool, public: bool = True, scheme: str = "ligero", parts=None) -> list:
    import onnxruntime
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph import GraphNetwork, verify_graph
    from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk

    width, heads, feedforward, sequence = SIZES[name]
    model = export(width, heads, feedforward, sequence)
    rng = np.random.default_rng(0)
    q = quantize_graph(read_onnx(model), rng.normal(size=(16, 1, sequence, width)))
    x = q.quantize_input(rng.normal(size=(1, 1, sequence, width)))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": (x * 2.0 ** -q.input_frac).astype(np.float32).reshape(1, sequence, width)})[0]
    rows = []
    kinds = [("public weights", GraphNetwork, verify_graph, {})] if public else []
    if hiding:
        from proofs.layers.graph_zk import graph_basefold_params
        options = {"max_proofs": 1, "params": graph_basefold_params(q) if scheme == "basefold" else None}
        kinds.append((f"hidden weights, {scheme}", HidingGraphNetwork, verify_graph_zk, options))
    for kind, prover, verify, options in kinds:
        net, commit_s = _timed(lambda: prover(q, **options))
        cpu = time.process_time()
        made, prove_s = _timed(lambda: net.prove(x))
        proof = made.to_bytes()
        prove_cpu = time.process_time() - cpu
        cpu = time.process_time()
        verified, verify_s = _timed(lambda: verify(net.commitment, x, proof))
        verify_cpu = time.process_time() - cpu
        if parts is not None and prover is HidingGraphNetwork:
            parts.append((f"{name}, {kind} ({len(proof) / 1e6:.3f} MB, {verified.soundness_bits:.1f} bits)",
                          breakdown(made, net)))
        proven = q.dequantize(verified.output).reshape(expected.shape)
        error = float(np.max(np.abs(proven - expected)) / np.max(np.abs(expected)))
        rows.append((f"{name}, {kind}", commit_s, prove_s, prove_cpu, verify_s, verify_cpu, f"{len(proof) / 1e6:.2f}",
                     f"{_peak_mb():.0f}", f"{100 * error:.2f}%"))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the 16 x 32 layer only")
    parser.add_argument("--gpt2", action="store_true", help="add the GPT-2-small-size block (about 5 GB)")
    parser.add_argument("--no-hiding", action="store_true", help="public-weights proofs only")
    parser.add_argument("--hidden-only", action="store_true", help="hidden-weights proofs only")
    parser.add_argument("--scheme", choices=("ligero", "basefold"), default="ligero",
                        help="the hiding commitment (basefold: graph_basefold_params; refused for stores too large)")
    parser.add_argument("--parts", action="store_true", help="print each hiding proof's bytes by part")
    args = parser.parse_args(argv)
    os.environ.setdefault("HEZK_THREADS", "1")  # one kernel thread, as the table says (read at the first kernel)
    import hezk.memory
    kept = hezk.memory.for_a_program()  # as ``hezk commit|prove`` do (HEZK_KEEP_FREED_MEMORY=0: glibc's default)
    names = list(SIZES)[:1] if args.quick else list(SIZES)[:2] + (list(SIZES)[2:] if args.gpt2 else [])
    load = os.getloadavg()[0]
    parts = [] if args.parts else None
    rows = [row for name in names for row in run(name, not args.no_hiding, not args.hidden_only, args.scheme, parts)]
    print_table(f"transformer encoder layer proofs (one sample, wall seconds, one thread, freed memory "
                f"{'kept' if kept else 'returned'}; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after)",
                ("layer", "commit s", "prove s", "prove CPU s", "verify s", "verify CPU s", "proof MB",
                 "peak RSS MB", "error / max |y|"), rows)
    for title, table in parts or ():
        print_table(f"bytes by part: {title}", ("part", "items", "kB"),
                    [(part, count, f"{size / 1e3:.1f}") for part, count, size in table])


if __name__ == "__main__":
    main()
