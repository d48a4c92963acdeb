"""Every parser of the proofs package raises only ProofRejected, whatever the bytes (issue 11, item 5).

PARSERS lists every public ``from_bytes`` / ``read`` with a valid sample made from small objects. The header
fields of each sample (every integer the reader reads: magics' versions, counts, flags, array ndims and
dimensions, i64 and f64 fields) are located by recording the readers' calls while the sample is parsed, so a
new field is mutated without editing this file. Each field then gets crafted values (zero, one, all ones,
the sign bit, 2^28 and 2^32 - 1, the bytes left, off by one), each array header crafted shapes (a zero
dimension beside huge ones, products overflowing 2^64, counts just beyond the bytes left); inputs are
truncated at every byte (short samples) or at sampled positions and every field boundary (long ones); and
hypothesis feeds random bytes, random bytes behind a valid header and random splices of a valid sample.
A parse either succeeds or raises ProofRejected: any other exception fails (also one that only
``parse_nested``'s catch-all turned into ProofRejected).
"""
import struct
from dataclasses import dataclass

import numpy as np

from proofs.layers import proof_items
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs import proof_format
from proofs.cli import main as cli_main
from proofs.commit import Commitment, OpeningProof, commit, open_batch
from proofs.errors import ProofRejected
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.layers.network import ModelCommitment, Network, NetworkProof, read_proof
from proofs.layers.network_zk import HidingNetworkProof
from proofs.layers.reusable import Reusable
from proofs.quantize import quantize_fixed_point, quantize_input
from proofs.sumcheck import SumcheckProof, prove_sumcheck
from proofs.transcript import Transcript
from proofs.zk import HidingCommitment, HidingOpening, ZKSumcheckProof, hiding_commit, open_points, prove_zk_sumcheck

SHORT = 4096  # samples up to this many bytes are truncated at every byte
FAST_FIELDS, LONG, LONG_FIELDS = 120, 100_000, 40  # header fields mutated per sample by default (fewer in
# samples over LONG bytes; all of them in the slow sweep)
FAST_CUTS, SLOW_CUTS = 200, 3000  # sampled truncation points of a long sample


def _via_reader(read):
    """A ``read(reader)`` classmethod as a parser of a whole byte string (trailing bytes rejected)."""
    def parse(data):
        reader = F.ByteReader(data, "test")
        value = read(reader)
        reader.finish()
        return value
    return parse


# ------------------------------------------------------------------------------------------ samples
def _training_proofs():
    spec = T.TrainingSpec((2, 2), batch=1, act_bits=4, weight_bits=4, shift=2, grad_shift=2, grad_bits=6,
                          lr_shift=2, update_bits=6)
    rng = np.random.default_rng(0)
    weights = [rng.integers(-3, 3, size=(2, 2))]
    x, y = rng.integers(-3, 3, size=(1, 2)), rng.integers(-3, 3, size=(1, 2))
    trace = T.training_trace(weights, x, y, spec)
    plain = S.prove_training_step(trace, S.commit_step(trace, zk=False, seed=1), zk=False)
    hiding = S.prove_training_step(trace, S.commit_step(trace, zk=True, seed=2), zk=True)
    return plain.to_bytes(), hiding.to_bytes()


def _samples():
    table = F.to_field(np.arange(8))
    commitment, witness = commit(np.arange(16))
    _, opening = open_batch(witness, F.ext_random((1, 4), seed=1), Transcript("t"))
    sumcheck, _, _ = prove_sumcheck([(1, [table])], int(F.sum_(table)), Transcript("s"))
    hiding, hiding_witness = hiding_commit(np.arange(16), seed=1)
    _, hiding_opening = open_points(hiding_witness, F.ext_random((1, 4), seed=2), Transcript("h"), seed=3)
    zk_sumcheck, _, _ = prove_zk_sumcheck([(1, [table])], int(F.sum_(table)), Transcript("z"), seed=4)
    rng = np.random.default_rng(5)
    model = quantize_fixed_point([rng.normal(0, 0.4, (3, 4)), rng.normal(0, 0.4, (2, 3))],
                                 [rng.normal(0, 0.1, 3), rng.normal(0, 0.1, 2)], frac_bits=6)
    x = quantize_input(model, rng.uniform(-1, 1, (2, 4)))
    plain_network, hiding_network = Network(model, zk=False), Network(model, zk=True, max_proofs=2)
    plain_proof, hiding_proof = plain_network.prove(x).to_bytes(), hiding_network.prove(x).to_bytes()
    plain_training, hiding_training = _training_proofs()
    return {
        "Commitment.from_bytes": (Commitment.from_bytes, commitment.to_bytes()),
        "OpeningProof.from_bytes": (OpeningProof.from_bytes, opening.to_bytes()),
        "SumcheckProof.from_bytes": (SumcheckProof.from_bytes, sumcheck.to_bytes()),
        "HidingCommitment.from_bytes": (HidingCommitment.from_bytes, hiding.to_bytes()),
        "HidingCommitment.read": (_via_reader(HidingCommitment.read), hiding.to_bytes()),
        "HidingOpening.read": (_via_reader(HidingOpening.read), hiding_opening.to_bytes()),
        "ZKSumcheckProof.read": (_via_reader(ZKSumcheckProof.read), zk_sumcheck.to_bytes()),
        "Reusable.from_bytes": (Reusable.from_bytes, hiding_network.commitment.weights.to_bytes()),
        "ModelCommitment.from_bytes (plain)": (ModelCommitment.from_bytes, plain_network.commitment.to_bytes()),
        "ModelCommitment.from_bytes (zk)": (ModelCommitment.from_bytes, hiding_network.commitment.to_bytes()),
        "NetworkProof.from_bytes": (NetworkProof.from_bytes, plain_proof),
        "HidingNetworkProof.from_bytes": (HidingNetworkProof.from_bytes, hiding_proof),
        "read_proof (plain)": (read_proof, plain_proof),
        "read_proof (zk)": (read_proof, hiding_proof),
        "TrainingProof.from_bytes (plain)": (S.TrainingProof.from_bytes, plain_training),
        "TrainingProof.from_bytes (zk)": (S.TrainingProof.from_bytes, hiding_training),
        # the top-level objects are hezk.record records (checksummed): their inner encodings are fuzzed here
        "Reusable.from_inner_bytes": (Reusable.from_inner_bytes, hiding_network.commitment.weights.inner_bytes()),
        "ModelCommitment.from_inner_bytes (plain)": (ModelCommitment.from_inner_bytes,
                                                     plain_network.commitment.inner_bytes()),
        "ModelCommitment.from_inner_bytes (zk)": (ModelCommitment.from_inner_bytes,
                                                  hiding_network.commitment.inner_bytes()),
        "NetworkProof.from_inner_bytes": (NetworkProof.from_inner_bytes,
                                          NetworkProof.from_bytes(plain_proof).inner_bytes()),
        "HidingNetworkProof.from_inner_bytes": (HidingNetworkProof.from_inner_bytes,
                                                HidingNetworkProof.from_bytes(hiding_proof).inner_bytes()),
        "TrainingProof.from_inner_bytes (plain)": (S.TrainingProof.from_inner_bytes,
                                                   S.TrainingProof.from_bytes(plain_training).inner_bytes()),
        "TrainingProof.from_inner_bytes (zk)": (S.TrainingProof.from_inner_bytes,
                                                S.TrainingProof.from_bytes(hiding_training).inner_bytes()),
    }


PARSERS = ["Commitment.from_bytes", "OpeningProof.from_bytes", "SumcheckProof.from_bytes",
           "HidingCommitment.from_bytes", "HidingCommitment.read", "HidingOpening.read", "ZKSumcheckProof.read",
           "Reusable.from_bytes", "ModelCommitment.from_bytes (plain)", "ModelCommitment.from_bytes (zk)",
           "NetworkProof.from_bytes", "HidingNetworkProof.from_bytes", "read_proof (plain)", "read_proof (zk)",
           "TrainingProof.from_bytes (plain)", "TrainingProof.from_bytes (zk)", "Reusable.from_inner_bytes",
           "ModelCommitment.from_inner_bytes (plain)", "ModelCommitment.from_inner_bytes (zk)",
           "NetworkProof.from_inner_bytes", "HidingNetworkProof.from_inner_bytes",
           "TrainingProof.from_inner_bytes (plain)", "TrainingProof.from_inner_bytes (zk)"]


# ------------------------------------------------------------------------- the header fields of a sample
@dataclass(frozen=True)
class Field:
    offset: int  # absolute, in the sample's bytes
    size: int  # bytes
    kind: str  # "uint", "i64", "f64" or "ndim" (an array header: ndim byte, then ndim u32 dimensions)
    ndim: int = 0


def _record_fields(parse, data, monkeypatch):
    """Parse ``data`` while recording every integer field read, with absolute offsets (nested blobs too)."""
    fields, origin = [], {}  # origin: id(bytes a reader returned) -> (the bytes, their absolute offset)
    base_of = {}
    real_init, real_raw = F.ByteReader.__init__, F.ByteReader.raw
    real_uint, real_elements = F.ByteReader.uint, F.ByteReader.elements
    real_i64, real_f64 = proof_format.ByteReader.i64, proof_format.ByteReader.f64

    def init(self, blob, *args, **kwargs):
        real_init(self, blob, *args, **kwargs)
        base_of[id(self)] = origin.get(id(blob), (None, 0))[1] if blob is not data else 0

    def raw(self, n):
        at = base_of.get(id(self), 0) + self._pos
        out = real_raw(self, n)
        origin[id(out)] = (out, at)
        return out

    def logged(real, kind, size=None):
        def call(self, *args, **kwargs):
            first = next(iter(args), kwargs.get("size", kwargs.get("ndim")))
            fields.append(Field(base_of.get(id(self), 0) + self._pos, size or first, kind,
                                first if kind == "ndim" else 0))
            return real(self, *args, **kwargs)
        return call

    monkeypatch.setattr(F.ByteReader, "__init__", init)
    monkeypatch.setattr(F.ByteReader, "raw", raw)
    monkeypatch.setattr(F.ByteReader, "uint", logged(real_uint, "uint"))
    monkeypatch.setattr(F.ByteReader, "elements", logged(real_elements, "ndim", 1))
    monkeypatch.setattr(proof_format.ByteReader, "i64", logged(real_i64, "i64", 8))
    monkeypatch.setattr(proof_format.ByteReader, "f64", logged(real_f64, "f64", 8))
    try:
        parse(data)
    finally:
        monkeypatch.undo()
    return sorted(set(fields), key=lambda f: (f.offset, f.kind))


@pytest.fixture(scope="module")
def samples():
    made = _samples()
    assert sorted(made) == sorted(PARSERS)
    with pytest.MonkeyPatch.context() as monkeypatch:
        return {name: (parse, data, _record_fields(parse, data, monkeypatch)) for name, (parse, data) in made.items()}


def parses_or_rejects(parse, data, case=""):
    """Parse; succeed or raise ProofRejected, anything else fails the test naming the case. A rejection made
    by :func:`proofs.proof_format.parse_nested`'s catch-all (another exception converted) fails too: the
    readers must reject before anything else can raise."""
    try:
        parse(data)
    except ProofRejected as exc:
        if exc.reason.startswith("malformed nested"):
            pytest.fail(f"an exception escaped a nested parser and was converted ({case}): {exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{type(exc).__name__}: {exc} escaped the parser ({case}, {len(data)} bytes)")
    return True


def _pick(items, limit, seed):
    if limit is None or len(items) <= limit:
        return list(items)
    rng = np.random.default_rng(seed)
    keep = set(range(min(limit // 2, len(items))))  # the leading fields (magic, version, counts) ...
    keep |= set(rng.choice(len(items), size=limit - len(keep), replace=False).tolist())  # ... and a sample
    return [items[i] for i in sorted(keep)]


def _crafted_values(field, data):
    """Crafted replacements of one integer field."""
    bits = 8 * field.size
    left = len(data) - field.offset - field.size
    current = int.from_bytes(data[field.offset:field.offset + field.size], "little")
    values = {0, 1, 2, 255, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1, current + 1, current - 1,
              left, left + 1, left // 4, left // 4 + 1, left // 32 + 1, 1 << 20, 1 << 28, (1 << 28) + 1, 1 << 31,
              1 << 32, (1 << 32) - 1, 1 << 63}
    return sorted(v % (1 << bits) for v in values)


def _crafted_shapes(ndim, left):
    """Array shapes that a length check in fixed-width or float arithmetic lets through."""
    huge, over = (1 << 32) - 1, 1 << 31
    shapes = [(0,) + (huge,) * (ndim - 1), (huge,) * (ndim - 1) + (0,), (huge,) * ndim, (over,) * ndim,
              (left // 4 + 1,) + (1,) * (ndim - 1), (1 << 16,) * ndim, ((1 << 28) + 1,) + (1,) * (ndim - 1)]
    if ndim >= 2:
        shapes += [(1 << 16, 0) + (1 << 16,) * (ndim - 2), (huge, 2) + (0,) * (ndim - 2),
                   (1 << 14, 1 << 14) + (1,) * (ndim - 2)]  # 2^28 entries, far beyond the bytes left
    return shapes


def _mutations(data, fields):
    """(case, bytes) with each field replaced by crafted values and each array header by crafted shapes."""
    for field in fields:
        end = field.offset + field.size
        if field.kind == "f64":
            for value in (float("nan"), float("inf"), -float("inf"), -0.0, 1e308, -1e308, 5e-324):
                yield f"f64 at {field.offset} = {value}", data[:field.offset] + struct.pack("<d", value) + data[end:]
        for value in _crafted_values(field, data):
            yield (f"{field.kind} at {field.offset} = {value}",
                   data[:field.offset] + value.to_bytes(field.size, "little") + data[end:])
        if field.kind == "ndim":
            header_end = end + 4 * field.ndim
            left = len(data) - header_end
            for shape in _crafted_shapes(field.ndim, left):
                header = bytes([field.ndim]) + b"".join(struct.pack("<I", n) for n in shape)
                yield f"shape at {field.offset} = {shape}", data[:field.offset] + header + data[header_end:]
            for ndim in (0, field.ndim - 1, field.ndim + 1, 64, 255):  # ndim mismatches, with huge dimensions
                header = bytes([ndim % 256]) + struct.pack("<I", 0) + struct.pack("<I", (1 << 32) - 1) * 3
                yield f"ndim at {field.offset} = {ndim}", data[:field.offset] + header + data[header_end:]


# ------------------------------------------------------------------------------------------ the tests
def test_every_sample_parses_and_every_kind_of_field_is_found(samples):
    for name, (parse, data, fields) in samples.items():
        assert parses_or_rejects(parse, data, name), name  # the valid sample parses
        assert fields, name
    kinds = {f.kind for _, _, fields in samples.values() for f in fields}
    assert kinds == {"uint", "ndim", "i64", "f64"}
    assert proof_items._commitment_bytes() == len(samples["HidingCommitment.from_bytes"][1])


@pytest.mark.parametrize("name", PARSERS)
def test_crafted_header_fields_raise_only_proof_rejected(samples, name):
    parse, data, fields = samples[name]
    limit = FAST_FIELDS if len(data) <= LONG else LONG_FIELDS
    arrays = [f for f in fields if f.kind == "ndim"]  # half the budget for array headers
    chosen = _pick(arrays, limit // 2, seed=1) + _pick([f for f in fields if f.kind != "ndim"], limit // 2, seed=2)
    for case, mutated in _mutations(data, chosen):
        parses_or_rejects(parse, mutated, f"{name}: {case}")


def _cut_points(data, fields, limit):
    if len(data) <= SHORT:
        return range(len(data))
    rng = np.random.default_rng(len(data))
    boundaries = {f.offset for f in fields} | {f.offset + f.size for f in fields}
    cuts = set(rng.choice(len(data), size=limit, replace=False).tolist()) | set(range(64))
    return sorted(c for c in cuts | set(_pick(sorted(boundaries), limit, seed=1)) if c < len(data))


@pytest.mark.parametrize("name", PARSERS)
def test_every_truncation_and_trailing_byte_is_rejected(samples, name):
    parse, data, fields = samples[name]
    for cut in _cut_points(data, fields, FAST_CUTS):
        assert not parses_or_rejects(parse, data[:cut], f"{name}: cut at {cut}"), f"{name} accepted a cut at {cut}"
    for extra in (b"\x00", b"\xff" * 5):
        assert not parses_or_rejects(parse, data + extra, f"{name}: trailing"), f"{name} accepted trailing bytes"


@pytest.mark.slow
@pytest.mark.parametrize("name", PARSERS)
def test_full_sweep_of_fields_and_truncations(samples, name):
    parse, data, fields = samples[name]
    for case, mutated in _mutations(data, fields):
        parses_or_rejects(parse, mutated, f"{name}: {case}")
    for cut in _cut_points(data, fields, SLOW_CUTS):
        assert not parses_or_rejects(parse, data[:cut], f"{name}: cut at {cut}")


@pytest.mark.parametrize("name", PARSERS)
@settings(max_examples=40)
@given(blob=st.binary(max_size=300), start=st.integers(0, 1 << 30), keep_prefix=st.integers(0, 2))
def test_random_bytes_raise_only_proof_rejected(samples, name, blob, start, keep_prefix):
    """Random bytes; random bytes behind the sample's first bytes (magic, version); a random splice of it."""
    parse, data, _ = samples[name]
    if keep_prefix == 0:
        candidate = blob
    elif keep_prefix == 1:
        candidate = data[:start % 16] + blob
    else:
        at = start % len(data)
        candidate = data[:at] + blob + data[at + len(blob):]
    parses_or_rejects(parse, candidate, f"{name}: random")


def test_the_reported_escape_zero_dimension_beside_huge_ones():
    """The audit's case: shape (0, 2^32 - 1, 2^32 - 1) passed the length check and numpy raised ValueError."""
    table = F.to_field(np.arange(8))
    data = prove_sumcheck([(1, [table])], int(F.sum_(table)), Transcript("s"))[0].to_bytes()
    header = len(data) - len(F.elements_to_bytes(np.zeros((3, 2, 4), dtype=np.uint64)))
    for shape in [(0, (1 << 32) - 1, (1 << 32) - 1), ((1 << 32) - 1, (1 << 32) - 1, 0), (1 << 31, 1 << 31, 1 << 31)]:
        crafted = data[:header] + bytes([3]) + b"".join(struct.pack("<I", n) for n in shape)
        with pytest.raises(ProofRejected, match="MAX_ARRAY_ELEMENTS"):
            SumcheckProof.from_bytes(crafted)


def test_reader_checks_counts_against_the_bytes_left():
    reader = F.ByteReader(struct.pack("<I", 3) + bytes(95), "test")
    with pytest.raises(ProofRejected, match="count=3 items of at least 32 bytes, 95 bytes left"):
        reader.count(4, 32, "count")
    reader = F.ByteReader(struct.pack("<I", 3) + bytes(96), "test")
    assert reader.count(4, 32, "count") == 3
    with pytest.raises(ProofRejected, match="count=3 > 2"):
        F.ByteReader(struct.pack("<I", 3) + bytes(96), "test").count(4, 32, "count", limit=2)
    empty = F.ByteReader(bytes([2]) + struct.pack("<II", 0, 1 << 28), "test").elements(2)
    assert empty.shape == (0, 1 << 28) and empty.dtype == np.uint64


@pytest.mark.parametrize("kind", ["plain", "zk"])
def test_cli_verify_rejects_crafted_files_with_exit_code_one(tmp_path, samples, capsys, kind):
    proof_name = "NetworkProof.from_bytes" if kind == "plain" else "HidingNetworkProof.from_bytes"
    _, proof, fields = samples[proof_name]
    _, commitment, _ = samples[f"ModelCommitment.from_bytes ({kind})"]
    np.save(tmp_path / "x.npy", np.zeros((2, 4)))
    (tmp_path / "c.bin").write_bytes(commitment)
    at = next(f.offset for f in fields if f.kind == "ndim" and f.ndim == 3)  # a sumcheck's round messages
    zero_huge = bytes([3]) + struct.pack("<III", 0, (1 << 32) - 1, (1 << 32) - 1)
    for name, data in [("random", bytes(range(256)) * 3), ("cut", proof[:len(proof) // 2]),
                       ("shape", proof[:at] + zero_huge + proof[at + 13:])]:
        (tmp_path / f"{name}.bin").write_bytes(data)
        code = cli_main(["verify", "--commitment", str(tmp_path / "c.bin"), "--input", str(tmp_path / "x.npy"),
                         "--proof", str(tmp_path / f"{name}.bin")])
        assert code == 1, name
        assert capsys.readouterr().out == "reject\n"
