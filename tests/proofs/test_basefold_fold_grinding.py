"""Basefold's proof of work before the folding challenges (``fold_grinding_bits``) and its multi-proofs: the
accounting recomputed independently, honest ground openings (plain and hiding) verify, every wrong, missing or
extra fold nonce and every malformed byte string is rejected with ProofRejected only, and without fold grinding
the bytes are those of before."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import basefold as B
from proofs import basefold_zk as Z
from proofs import field as F
from proofs import grinding
from proofs.errors import ProofError, ProofRejected
from proofs.pcs.merkle import multiproof_siblings
from proofs.transcript import Transcript
from tests.proofs.byte_mutations import mutated

SMALL = B.BasefoldParams(rate_inv=4, arity=2, final_vars=2, max_log_codeword=8)  # folds, shares, interleaves
FOLDS = dataclasses.replace(SMALL, fold_grinding_bits=6)
SIZES, COUNTS = [9, 7, 2, 5], [2, 1, 1, 3]  # interleaved tables, a small one, joins at 9, 7 and 5 variables


def _opened(params, sizes=SIZES, counts=COUNTS, seed=3):
    rng = np.random.default_rng(seed)
    witnesses, points = [], []
    for n, m in zip(sizes, counts):
        witnesses.append(B.commit(rng.integers(0, F.P, 1 << n, dtype=np.uint64), params)[1])
        points.append(F.ext_random((m, n), seed=int(rng.integers(2 ** 32))))
    values, proof = B.open_batch(witnesses, points, Transcript("test"))
    return [w.commitment for w in witnesses], points, values, proof


def _verify(commitments, points, values, proof, bits=0):
    B.verify_batch(commitments, points, values, proof, Transcript("test"), min_security_bits=bits)


@pytest.fixture(scope="module")
def ground():
    opened = _opened(FOLDS)
    _verify(*opened)
    return opened


def test_fold_grinding_bits_are_validated_and_travel_in_the_commitment():
    for bad in (-1, grinding.MAX_BITS + 1, 2.5, "3"):
        with pytest.raises(ProofError, match="fold_grinding_bits"):
            B.BasefoldParams(fold_grinding_bits=bad)
    plain = B.BasefoldCommitment(b"\1" * 32, 12, SMALL)
    folded = B.BasefoldCommitment(b"\1" * 32, 12, FOLDS)
    assert B.BasefoldCommitment.from_bytes(folded.to_bytes()) == folded
    assert len(folded.to_bytes()) == len(plain.to_bytes()) + 1
    assert plain.to_bytes()[8] == 2 and folded.to_bytes()[8] == 3  # version 2 unchanged without fold grinding
    assert plain.to_bytes() == b"HZKBFC01\x02\x0c" + bytes([2, 2, 2, 0, 8]) + \
        SMALL.num_queries.to_bytes(2, "little") + b"\0" + b"\1" * 32  # the old layout, byte for byte
    assert FOLDS.num_queries == SMALL.num_queries  # fold grinding buys no queries
    assert "6-bit proof of work per fold" in FOLDS.describe() and "per fold" not in SMALL.describe()


def test_non_canonical_commitment_bytes_are_rejected():
    plain = B.BasefoldCommitment(b"\1" * 32, 12, SMALL).to_bytes()
    as_three = plain[:8] + b"\x03" + plain[9:17] + b"\0" + plain[17:]  # version 3 naming 0 fold bits
    with pytest.raises(ProofRejected, match="0 fold grinding bits"):
        B.BasefoldCommitment.from_bytes(as_three)
    folded = B.BasefoldCommitment(b"\1" * 32, 12, FOLDS).to_bytes()
    for bad in (folded[:8] + b"\x02" + folded[9:], folded[:8] + b"\x04" + folded[9:], folded + b"\0", folded[:-1],
                folded[:17] + bytes([grinding.MAX_BITS + 1]) + folded[18:]):
        with pytest.raises(ProofRejected):
            B.BasefoldCommitment.from_bytes(bad)


def _terms(commitments):
    """(fold terms, other terms) of a batch, from the codeword lengths: per table (s + 1) N' and 4 n + 2, and 2 N_top."""
    fold, other, top = 0, 0, 0
    for c in commitments:
        s = max(0, min(c.num_vars + c.params.rate_inv.bit_length() - 1 - c.params.max_log_codeword,
                       c.num_vars - c.params.final_vars))
        length = (1 << c.num_vars) * c.params.rate_inv >> s
        fold, other, top = fold + (s + 1) * length, other + 4 * c.num_vars + 2, max(top, length)
    return fold + 2 * top, other


@pytest.mark.parametrize("bits", [0, 1, 8, 20])
def test_fold_terms_count_per_hash_and_not_in_the_statistical_bits(bits):
    params = B.BasefoldParams(rate_inv=4, max_log_codeword=25, grinding_bits=12, fold_grinding_bits=bits)
    commitments = [B.BasefoldCommitment(b"\0" * 32, n, params) for n in (25, 24, 23, 12)]
    fold, other = _terms(commitments)
    field = 2.0 ** -F.EXT_BITS
    per_hash = -math.log2(2.0 ** -params.query_bits + (fold * 2.0 ** -bits + other) * field)
    statistical = -math.log2(2.0 ** -params.statistical_query_bits + (fold + other) * field)
    assert math.isclose(B.batch_security_bits(commitments), per_hash, rel_tol=1e-12)
    assert math.isclose(B.statistical_bits(B.batch_security_bits, commitments), statistical, rel_tol=1e-12)
    assert sum(c.fold_terms for c in commitments) + 2 * (1 << 25) == fold  # rows of 2^25 symbols: the property
    if bits >= 8:  # rows of 2^25 symbols reach 100 bits per hash only with the fold terms ground
        assert B.batch_security_bits(commitments) >= 100 > B.batch_security_bits(
            [dataclasses.replace(c, params=dataclasses.replace(params, fold_grinding_bits=0)) for c in commitments])


def test_a_ground_opening_verifies_with_one_nonce_per_fold_challenge(ground):
    commitments, points, values, proof = ground
    # 7 opening rounds (9 -> 2 variables) and joins at 9, 7 and 5 variables
    assert len(proof.fold_nonces) == 7 + 3
    assert B.fold_work_count(B.schedule([c.num_vars for c in commitments], FOLDS, COUNTS, points_list=points),
                             [c.num_vars for c in commitments], FOLDS) == 10
    parsed = B.BasefoldProof.from_bytes(proof.to_bytes())
    assert parsed.fold_nonces == proof.fold_nonces and parsed.to_bytes() == proof.to_bytes()
    assert proof.to_bytes()[8] == 3
    _verify(commitments, points, values, parsed)


def test_without_fold_grinding_the_proof_bytes_are_version_2():
    commitments, points, values, proof = _opened(SMALL)
    assert proof.fold_nonces == () and proof.to_bytes()[8] == 2
    _verify(commitments, points, values, B.BasefoldProof.from_bytes(proof.to_bytes()))
    with pytest.raises(ProofRejected, match="fold nonces"):  # nonces where the parameters ask for none
        _verify(commitments, points, values, dataclasses.replace(proof, fold_nonces=(0,)))


def test_a_wrong_missing_or_extra_fold_nonce_is_rejected(ground):
    commitments, points, values, proof = ground
    nonces = list(proof.fold_nonces)
    for i in range(len(nonces)):
        for wrong in (nonces[i] + 1, (1 << 64) - 1, -1, "0"):
            changed = list(nonces)
            changed[i] = wrong
            with pytest.raises(ProofRejected):
                _verify(commitments, points, values, dataclasses.replace(proof, fold_nonces=tuple(changed)))
    for bad in (tuple(nonces[:-1]), tuple(nonces) + (0,), (), tuple(nonces[::-1]), None):
        with pytest.raises(ProofRejected):
            _verify(commitments, points, values, dataclasses.replace(proof, fold_nonces=bad))
    stripped = [dataclasses.replace(c, params=SMALL) for c in commitments]  # the roots claimed without fold grinding
    with pytest.raises(ProofRejected):
        _verify(stripped, points, values, proof)
    with pytest.raises(ProofRejected):
        _verify(stripped, points, values, dataclasses.replace(proof, fold_nonces=()))


def test_a_prover_skipping_the_fold_proof_of_work_is_rejected(monkeypatch):
    """A cheating prover that does not grind before the folds (nonces that fail, everything after consistent with
    them) is caught by the fold proof-of-work check alone."""
    real_check = B.grinding.check
    monkeypatch.setattr(B.grinding, "grind", lambda state, bits: next(
        w for w in range(1 << 20) if not real_check(state, bits, w)) if bits else 0)  # the queries: no grinding
    monkeypatch.setattr(B.grinding, "check", lambda state, bits, nonce: True)
    commitments, points, values, proof = _opened(FOLDS, seed=5)
    _verify(commitments, points, values, proof)  # the check switched off: the proof is consistent
    monkeypatch.setattr(B.grinding, "check", real_check)
    with pytest.raises(ProofRejected, match="fold nonce .* proof of work"):
        _verify(commitments, points, values, proof)


def test_malformed_fold_nonce_bytes_are_rejected(ground):
    commitments, points, values, proof = ground
    raw = proof.to_bytes()
    count = len(proof.fold_nonces)
    head = raw[:17]  # magic, version, query nonce
    assert raw[17:21] == count.to_bytes(4, "little")
    body = raw[21 + 8 * count:]
    for bad in (head + (0).to_bytes(4, "little") + body,                       # version 3 with no nonce
                head + (count + 1).to_bytes(4, "little") + raw[21:],           # one nonce too many read
                head + (1 << 31).to_bytes(4, "little") + raw[21:],             # a count past the bytes
                raw[:8] + b"\x02" + raw[9:],                                   # the nonces read as version 2
                raw[:8] + b"\x04" + raw[9:],                                   # unknown version
                raw + b"\0",                                                   # trailing bytes
                raw[:-1]):
        with pytest.raises(ProofRejected):
            _verify(commitments, points, values, B.BasefoldProof.from_bytes(bad))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzzed_ground_proof_bytes_give_only_proof_rejected(ground, data):
    commitments, points, values, proof = ground
    position = data.draw(st.integers(0, 21 + 8 * len(proof.fold_nonces) + 64))  # the nonces and what follows
    with pytest.raises(ProofRejected):
        _verify(commitments, points, values, B.BasefoldProof.from_bytes(mutated(proof.to_bytes(), data, position)))


def test_each_tree_sends_each_sibling_once(ground):
    """The query phase's Merkle openings are multi-proofs: per tree exactly the siblings the verifier cannot
    compute (fewer than one path per opened leaf would send)."""
    commitments, points, values, proof = ground
    params = commitments[0].params
    plan = B.schedule([c.num_vars for c in commitments], params, COUNTS, points_list=points)
    queries = np.asarray(_queries_of(commitments, points, values, proof))
    for k, leaves, path in zip(plan.folding, proof.initial_leaves, proof.initial_paths):
        c = commitments[k]
        first = plan.firsts[k]
        block = params.block(first)
        cosets = ((1 << first) * params.rate_inv) >> block
        group = B.leaf_group((1 << block) << params.interleave(c.num_vars), cosets)
        index = np.unique(queries % cosets // group)
        depth = (cosets // group).bit_length() - 1
        needed = sum(s.size for _, s in multiproof_siblings(index, depth))
        assert len(path) == needed == len(set(zip(*_sibling_ids(index, depth))))
        assert needed < index.size * depth or depth == 0
    for m, path in zip(plan.layers, proof.layer_paths):
        space = ((1 << m) * params.rate_inv) >> params.arity
        index = np.unique(queries % space)
        depth = space.bit_length() - 1
        assert len(path) == sum(s.size for _, s in multiproof_siblings(index, depth)) < index.size * depth


def _sibling_ids(index, depth):
    """(level, node) of every sibling some path of the opened leaves needs and no opened subtree gives."""
    levels, nodes = [], []
    known = set(index.tolist())
    for level in range(depth):
        for i in sorted(known):
            if i ^ 1 not in known:
                levels.append(level)
                nodes.append(i ^ 1)
        known = {i >> 1 for i in known}
    return levels, nodes


def _queries_of(commitments, points, values, proof):
    """The query positions the verifier draws (replaying its transcript through a recording wrapper)."""
    seen = {}
    real = B._queries

    def record(*args):
        seen["q"] = real(*args)
        return seen["q"]

    B._queries = record
    try:
        _verify(commitments, points, values, proof)
    finally:
        B._queries = real
    return seen["q"]


def test_a_hiding_tail_batch_with_fold_grinding_verifies_and_reads_back():
    """The hiding layer's bytes carry version 3 inner commitments (longer by one byte) and masked batches whose
    two Basefold openings are ground."""
    params = Z.HidingBasefoldParams(B.BasefoldParams(rate_inv=8, arity=3, final_vars=4, max_log_codeword=16,
                                                     grinding_bits=4, fold_grinding_bits=5), layout="tail")
    rng = np.random.default_rng(2)
    table = rng.integers(0, 1 << 20, 1 << Z.TAIL_MIN_VARS, dtype=np.uint64)
    commitment, witness = Z.commit(table, params, seed=1)
    parsed = Z.HidingBasefoldCommitment.from_bytes(commitment.to_bytes())
    assert parsed == commitment and parsed.inner.params.fold_grinding_bits == 5
    point = F.ext_random((1, Z.TAIL_MIN_VARS), seed=4)
    values, proof = Z.open_batch([witness], [point], Transcript("z"))
    assert isinstance(proof, Z.MaskedBatchProof) and proof.opening.fold_nonces and proof.mask_opening.fold_nonces
    again = Z.MaskedBatchProof.from_bytes(proof.to_bytes())
    Z.verify_batch([parsed], [point], values, again, Transcript("z"), min_security_bits=0)
    bad = dataclasses.replace(again, opening=dataclasses.replace(
        again.opening, fold_nonces=(again.opening.fold_nonces[0] + 1,) + again.opening.fold_nonces[1:]))
    with pytest.raises(ProofRejected):
        Z.verify_batch([parsed], [point], values, bad, Transcript("z"), min_security_bits=0)


def test_a_flipped_missing_or_extra_sibling_of_a_ground_proof_is_rejected(ground):
    """Every multi-proof of a version 3 proof: a sibling flipped, one dropped, one added (as objects and as bytes:
    a path's digest count one more, its bytes shifted) is refused with ProofRejected."""
    commitments, points, values, proof = ground
    raw = proof.to_bytes()
    assert any(proof.initial_paths) and proof.layer_paths
    for field in ("initial_paths", "layer_paths"):
        paths = getattr(proof, field)
        for i, path in enumerate(paths):
            tampered = [tuple(path) + (bytes(32),)]  # extra (a small tree whose leaves are all opened sends none)
            if path:
                tampered += [(bytes([path[-1][0] ^ 0x80]) + path[-1][1:],) + tuple(path[:-1]),  # flipped, moved
                             tuple(path[:-1]) + (bytes([path[-1][0] ^ 1]) + path[-1][1:],),     # flipped
                             tuple(path[1:])]                                                   # missing
            for bad_path in tampered:
                changed = list(paths)
                changed[i] = bad_path
                bad = dataclasses.replace(proof, **{field: tuple(changed)})
                with pytest.raises(ProofRejected):
                    _verify(commitments, points, values, bad)
                with pytest.raises(ProofRejected):  # the same through bytes
                    _verify(commitments, points, values, B.BasefoldProof.from_bytes(bad.to_bytes()))
            # in the bytes: the path's count raised by one, so every later item is read 32 bytes off
            marker = len(path).to_bytes(4, "little") + b"".join(path)
            at = raw.index(marker)
            shifted = raw[:at] + (len(path) + 1).to_bytes(4, "little") + raw[at + 4:]
            with pytest.raises(ProofRejected):
                _verify(commitments, points, values, B.BasefoldProof.from_bytes(shifted))
