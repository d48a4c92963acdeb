"""Encrypted x encrypted einsum plans on operands spread over several ciphertexts (issue 34): matmuls
``'ij,jk->ik'``, batched ``'hij,hjk->hik'``, attention's ``'hid,hjd->hij'`` and ``'hij,hjd->hid'``, each operand in a
random layout (row-major in a random axis order, padded strides, chunked tiles, dirty slots holding garbage) at small
slot counts (256 to 1024, so that operands span 2+ ciphertexts), against ``numpy.einsum``; the same plans encrypted on
an INSECURE N = 2^10 test ring (tests only) on two-tile layouts; attention's chain (projections, head reshapes and
transposes, both products) on CipherTensors against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import ShapeError
from tensor_ops import PlainBackend, einsum, encrypt
from tensor_ops.attention import reshape
from tensor_ops.layout import SlotLayout
from tensor_ops.parse import parse
from tensor_ops.plan import build_plan, plan

EXPRESSIONS = ("ij,jk->ik", "ij,kj->ik", "hij,hjk->hik", "hid,hjd->hij", "hij,hjd->hid", "bhid,bhjd->bhij")
#: INSECURE test ring (tests only): N = 2^10, 512 slots
SMALL_RING = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 5, log_p=[30, 30, 30], log_scale=50, dnum=4, insecure=True)


def random_layout(data, shape, slots: int) -> SlotLayout:
    """A layout of ``shape`` drawn by hypothesis: axes row-major in a random order, each stride padded by 0 or 1 slot,
    some axes cut into chunks smaller than the room (more tiles), possibly dirty (garbage where no element sits)."""
    order = data.draw(st.permutations(range(len(shape))))
    strides, chunk, step = [0] * len(shape), list(shape), 1
    for a in reversed(order):
        strides[a] = step
        room = max(slots // step, 1)
        c = min(shape[a], room)
        if shape[a] > 1 and data.draw(st.booleans()):
            c = data.draw(st.integers(1, c))
        chunk[a] = c
        pad = data.draw(st.integers(0, 1))
        step *= c + pad if c > 1 and step * (c + pad) <= slots else c
    layout = SlotLayout.tiled(shape, strides, slots, chunk)
    return layout.with_clean(False) if data.draw(st.booleans()) else layout


def packed(layout: SlotLayout, array, rng) -> list:
    """``array`` in ``layout``'s slot vectors; a dirty layout's empty slots filled with garbage."""
    vectors = layout.pack(array)
    if layout.clean:
        return vectors
    used = [np.zeros(layout.slots, dtype=bool) for _ in vectors]
    for t in layout.tiles:
        used[t.ct][(layout.positions(t).reshape(-1, 1) + layout.replica_shifts().reshape(1, -1)).ravel()] = True
    return [np.where(u, v, 7.0 * rng.normal(size=layout.slots)) for u, v in zip(used, vectors)]


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_two_encrypted_operands_in_any_layout_equal_numpy(data):
    check_random_layouts(data)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_two_encrypted_operands_in_any_layout_equal_numpy_many(data):
    check_random_layouts(data)


def check_random_layouts(data):
    expr = data.draw(st.sampled_from(EXPRESSIONS))
    inputs = expr.split("->")[0].split(",")
    sizes = {c: data.draw(st.integers(1, 3) if c in "hb" else st.integers(1, 36)) for c in sorted(set("".join(inputs)))}
    slots = data.draw(st.sampled_from((256, 512, 1024)))
    shapes = [tuple(sizes[c] for c in term) for term in inputs]
    layouts = tuple(random_layout(data, s, slots) for s in shapes)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    arrays = [rng.normal(size=s) for s in shapes]
    p = build_plan(parse(expr, *shapes), (True, True), layouts, slots)
    out = p.run(PlainBackend(slots), [packed(lay, a, rng) for lay, a in zip(layouts, arrays)])
    np.testing.assert_allclose(p.output_layout.unpack(out), np.einsum(expr, *arrays), atol=1e-8)


@pytest.mark.parametrize("expr, first, second", [
    ("ij,jk->ik", (24, 40), (40, 24)),
    pytest.param("hij,hjk->hik", (2, 24, 24), (2, 24, 24), marks=pytest.mark.slow),
    pytest.param("hid,hjd->hij", (2, 32, 16), (2, 32, 16), marks=pytest.mark.slow),
    pytest.param("hij,hjd->hid", (2, 32, 32), (2, 32, 16), marks=pytest.mark.slow)])
def test_two_tile_operands_encrypted_at_a_small_ring(expr, first, second):
    """Operands of 2 to 4 ciphertexts at 512 slots, encrypted: within 1e-6 of numpy (the TOY bound)."""
    from crypto import CKKSContext, CKKSParameters

    params = CKKSParameters.from_literal(SMALL_RING)
    p = plan(expr, first, second, params=params)
    assert min(lay.n_ciphertexts for lay in p.input_layouts) >= 2
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=3)
    rng = np.random.default_rng(4)
    a, b = rng.uniform(-1, 1, first), rng.uniform(-1, 1, second)
    got = einsum(expr, encrypt(ctx, a), encrypt(ctx, b), plan=p).decrypt()
    assert np.max(np.abs(got - np.einsum(expr, a, b))) <= 1e-6 * max(1.0, np.max(np.abs(got)))


@settings(max_examples=5, deadline=None)
@given(sequence=st.integers(2, 40), heads=st.integers(1, 3), dim=st.integers(1, 16),
       slots=st.sampled_from((128, 256, 512, 1024)), seed=st.integers(0, 2**16))
def test_attention_chain_on_cipher_tensors_equals_numpy(sequence, heads, dim, slots, seed):
    """q, k, v projections, head reshape and transpose (the layouts attention's products meet), scores and the
    weighted sum: the same code on CipherTensors (PlainBackend) equals numpy."""
    rng = np.random.default_rng(seed)
    width = heads * dim
    x = rng.normal(size=(1, sequence, width))
    weights = [rng.normal(size=(width, width)) for _ in range(3)]

    def heads_of(t, w):
        y = einsum("bsw,wo->bso", t, w)
        try:
            return reshape(y, (1, sequence, heads, dim)).transpose((0, 2, 1, 3))
        except ShapeError:      # a projection tiled across its output axis: refused as a layout change, so the
            # heads start from a fresh encryption of the same values (the products' layouts still transposed)
            return encrypt(t.backend, y.decrypt().reshape(1, sequence, heads, dim)).transpose((0, 2, 1, 3))

    def forward(t):
        q, k, v = (heads_of(t, w) for w in weights)
        return einsum("bhij,bhjd->bhid", einsum("bhid,bhjd->bhij", q, k), v)

    want = np.einsum("bhij,bhjd->bhid", *(lambda q, k, v: (np.einsum("bhid,bhjd->bhij", q, k), v))(
        *(np.einsum("bsw,wo->bso", x, w).reshape(1, sequence, heads, dim).transpose(0, 2, 1, 3) for w in weights)))
    got = forward(encrypt(PlainBackend(slots), x)).decrypt()
    np.testing.assert_allclose(got, want, atol=1e-9 * max(1.0, np.max(np.abs(want))))
