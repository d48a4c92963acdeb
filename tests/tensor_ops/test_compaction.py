"""tensor_ops.compaction: a tensor's tiles moved into as few ciphertexts as hold them and back, on random layouts
(strided, tiled, replicated, transposed, clean or dirty), in plain slot vectors and encrypted on a tiny INSECURE
ring (no bootstrap); and the refresh rule of the attention path (``tensor_ops.attention_plan``) compacting before
it bootstraps, its recorder counting what the encrypted backend does (slow: the toy bootstrappable ring)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ShapeError
from tensor_ops.backends import CKKSBackend, PlainBackend
from tensor_ops.compaction import compact, expand, footprint, plan_compaction
from tensor_ops.layout import SlotLayout, Tile

SLOTS = 32
TINY_RING = dict(log_n=6, log_q=[[30, 30]] + [[25, 26]] * 3, log_p=[30] * 2, log_scale=50, dnum=4, insecure=True)


@st.composite
def layouts(draw, slots=SLOTS):
    """A 2-axis layout with gaps between its strides, cut into tiles along the first axis (one ciphertext each, or
    several tiles in one ciphertext at offsets), maybe replicated, maybe transposed, clean or dirty."""
    rows, cols = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    inner = draw(st.integers(1, 3))
    outer = cols * inner + draw(st.integers(0, 3))
    chunk = draw(st.integers(1, rows))
    replicas = ((2, chunk * outer + draw(st.integers(0, 2))),) if draw(st.booleans()) else ()
    offset = draw(st.integers(0, 3))
    try:
        layout = SlotLayout.tiled((rows, cols), (outer, inner), slots * 4, (chunk, cols), offset, replicas)
    except ShapeError:                               # the offset and copies leave even the drafting slots
        layout = SlotLayout.tiled((rows, cols), (outer, inner), slots * 4, (chunk, cols), 0, ())
    if layout.span() > slots:
        layout = SlotLayout.tiled((rows, cols), (outer, inner), slots * 4, (chunk, cols), 0, ())
    if layout.span() > slots:
        from hypothesis import assume
        assume(False)
    layout = SlotLayout(layout.shape, layout.strides, slots, layout.tiles, layout.replicas, draw(st.booleans()))
    if draw(st.booleans()) and len(layout.tiles) > 1:   # pairs of tiles share a ciphertext where they fit apart
        tiles, cts = [], []
        for n, tile in enumerate(layout.tiles):
            if n % 2 and 2 * layout.span() <= slots:
                tiles.append(Tile(tiles[-1].ct, tile.start, tile.size, tile.offset + layout.span()))
            else:
                tiles.append(Tile(len(cts), tile.start, tile.size, tile.offset))
                cts.append(n)
        layout = SlotLayout(layout.shape, layout.strides, slots, tuple(tiles), layout.replicas, layout.clean)
    if draw(st.booleans()):
        layout = layout.transpose((1, 0))
    return layout


def _vectors(layout, values, rng):
    """The slot vectors of ``values`` in ``layout``, the slots outside it random where the layout is dirty."""
    vectors = layout.pack(values)
    if not layout.clean:
        used = [np.zeros(layout.slots, bool) for _ in vectors]
        for tile in layout.tiles:
            used[tile.ct][footprint(layout, tile)] = True
        for vector, mask in zip(vectors, used):
            vector[~mask] = rng.uniform(-1, 1, int((~mask).sum()))
    return vectors


def _check(layout, compaction, small, back, values, atol):
    assert np.allclose(compaction.compact_layout.unpack(small), values, atol=atol)
    assert np.allclose(layout.unpack(back), values, atol=atol)
    if layout.clean:   # the slots around the elements are zero again
        expected = layout.pack(values)
        assert all(np.allclose(np.real(b), e, atol=atol) for b, e in zip(back, expected))


@settings(max_examples=60, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**32 - 1))
def test_compaction_moves_every_tile_apart_and_back_in_plain_slots(layout, seed):
    """Random layouts: the compact layout's tiles overlap nowhere (replicas included) and use no more ciphertexts;
    compact then expand (PlainBackend) reads back the values in both layouts, clean layouts zero elsewhere; the
    rotations and masks performed are those the Compaction states."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, layout.shape)
    compaction = plan_compaction(layout)
    packed = compaction.compact_layout
    assert compaction.ciphertexts <= compaction.spread and packed.clean
    for ct in range(packed.n_ciphertexts):
        slots = np.concatenate([footprint(packed, t) for t in packed.tiles if t.ct == ct])
        assert len(slots) == len(np.unique(slots)) and slots.max() < SLOTS
    backend = PlainBackend(SLOTS)
    small = compact(backend, _vectors(layout, values, rng), compaction)
    back = expand(backend, small, compaction)
    _check(layout, compaction, small, back, values, 1e-12)
    performed = backend.counts["rotations"] + backend.counts["hoisted_rotations"]
    assert performed == compaction.rotations() and backend.counts["multiplies"] == compaction.masks()


def test_sparse_tiles_interleave_into_one_ciphertext():
    """The encoder layer's projection layout (16 tiles of 16 x 2 values, 16353 slots apart, one a ciphertext):
    one ciphertext holds them all, 15 tiles moved (the first stays), masks before only (it is dirty)."""
    tiles = tuple(Tile(n, (0, 2 * n), (16, 2), 0) for n in range(16))
    layout = SlotLayout((16, 32), (32, 16353), 1 << 15, tiles, clean=False)
    compaction = plan_compaction(layout)
    assert compaction.ciphertexts == 1 and compaction.rotations() == 30 and compaction.mask_before
    assert not compaction.mask_after and compaction.masks() == 16
    with pytest.raises(ShapeError, match="compaction of 16 ciphertexts given 2"):
        compact(PlainBackend(1 << 15), [np.zeros(1 << 15)] * 2, compaction)


@pytest.fixture(scope="module")
def tiny_ckks():
    from crypto import CKKSContext, CKKSParameters

    params = CKKSParameters.from_literal(TINY_RING)
    steps = tuple(1 << i for i in range(5))
    return CKKSBackend(CKKSContext.keygen(params, rotations=steps, seed=3))


@settings(max_examples=12, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**32 - 1))
def test_compaction_encrypted_decrypts_to_the_values(tiny_ckks, layout, seed):
    """The same round trip on ciphertexts of a tiny INSECURE ring (32 slots, power-of-two keys composing the
    moves): decrypting the compact and the expanded ciphertexts gives the values (1e-5), masks costing the levels
    the Compaction states."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, layout.shape)
    compaction = plan_compaction(layout)
    ctx = tiny_ckks.ctx
    cts = [ctx.encrypt(v) for v in _vectors(layout, values, rng)]
    small = compact(tiny_ckks, cts, compaction)
    back = expand(tiny_ckks, small, compaction)
    decrypt = lambda many: [np.real(ctx.decrypt(c)) for c in many]
    _check(layout, compaction, decrypt(small), decrypt(back), values, 1e-5)
    top = ctx.params.max_level
    assert min(c.level for c in back) == top - compaction.mask_before - compaction.mask_after


def _spread_layout(slots, clean):
    """4 tiles of 4 x 2 values, one a ciphertext, their second column 1001 slots on: 4 ciphertexts that one holds."""
    tiles = tuple(Tile(n, (0, 2 * n), (4, 2), 0) for n in range(4))
    return SlotLayout((4, 8), (16, 1001), slots, tiles, clean=clean)


def _refresh_run(backend, encrypt, slots, clean):
    """x (clean: at level 0, then x * x; dirty: at level 1, then x * x * x, two levels): the refresh compacts."""
    from tensor_ops.tensor import CipherTensor, einsum

    rng = np.random.default_rng(7)
    layout = _spread_layout(slots, clean)
    values = rng.uniform(-0.9, 0.9, layout.shape)
    x = CipherTensor([encrypt(v, 0 if clean else 1) for v in _vectors(layout, values, rng)], layout, backend)
    backend.at_node("op")
    y = x * x if clean else einsum("ij,ij,ij->ij", x, x, x)
    return y.decrypt(), values ** (2 if clean else 3)


@pytest.mark.slow
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "dirty"])
def test_refresh_compacts_then_bootstraps_once_and_the_recorder_agrees(clean):
    """On the INSECURE bootstrappable toy ring (N = 2^12): a tensor of 4 ciphertexts below the levels its product
    needs is compacted into one (masks after the bootstrap where it is clean, before where dirty), bootstrapped
    once, expanded back; the product decrypts to the plain one (1e-4); the level-recording twin states the same
    site (1 ciphertext of 4, the level) and the same rotation steps; without compaction 4 bootstraps."""
    from crypto import CKKSContext
    from tensor_ops.attention_plan import BootstrapRecorder, BootstrappingBackend
    from tensor_ops.bootstrap_placement import bootstrap_cost, cached_bootstrap_plan

    from .test_attention_bootstrap import CONFIG, _toy

    params = _toy()
    boot = cached_bootstrap_plan(params, CONFIG)
    recorder = BootstrapRecorder(params.slots, 0, boot.levels_left, bootstrap_cost(boot))
    planned, _ = _refresh_run(recorder, lambda v, level: _leveled(recorder, v, level), params.slots, clean)
    steps = plan_compaction(_spread_layout(params.slots, clean)).rotation_steps()
    assert sorted(recorder.compaction_steps) == list(steps)
    ctx = CKKSContext.keygen(params, rotations=steps, seed=1, bootstrap=CONFIG)
    backend = BootstrappingBackend(ctx, CONFIG)
    got, expected = _refresh_run(backend, lambda v, level: ctx.encrypt(v, level=level, scale=backend.natural[level]),
                                 params.slots, clean)
    key = lambda sites: [(s.node, s.ciphertexts, s.level_in, s.spread) for s in sites]
    assert key(backend.sites) == key(recorder.sites) == [("op", 1, 0, 4)]
    assert backend.compaction_steps == recorder.compaction_steps
    assert np.max(np.abs(got - expected)) < 1e-4 and np.allclose(planned, expected)
    each = BootstrapRecorder(params.slots, 0, boot.levels_left)
    _refresh_run(each, lambda v, level: _leveled(each, v, level), params.slots, clean)
    assert key(each.sites) == [("op", 4, 0 if clean else 1, 0)]


def _leveled(recorder, vector, level):
    out = recorder.encrypt(vector)
    out.level = level
    return out


def test_a_compacted_site_states_fewer_ciphertexts_than_it_spread():
    """BootstrapSite.spread: 0 (not compacted) or more than the ciphertexts bootstrapped, else ParameterError."""
    from crypto.errors import ParameterError
    from tensor_ops.attention_plan import BootstrapSite

    assert BootstrapSite("n", None, 1, 0, spread=16).spread == 16
    for bad in (1, -2, True, 0.5):
        with pytest.raises(ParameterError, match="spread="):
            BootstrapSite("n", None, 1, 0, spread=bad)


def test_compaction_is_not_taken_without_the_levels_or_when_it_costs_more():
    """The refresh rule compacts only with a mask's level before (dirty) or after (clean) the bootstrap, and only
    when the bootstraps saved cost more than the compaction."""
    from tensor_ops.attention_plan import BootstrapRecorder

    dirty, clean = _spread_layout(2048, False), _spread_layout(2048, True)
    rule = BootstrapRecorder(2048, 0, 6, bootstrap_units=1000.0)
    assert rule.compaction_for(dirty, 1, 2) is not None and rule.compaction_for(dirty, 0, 1) is None
    assert rule.compaction_for(clean, 0, 5) is not None and rule.compaction_for(clean, 0, 6) is None
    cost = plan_compaction(clean).cost()
    assert BootstrapRecorder(2048, 0, 6, bootstrap_units=cost / 3 * 0.99).compaction_for(clean, 0, 1) is None
    assert BootstrapRecorder(2048, 0, 6, bootstrap_units=cost / 3 * 1.01).compaction_for(clean, 0, 1) is not None
    assert BootstrapRecorder(2048, 0, 6).compaction_for(clean, 0, 1) is None


@pytest.mark.slow
def test_encoder_layer_at_128_bits_bootstraps_fewer_ciphertexts_compacted(tmp_path, monkeypatch):
    """The exported 16 x 32 encoder layer planned at 128 bits (N16_BOOT, no key made) with projections that spread
    their outputs over many ciphertexts (the block diagonals in place withheld: they leave one ciphertext, and then
    both plans bootstrap alike): compaction (and early refreshes) bootstrap fewer than half the ciphertexts of
    bootstrapping each (17 vs 54 when written), message coefficients no larger, at sites whose spread exceeds their
    count, its rotations among the keys, a lower estimated time; the plan's text states the compacted sites."""
    import onnx

    import hezk.model
    from tensor_ops.attention_plan import plan_attention
    from tensor_ops.plan import build

    monkeypatch.setattr(build, "try_blocked", lambda *args, **kw: None)

    from ..model.test_transformer_reader import D_MODEL, SEQUENCE, encoder, export

    onnx.save(export(encoder(1, "gelu"), dynamo=True), tmp_path / "layer.onnx")
    graph = hezk.model.read_onnx(tmp_path / "layer.onnx")
    calibration = np.random.default_rng(0).normal(size=(16, 1, SEQUENCE, D_MODEL))
    each, _ = plan_attention(graph, calibration, compaction=False)
    packed, _ = plan_attention(graph, calibration)
    assert 2 * packed.bootstrap_count < each.bootstrap_count and packed.estimated_seconds < each.estimated_seconds
    assert max(s.coefficient for s in packed.bootstraps) <= max(1.0, max(s.coefficient for s in each.bootstraps))
    compacted = [s for s in packed.bootstraps if s.spread]
    assert compacted and all(s.spread > s.ciphertexts for s in compacted) and not any(s.spread for s in each.bootstraps)
    assert packed.compaction_rotations and (packed.key_steps is not None
                                            or set(packed.compaction_rotations) <= set(packed.key_rotations))
    assert "compacted into fewer first" in packed.explain() and "of them compacted from" in packed.explain()


class _Spread:
    """A stand-in model for the early-refresh search: x (dirty, 4 ciphertexts, at level 1) -> z = x * 0.5 (level 0)
    -> z * z: the last product's refresh cannot mask z at level 0, unless x was refreshed (compacted) first."""

    def __init__(self, slots, ctx=None):
        self.slots, self.ctx = slots, ctx
        self.values = np.random.default_rng(3).uniform(-0.9, 0.9, (4, 8))

    def forward(self, tensor):
        from tensor_ops.tensor import CipherTensor

        backend = tensor.backend
        layout = _spread_layout(self.slots, False)
        vectors = _vectors(layout, self.values, np.random.default_rng(4))
        if self.ctx is None:
            cts = [_leveled(backend, v, 1) for v in vectors]
        else:
            cts = [self.ctx.encrypt(v, level=1, scale=backend.natural[1]) for v in vectors]
        backend.at_node("scale")
        z = CipherTensor(cts, layout, backend) * 0.5
        backend.at_node("square")
        return z * z


def test_a_blocked_compaction_names_the_plan_to_refresh_early_and_forcing_it_bootstraps_once():
    """A dirty tensor at level 0 cannot be masked for compaction: its 4 ciphertexts are bootstrapped, and the
    tracking recorder names the plan that made it (its lowest operand); refreshing that operand early compacts it
    (at level 1) into 1 bootstrap, and the values stay right."""
    from tensor_ops.attention_plan import BootstrapRecorder
    from tensor_ops.tensor import encrypt

    model = _Spread(2048)
    expected = (0.5 * model.values) ** 2
    late = BootstrapRecorder(2048, 1, 6, bootstrap_units=1000.0, tracking=True)
    assert np.allclose(model.forward(encrypt(late, np.zeros(2))).decrypt(), expected)
    assert [(s.node, s.ciphertexts, s.spread) for s in late.sites] == [("square", 4, 0)]
    (producer,) = {made for _, made in late.blocked}         # both operands of z * z: one z, one maker
    assert producer is not None and producer[1] == 0 and all(producer[0] < where[0] for where, _ in late.blocked)
    early = BootstrapRecorder(2048, 1, 6, bootstrap_units=1000.0, forced=(producer,))
    assert np.allclose(model.forward(encrypt(early, np.zeros(2))).decrypt(), expected)
    assert [(s.node, s.ciphertexts, s.spread) for s in early.sites] == [("scale", 1, 4)] and not early.blocked


class _Wide:
    """A stand-in for an MLP's first layer: x (one ciphertext, at level 1) -> w = x M, 4,096 values over at least two
    full ciphertexts (level 0) -> w * w, whose refresh bootstraps them all, unless x is refreshed before the
    product."""

    def __init__(self):
        self.matrix = np.random.default_rng(5).uniform(-0.1, 0.1, (16, 4096))

    def forward(self, tensor):
        from tensor_ops.tensor import einsum

        tensor.backend.at_node("widen")
        w = einsum("bk,kj->bj", tensor, self.matrix)
        tensor.backend.at_node("square")
        return w * w


def test_a_wide_refresh_names_the_plan_that_made_it_and_refreshing_its_input_bootstraps_once():
    from tensor_ops.attention_plan import BootstrapRecorder
    from tensor_ops.tensor import encrypt

    model, x = _Wide(), np.random.default_rng(6).uniform(-1, 1, (1, 16))
    expected = (x @ model.matrix) ** 2
    late = BootstrapRecorder(2048, 1, 6, bootstrap_units=1000.0, tracking=True)
    assert np.allclose(model.forward(encrypt(late, x)).decrypt(), expected)
    (site,) = late.sites
    assert site.node == "square" and site.ciphertexts >= 2
    (producer,) = late.wide
    assert producer is not None and producer[1] == 0
    early = BootstrapRecorder(2048, 1, 6, bootstrap_units=1000.0, forced=(producer,), tracking=True)
    assert np.allclose(model.forward(encrypt(early, x)).decrypt(), expected)
    assert [(s.node, s.ciphertexts) for s in early.sites] == [("widen", 1)] and not early.wide


@pytest.mark.slow
def testfind_early_refreshes_are_found_by_planning_and_run_encrypted_as_recorded():
    """On the INSECURE toy ring: the planner's search (``find_early_refreshes``) finds the early refresh (1 ciphertext
    bootstrap instead of 4), and BootstrappingBackend given it bootstraps the same site and decrypts right."""
    from crypto import CKKSContext
    from tensor_ops.attention_plan import BootstrappingBackend, find_early_refreshes

    from .test_attention_bootstrap import CONFIG, _toy

    params = _toy()
    model = _Spread(params.slots)
    forced, sites, _, steps = find_early_refreshes(model, np.zeros((1, 2)), params, CONFIG, 1, True)
    assert forced and [(s.node, s.ciphertexts, s.spread) for s in sites] == [("scale", 1, 4)]
    ctx = CKKSContext.keygen(params, rotations=steps, seed=2, bootstrap=CONFIG)
    backend = BootstrappingBackend(ctx, CONFIG, forced=forced)
    from tensor_ops.tensor import encrypt

    got = _Spread(params.slots, ctx).forward(encrypt(backend, np.zeros(2))).decrypt()
    assert [(s.node, s.ciphertexts, s.level_in, s.spread) for s in backend.sites] == \
        [(s.node, s.ciphertexts, s.level_in, s.spread) for s in sites]
    assert np.max(np.abs(got - (0.5 * model.values) ** 2)) < 1e-4
