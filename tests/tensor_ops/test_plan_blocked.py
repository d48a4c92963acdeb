"""The block generalized diagonals in place (``tensor_ops.plan.blocked``): exact against numpy.einsum on the plain
backend for random shapes, slot counts and tilings, untouched by garbage outside the vectors, chosen for a
transformer's projections (fewer products and one level fewer than the cyclic method after a move), and right
under CKKS."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crypto import CKKSContext, CKKSParameters
from crypto.ckks.encoder import subring_period
from tensor_ops import PlainBackend, einsum, encrypt
from tensor_ops.layout import SlotLayout, Tile
from tensor_ops.plan import plan
from tensor_ops.plan.blocked import BlockDiagonal, _ring_period, try_blocked
from tensor_ops.plan.build import _input_syms
from tensor_ops.plan.builder import Builder, PlainSym
from tensor_ops.parse import parse
from tests.tensor_ops.helpers import small_ints


def _blocked_plan(expr, shapes, slots, layout=None):
    """The block strategy's own Sym for ``expr`` (x encrypted first, M plaintext second), whatever else is cheaper."""
    spec = parse(expr, *shapes)
    layout = layout or SlotLayout.compact(shapes[0], slots)
    b = Builder(slots)
    (x,) = _input_syms(b, spec, (True, False), (layout, None)).values()
    found = try_blocked(b, x, PlainSym(0, spec.inputs[1], shapes[1]), spec.output)
    return spec, layout, found


def _run_blocked(expr, shapes, slots, x, m, layout=None, garbage=None):
    """Run the block strategy's steps on the plain backend; ``garbage``: values put in the slots no vector uses.
    (result, output Sym, builder, the output registers' slot vectors)."""
    spec, layout, found = _blocked_plan(expr, shapes, slots, layout)
    assert found is not None
    _, fb, sym, _ = found
    be = PlainBackend(slots)
    packed = layout.pack(x)
    if garbage is not None:
        packed = [np.where(_outside_tiles(layout, slots), garbage, vec) for vec in packed]
    regs = {}

    class Data:
        pass

    data = Data()
    data.slots, data.cts = slots, [packed, None]
    data.plain_in = lambda source, indices, shape: np.transpose(m, [spec.inputs[1].index(c) for c in indices])
    data.constant = be.constant
    for step in fb.steps:
        step.apply(be, regs, data)
    outputs = [regs[r] for r in sym.regs]
    return sym.layout.unpack(outputs), sym, fb, outputs


def _outside_tiles(layout, slots):
    used = np.zeros(slots, bool)
    for t in layout.tiles:
        used[layout.positions(t).ravel()] = True
    return ~used


def _ckks_matches_numpy(params, p, shapes):
    """The projection ``bsd,de->bse`` of ``plan`` p run under CKKS on random inputs, within 1e-6 of numpy."""
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=11)
    rng = np.random.default_rng(6)
    x, w = rng.uniform(-1, 1, shapes[0]), rng.uniform(-1, 1, shapes[1])
    got = einsum("bsd,de->bse", encrypt(ctx, x), w).decrypt(ctx)
    want = np.einsum("bsd,de->bse", x, w)
    assert np.max(np.abs(got - want)) <= 1e-6 * max(1.0, np.abs(want).max())


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 6), k=st.integers(1, 20), j=st.integers(1, 40), log_slots=st.integers(5, 9),
       seed=st.integers(0, 2**31))
def test_blocks_equal_numpy_einsum_for_any_shape_and_tiling(batch, k, j, log_slots, seed):
    slots = 1 << log_slots
    rng = np.random.default_rng(seed)
    x, m = small_ints(rng, (batch, k)), small_ints(rng, (k, j))
    got, sym, *_ = _run_blocked("bk,kj->bj", [(batch, k), (k, j)], slots, x, m)
    np.testing.assert_array_equal(got, x @ m)
    assert sym.layout.clean


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 4), k=st.integers(2, 16), j=st.integers(2, 24), seed=st.integers(0, 2**31))
def test_blocks_ignore_whatever_sits_outside_the_vectors(batch, k, j, seed):
    """A dirty input (a rotate-and-sum's partial sums around the values) gives the same exact product."""
    rng = np.random.default_rng(seed)
    x, m = small_ints(rng, (batch, k)), small_ints(rng, (k, j))
    strides = (2 * k + 3, 1)
    layout = SlotLayout((batch, k), strides, 256, clean=False)
    got, *_ = _run_blocked("bk,kj->bj", [(batch, k), (k, j)], 256, x, m, layout=layout,
                             garbage=rng.uniform(-50, 50, 256))
    np.testing.assert_array_equal(got, x @ m)


def test_a_vector_split_over_ciphertexts_sums_its_parts_under_shared_giant_steps():
    rng = np.random.default_rng(3)
    x, m = small_ints(rng, (2, 100)), small_ints(rng, (100, 6))
    got, sym, fb, _ = _run_blocked("bk,kj->bj", [(2, 100), (100, 6)], 64, x, m)
    np.testing.assert_array_equal(got, x @ m)
    blocks = [s for s in fb.steps if isinstance(s, BlockDiagonal)]
    assert blocks and all(len(s.srcs) > 1 for s in blocks)


def test_the_output_fills_the_room_after_each_vector_in_one_block():
    """Vectors spaced widely enough take the whole output axis in one block (n_in + n_out - 1 diagonals)."""
    layout = SlotLayout((4, 8), (64, 1), 256)
    _, _, found = _blocked_plan("bk,kj->bj", [(4, 8), (8, 20)], 256, layout)
    _, fb, sym, _ = found
    (block,) = [s for s in fb.steps if isinstance(s, BlockDiagonal)]
    assert block.size == 20 and len(block.terms()) == 8 + 20 - 1 and sym.layout.n_ciphertexts == 1


def test_a_transformer_projection_takes_blocks_in_place_with_fewer_products_and_one_level():
    """The QKV projection of a 128-wide, 128-token layer at 2^15 slots: three 128-wide output blocks of 255
    diagonals each (the cyclic method after a move: 1,664 products, depth 2)."""
    p = plan("bsd,de->bse", (1, 128, 128), (128, 384), slots=1 << 15, encrypted=(True, False))
    assert any(isinstance(s, BlockDiagonal) for s in p.steps)
    cost = p.cost()
    assert cost["pt_mults"] == 3 * 255 and cost["output_ciphertexts"] == 3 and p.depth() == 1
    assert "over diagonal method" in p.notes[0]
    rng = np.random.default_rng(4)
    x, w = small_ints(rng, (1, 128, 128)), small_ints(rng, (128, 384))
    np.testing.assert_array_equal(p.simulate(x, w), np.einsum("bsd,de->bse", x, w))


def test_the_expression_must_be_a_plaintext_matrix_on_one_contracted_axis():
    for expr, shapes in (("bk,bk->b", [(2, 4), (2, 4)]), ("bk,kjl->bjl", [(2, 4), (4, 3, 2)])):
        assert _blocked_plan(expr, shapes, 64)[2] is None


@pytest.mark.parametrize("shapes", [[(2, 5, 8), (8, 19)], [(1, 8, 16), (16, 40)], [(1, 16, 32), (32, 8)]])
def test_blocks_under_ckks_match_numpy(shapes):
    params = CKKSParameters.preset("TOY")
    p = plan("bsd,de->bse", *shapes, params=params, encrypted=(True, False))
    assert any(isinstance(s, BlockDiagonal) for s in p.steps)
    _ckks_matches_numpy(params, p, shapes)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 8), log_k=st.integers(0, 4), j=st.integers(1, 40), log_slots=st.integers(6, 9),
       seed=st.integers(0, 2**31))
def test_vectors_every_power_of_two_slots_take_periodic_diagonals_and_leave_the_rest_zero(batch, log_k, j,
                                                                                          log_slots, seed):
    """Clean vectors every 2^a slots: the diagonals are written around the whole ring (period 2^a, a subring
    encoding), the product is exact and every slot outside the output's tiles stays exactly zero."""
    k, slots = 1 << log_k, 1 << log_slots
    rng = np.random.default_rng(seed)
    x, m = small_ints(rng, (batch, k)), small_ints(rng, (k, j))
    assume(2 * k * batch <= slots)
    layout = SlotLayout((batch, k), (2 * k, 1), slots)
    got, sym, fb, outputs = _run_blocked("bk,kj->bj", [(batch, k), (k, j)], slots, x, m, layout=layout)
    np.testing.assert_array_equal(got, x @ m)
    blocks = [s for s in fb.steps if isinstance(s, BlockDiagonal)]
    # one vector: its extent rounded up to a power of two, unless that is the whole ring (nothing to gain)
    assert blocks and all(s.period == 2 * k if batch > 1 else s.period == 0 or s.period >= max(s.size, k)
                          for s in blocks)
    for s in blocks:
        for u, t in s.terms():
            vec = s.diagonal(np.ones((s.rows, s.cols)), u, t, slots)
            assert s.period == 0 or np.array_equal(vec, np.roll(vec, s.period))
    outside = _outside_tiles(sym.layout, slots)
    assert not any(np.any(vec[outside]) for vec in outputs)


def test_dirty_or_shared_ciphertexts_keep_diagonals_zero_past_the_vectors():
    """Garbage past the vectors, or another tensor's tiles in the same ciphertext, would leak into the output's
    free slots through periodic diagonals: they keep the diagonals written at the vectors only."""
    dirty = SlotLayout((4, 8), (16, 1), 256, clean=False)
    _, _, (_, fb, _, _) = _blocked_plan("bk,kj->bj", [(4, 8), (8, 12)], 256, dirty)
    assert all(s.period == 0 for s in fb.steps if isinstance(s, BlockDiagonal))
    tiles = (Tile(0, (0, 0), (4, 8)), Tile(0, (4, 0), (4, 8), 128))
    shared, apart = (SlotLayout((8, 8), (16, 1), 256, tiles),
                     SlotLayout((8, 8), (16, 1), 256, (tiles[0], Tile(1, (4, 0), (4, 8), 128))))
    assert _ring_period(shared, [0], (0, 16, 32, 48), 1, 12, 256) == 0
    assert _ring_period(apart, [0], (0, 16, 32, 48), 1, 12, 256) == 16
    assert _ring_period(apart, [0], (0, 16, 32, 48), 1, 17, 256) == 0      # a block past the next vector
    assert _ring_period(apart, [0], (0, 16, 32, 64), 1, 12, 256) == 0      # not evenly spaced
    replicated = SlotLayout((4, 8), (16, 1), 256, replicas=((2, 128),))     # a copy in the second half
    assert _ring_period(replicated, [0], (0, 16, 32, 48), 1, 12, 256) == 0


def test_periodic_diagonals_under_ckks_encode_in_the_subring_and_match_numpy():
    """A 128-token, 32-wide projection at the TOY ring's slots: vectors every 32 slots fill half the ring; the
    diagonals take period 32 and the product is right under CKKS."""
    params = CKKSParameters.preset("TOY")
    shapes = [(1, params.slots // 64, 32), (32, 48)]
    p = plan("bsd,de->bse", *shapes, params=params, encrypted=(True, False))
    blocks = [s for s in p.steps if isinstance(s, BlockDiagonal)]
    assert blocks and all(s.period == 32 for s in blocks)
    vec = blocks[0].diagonal(np.random.default_rng(0).uniform(1, 2, (48, 32)), 0, 0, params.slots)
    assert subring_period(vec) == 32
    _ckks_matches_numpy(params, p, shapes)
