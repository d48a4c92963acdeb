"""Zero-knowledge network proofs over hiding Basefold stores: one batched opening of the model copy, the proof
store and every sumcheck mask; the views' functionals against the witness (naive twin), copies spent once,
what masking must change between two proofs, every tampered item and fuzzed bytes rejected (ProofRejected)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import basefold as B
from proofs import basefold_zk as BZ
from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.layers import network_zk
from proofs.layers.basefold_channel import MaskedSumcheckProof, StorePlan, commit_hosted, mask_functional, \
    view_functional
from proofs.layers.network import ModelCommitment, Network, verify_network
from proofs.layers.network_zk import HidingNetworkProof
from proofs.layers.reusable import Reusable
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input
from proofs.relations import MIN_ELEMENT_VARS, Slot, StoreLayout, View, view_value
from proofs.zk import poly_at
from tests.proofs.cheating import bumped, tampered_agreements
from tests.proofs.test_network import float_mlp

PARAMS = BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=8, arity=4, final_vars=8))


@pytest.fixture(scope="module")
def setup():
    weights, biases = float_mlp(1, (16, 16, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=8)
    x = quantize_input(model, np.random.default_rng(2).uniform(-1, 1, (1, 16)))
    network = Network(model, zk=True, params=PARAMS, max_proofs=3)
    proofs = [network.prove(x) for _ in range(2)]
    return model, network, x, proofs


def test_hiding_basefold_proof_verifies_and_round_trips(setup):
    model, network, x, proofs = setup
    commitment = ModelCommitment.from_bytes(network.commitment.to_bytes())
    assert commitment.zk and isinstance(commitment.weights.copies[0], BZ.HidingBasefoldCommitment)
    for proof in proofs:
        assert sum(isinstance(item, B.BasefoldProof) for item in proof.relations.items) == 1  # one opening
        assert not any(type(item).__name__ in ("HidingOpening", "ZKSumcheckProof") for item in proof.relations.items)
        again = HidingNetworkProof.from_bytes(proof.to_bytes())
        assert np.array_equal(verify_network(commitment, x, again), forward_int(model, x))
    assert network.soundness_bits(1) >= 100 and network.proofs_left == 1


def test_masking_changes_what_two_proofs_show(setup):
    """Two proofs of the same input on two copies: the proof stores, every stated value, every masked round
    message and the openings differ (the witness is the same: only the masks make them differ)."""
    _, _, _, (a, b) = setup
    assert a.relations.copy != b.relations.copy
    assert a.relations.commitments[0].root != b.relations.commitments[0].root
    shown = 0
    for x, y in zip(a.relations.items, b.relations.items):
        if isinstance(x, np.ndarray):
            assert not np.array_equal(x, y)
        elif isinstance(x, MaskedSumcheckProof):
            assert not np.array_equal(x.sumcheck.round_messages, y.sumcheck.round_messages)
            assert not np.array_equal(x.mask_sum, y.mask_sum) and not np.array_equal(x.mask_eval, y.mask_eval)
        else:
            assert not np.array_equal(x.final, y.final) and not np.array_equal(x.evals, y.evals)
        shown += 1
    assert shown == len(a.relations.items) > 4


def test_copies_are_spent_once(setup):
    _, network, x, _ = setup
    network.prove(x)
    with pytest.raises(ProofError, match="copies"):
        network.prove(x)


def _tampered(proof):
    items = list(proof.relations.items)
    for i, item in enumerate(items):
        if isinstance(item, np.ndarray):
            changed = [bumped(item, 1)]
        elif isinstance(item, MaskedSumcheckProof):
            changed = [dataclasses.replace(item, mask_sum=bumped(item.mask_sum)),
                       dataclasses.replace(item, mask_eval=bumped(item.mask_eval)),
                       dataclasses.replace(item, sumcheck=type(item.sumcheck)(bumped(item.sumcheck.round_messages, 7)))]
        else:
            changed = [dataclasses.replace(item, **{f: bumped(getattr(item, f), 3)})
                       for f in ("reduction", "evals", "rounds", "final")]
            changed += [dataclasses.replace(item, initial_leaves=tuple(bumped(leaves, 2) if k == j else leaves
                                                                       for j, leaves in enumerate(item.initial_leaves)))
                        for k in range(len(item.initial_leaves))]
            changed += [dataclasses.replace(item, layer_leaves=(bumped(item.layer_leaves[0]),) + item.layer_leaves[1:])]
        for bad in changed:
            yield dataclasses.replace(proof, relations=dataclasses.replace(
                proof.relations, items=tuple(items[:i] + [bad] + items[i + 1:])))
        yield dataclasses.replace(proof, relations=dataclasses.replace(proof.relations,
                                                                       items=tuple(items[:i] + items[i + 1:])))
    yield dataclasses.replace(proof, output=proof.output + 1)
    yield dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, copy=proof.relations.copy ^ 1))
    other = dataclasses.replace(proof.relations.commitments[0], inner=dataclasses.replace(
        proof.relations.commitments[0].inner, root=bytes(32)))
    yield dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, commitments=(other,)))
    yield dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, commitments=()))


def test_every_tampered_item_is_rejected(setup):
    _, network, x, (proof, _) = setup
    count = 0
    for bad in _tampered(proof):
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, bad)
        count += 1
    assert count > 20
    with pytest.raises(ProofRejected):  # another input
        verify_network(network.commitment, x + 1, proof)


def test_a_tampered_agreement_proof_is_rejected(setup):
    _, network, x, (proof, _) = setup
    weights = network.commitment.weights
    for agreement in tampered_agreements(weights.agreement):
        commitment = dataclasses.replace(network.commitment, weights=Reusable(weights.copies, agreement))
        with pytest.raises(ProofRejected):
            verify_network(commitment, x, proof)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_fuzzed_proof_bytes_give_only_proof_rejected(setup, data):
    _, network, x, (proof, _) = setup
    raw = bytearray(proof.to_bytes())
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, HidingNetworkProof.from_bytes(bytes(raw)))


@pytest.mark.parametrize("hiding", [True, False])
def test_view_functionals_give_the_view_values(hiding):
    """Naive twin: a view's functional applied to the committed table equals view_value from the witness."""
    layout = StoreLayout((Slot("a", 5), Slot("b", 4, 2), Slot("c", 6)), hiding)
    rng = np.random.default_rng(3)
    tables = {s.name: rng.integers(0, F.P, s.size, dtype=np.uint64) for s in layout.slots}
    plan = StorePlan(layout, ((3, 2), (5, 3)))
    commitment, store, coefficients, witness = commit_hosted(plan, tables, BZ.HidingBasefoldParams(
        B.BasefoldParams(rate_inv=4, num_queries=8, arity=2, final_vars=2)), seed=1)
    packed = witness.table
    for name, w in (("a", None), ("b", F.ext_random((4,), seed=5)), ("c", None)):
        slot = layout.slot(name)
        view = View(name, F.ext_random((slot.elem_vars,), seed=6), w, (1, slot.elem_vars))
        functional = view_functional(plan, view)
        value = F.ext_sum(F.ext_mul_base(B.claim_table(functional, plan.num_vars), packed), axis=0)
        assert np.array_equal(value, view_value(store, view))
    for j, (n, d) in enumerate(plan.mask_shapes):
        point = F.ext_random((n,), seed=7 + j)
        functional = mask_functional(plan, j, point)
        value = F.ext_sum(F.ext_mul_base(B.claim_table(functional, plan.num_vars), packed), axis=0)
        expected = F.ext_zero()
        for i in range(n):
            expected = F.ext_add(expected, poly_at(coefficients[j][i], point[i]))
        assert np.array_equal(value, expected)


@st.composite
def _slots(draw):
    """Slots of random element/plane variables, some with a box (random real lengths on random axes)."""
    slots = []
    for i in range(draw(st.integers(1, 5))):
        bits = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
        elem = max(MIN_ELEMENT_VARS, sum(bits)) + draw(st.integers(0, 1))
        box = tuple((draw(st.integers(max(1, (1 << b) // 2 + (b > 0)), 1 << b)), b) for b in bits) \
            if draw(st.booleans()) else ()
        slots.append(Slot(f"t{i}", elem, draw(st.integers(0, 2)), box))
    return slots


@settings(max_examples=60, deadline=None)
@given(_slots(), st.lists(st.tuples(st.integers(1, 12), st.integers(1, 7)), max_size=8), st.booleans(),
       st.integers(0, 2 ** 32))
def test_store_plan_blocks_and_pieces_against_the_whole_tables(slots, masks, hiding, seed):
    """Naive twin: a StorePlan's blocks lie inside its table, each at a multiple of its own power-of-two length,
    none overlapping, selected by their Boolean coordinates; the table is never larger than one packing of the
    layout's whole table with the masks; a view's functional on the packed table (its box's pieces only) equals
    the view's value on the whole table (zero outside its box)."""
    from proofs.layers.basefold_channel import mask_length, unused_end
    from proofs.layers.packing import Packing
    layout = StoreLayout(tuple(slots), hiding)
    plan = StorePlan(layout, tuple(masks))
    assert plan.num_vars <= Packing(tuple([1 << layout.num_vars] + [mask_length(n, d) for n, d in masks])).num_vars
    covered = np.zeros(1 << plan.num_vars, dtype=int)
    for key, (offset, length) in plan.blocks.items():
        size = (length - 1).bit_length()
        assert offset % (1 << size) == 0 and offset + length <= 1 << plan.num_vars
        selector = plan.selector(key)
        assert int(selector[:, 0] @ (1 << np.arange(selector.shape[0]))) == offset >> size
        covered[offset:offset + length] += 1
    assert covered.max() <= 1
    assert unused_end(plan) == (1 << plan.num_vars) - max(o + n for o, n in plan.blocks.values())
    rng = np.random.default_rng(seed)
    tables = {}
    for s in slots:
        table = rng.integers(0, F.P, s.size, dtype=np.uint64).reshape(1 << s.plane_vars, -1)
        if s.box:  # zero outside the box: axis by axis, lowest first
            axes = list(s.box) + ([(1, s.elem_vars - sum(b for _, b in s.box))] if s.elem_vars > sum(
                b for _, b in s.box) else [])
            shaped = table.reshape([1 << s.plane_vars] + [1 << b for _, b in reversed(axes)])
            keep = np.zeros(shaped.shape, dtype=bool)
            keep[(slice(None),) + tuple(slice(0, real) for real, _ in reversed(axes))] = True
            table = np.where(keep, shaped, 0).reshape(1 << s.plane_vars, -1)
        tables[s.name] = table.reshape(-1)
    commitment, store, _, witness = commit_hosted(plan, tables, BZ.HidingBasefoldParams(
        B.BasefoldParams(rate_inv=4, num_queries=8, arity=2, final_vars=2)), seed=seed % 1000)
    for s in slots:
        w = F.ext_random((1 << s.plane_vars,), seed=seed % 997) if s.plane_vars else None
        view = View(s.name, F.ext_random((s.elem_vars,), seed=seed % 991), w, (0, s.elem_vars))
        value = F.ext_sum(F.ext_mul_base(B.claim_table(view_functional(plan, view), plan.num_vars), witness.table),
                          axis=0)
        assert np.array_equal(value, view_value(store, view))


def test_a_table_nonzero_outside_its_box_is_refused_by_its_prover():
    """A slot's box promises zeros outside it: committing a table that is not refuses (ProofError naming the slot)
    rather than leaving the entries out silently."""
    layout = StoreLayout((Slot("t", 5, 0, ((3, 2), (5, 3))), Slot("u", 4)), True)
    table = np.zeros(32, dtype=np.uint64)
    table[0] = 7
    params = BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=4, num_queries=8, arity=2, final_vars=2))
    commit_hosted(StorePlan(layout), {"t": table, "u": np.ones(16, dtype=np.uint64)}, params, seed=1)
    table[3] = 1  # column 3 of 4: outside the 3 real columns
    with pytest.raises(ProofError, match="t: nonzero entries outside its box"):
        commit_hosted(StorePlan(layout), {"t": table, "u": np.ones(16, dtype=np.uint64)}, params, seed=1)


def test_params_choice_and_refusals():
    assert network_zk.check_params(PARAMS) == PARAMS
    assert network_zk.is_basefold(PARAMS) and not network_zk.is_basefold(network_zk.default_params())


def test_prover_state_round_trip_and_refusal():
    """The saved state of a hiding Basefold commitment proves later on the next copy; another model's is refused."""
    from proofs.errors import ModelError
    weights, biases = float_mlp(4, (8, 8, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    x = quantize_input(model, np.random.default_rng(5).uniform(-1, 1, (1, 8)))
    network = Network(model, zk=True, params=PARAMS, max_proofs=2)
    network.prove(x)
    later = Network(model, state=network.state_bytes())
    assert later.commitment == network.commitment and later.proofs_left == 1
    assert np.array_equal(verify_network(network.commitment, x, later.prove(x)), forward_int(model, x))
    other = quantize_fixed_point(*float_mlp(5, (8, 8, 4)), frac_bits=6)
    with pytest.raises(ModelError, match="does not belong"):
        Network(other, state=network.state_bytes())


def test_proofs_of_the_other_hiding_scheme_are_rejected(setup):
    model, network, x, (proof, _) = setup
    ligero = Network(model, zk=True, max_proofs=1)
    other = ligero.prove(x)
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, other)
    with pytest.raises(ProofRejected):
        verify_network(ligero.commitment, x, proof)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=2, max_size=4), st.integers(1, 70),
       st.lists(st.booleans(), min_size=3, max_size=3))
def test_batch_width_is_the_fewest_rows_giving_every_stored_tensor_enough_mask_variables(sizes, batch, relus):
    """Every proof-store slot has >= MIN_ELEMENT_VARS element variables (the layout refuses fewer), and no smaller
    power of two >= batch would do: the padding is what the masking needs, not a fixed >= 8 rows."""
    from proofs.layers.statement import LayerInfo
    from proofs.relations import MIN_ELEMENT_VARS

    layers = tuple(LayerInfo(sizes[i], sizes[i + 1], 8, 8, 8 if relus[i] else 0, relus[i], 12, -2 ** 20, 2 ** 20)
                   for i in range(len(sizes) - 1))
    rows = network_zk.batch_width(layers, batch)
    assert rows >= batch and rows & (rows - 1) == 0
    layout = network_zk.proof_layout(layers, batch)
    if layout is None:
        return
    assert min(s.elem_vars for s in layout.slots) >= MIN_ELEMENT_VARS
    if rows > max(1, 1 << (batch - 1).bit_length()):  # padded beyond the batch: half the rows would be too few
        fewest = min(s.elem_vars for s in layout.slots) - 1
        assert fewest < MIN_ELEMENT_VARS


def test_default_basefold_params_grind_and_stay_under_100_kb():
    """basefold_params(): 12 grinding bits, 111 queries; a 16->16->4 proof under 100 kB (decimal) that verifies,
    and a changed nonce in its one opening is rejected."""
    params = network_zk.basefold_params()
    assert params.base.grinding_bits == 12 and params.base.num_queries == 111
    weights, biases = float_mlp(1, (16, 16, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=8)
    x = quantize_input(model, np.random.default_rng(3).uniform(-1, 1, (1, 16)))
    network = Network(model, zk=True, params=params, max_proofs=2)
    proof = network.prove(x)
    assert len(proof.to_bytes()) <= 100_000
    assert np.array_equal(verify_network(network.commitment, x, proof), forward_int(model, x))
    assert network.soundness_bits(1) >= 100
    items = list(proof.relations.items)
    k = next(i for i, item in enumerate(items) if isinstance(item, B.BasefoldProof))
    items[k] = dataclasses.replace(items[k], nonce=items[k].nonce ^ 1)
    bad = dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, items=tuple(items)))
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, bad)


def test_copies_that_would_not_fit_in_memory_are_refused_before_any_is_committed(monkeypatch):
    """Committing K hiding Basefold copies holds them all at once (the agreement's batch opening): past the memory
    available the commitment is refused first, naming the estimate and the fixes (fewer copies, or Ligero); one
    copy is never refused; the estimate grows with the copies."""
    import hezk.memory
    from proofs.layers import reusable as R

    weights, biases = float_mlp(4, (8, 8, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    monkeypatch.setattr(hezk.memory, "available_memory", lambda: 1 << 20)

    def no_copy(*args, **kwargs):
        raise AssertionError("a copy was committed before the refusal")

    with monkeypatch.context() as patched:
        patched.setattr(R, "commit_hosted", no_copy)
        with pytest.raises(ProofError, match=r"needs about .* GiB.*--max-proofs.*--scheme ligero"):
            Network(model, zk=True, params=PARAMS, max_proofs=8)
    one = Network(model, zk=True, params=PARAMS, max_proofs=1)
    layout = network_zk.model_layout(one.commitment.layers)
    assert R.basefold_copies_bytes(layout, PARAMS, 8) == 4 * R.basefold_copies_bytes(layout, PARAMS, 2) > 0
