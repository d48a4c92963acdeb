"""Einsum contractions, convolutions by their patch map, pools, bias and residual Add: each against a naive twin."""
import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from hezk.model.graph import Patches
from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.layers import contraction as C
from proofs.layers.common import Claim
from proofs.mle import mle_evaluate
from proofs.transcript import Transcript
from tests.reference.mle_naive import naive_mle

from .cheating import consistent_cheating


def table(tensor):
    return F.to_field(np.asarray(tensor, dtype=np.int64)).reshape(-1)


def output_claim(y, seed):
    """A random point of the padded output y and y~ there."""
    k = int(np.log2(np.asarray(y).size))
    point = F.ext_random((k,), seed=seed)
    return Claim(point, mle_evaluate(table(y), point))


def off_by_one(y, rng):
    y = np.array(y, dtype=np.int64)
    index = tuple(int(rng.integers(n)) for n in y.shape)
    y[index] += 1
    return y


# ----------------------------------------------------------------------------------------- naive twins
def naive_conv(x, weight, window):
    """Direct loop: Y[b,g,o,i,j] = sum_{c,u,v} W[g,o,c,u,v] x[b, g Cg + c, s0 i + d0 u - top, s1 j + d1 v - left]."""
    b_, c_, h_, w_ = x.shape
    groups, (kh, kw), (s0, s1), (d0, d1) = window.groups, window.kernel, window.stride, window.dilation
    top, left, bottom, right = window.pads
    oh, ow = (h_ + top + bottom - d0 * (kh - 1) - 1) // s0 + 1, (w_ + left + right - d1 * (kw - 1) - 1) // s1 + 1
    cg, outs = c_ // groups, weight.shape[1]
    y = np.zeros((b_, groups, outs, oh, ow), dtype=np.int64)
    for b, g, o, i, j, c, u, v in itertools.product(range(b_), range(groups), range(outs), range(oh), range(ow),
                                                      range(cg), range(kh), range(kw)):
        row, col = s0 * i + d0 * u - top, s1 * j + d1 * v - left
        if 0 <= row < h_ and 0 <= col < w_:
            y[b, g, o, i, j] += int(weight[g, o, c, u, v]) * int(x[b, g * cg + c, row, col])
    return y


def naive_pool_sum(x, window):
    """Window sums (AveragePool's numerator, count_include_pad), Y[b,g,c,i,j], by a direct loop."""
    b_, c_, h_, w_ = x.shape
    return naive_conv(x.reshape(b_ * c_, 1, h_, w_), np.ones((1, 1, 1, *window.kernel), dtype=np.int64),
                      window).reshape(b_, 1, c_, *naive_conv(x[:1, :1], np.ones((1, 1, 1, *window.kernel)),
                                                              window).shape[-2:])


def pad_to(y, padded):
    return np.pad(y, [(0, p - n) for n, p in zip(y.shape, padded.shape)])


# ----------------------------------------------------------------------------------------- plain einsum
def run_contraction(equation, a, w, seed, y=None):
    a, w = C.pad_operand(a), C.pad_operand(w)
    y = np.einsum(equation, a, w) if y is None else C.pad_operand(y)
    claim = output_claim(y, seed)
    proof, pa, pw = C.contraction_claim_reduction(equation, a, w, claim, Transcript("c"), strict=False)
    va, vw = C.verify_contraction(equation, a.shape, w.shape, claim, proof, Transcript("c"))
    return a, w, proof, (pa, pw), (va, vw)


EQUATIONS = {  # equation: (data letters, weight letters) -> shapes drawn per letter
    "bij,bjk->bik": "batched matmul", "bk,nk->bn": "Gemm", "bchw,hw->bc": "GlobalAveragePool",
    "bsk,kn->bsn": "MatMul", "bkn,mk->bmn": "constant-first MatMul", "bc,c->bc": "elementwise scale",
    "ab,cd->abcd": "outer product (no sumcheck variable)",
}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(EQUATIONS)), st.dictionaries(st.sampled_from("abcdhijkmnsw"), st.integers(1, 5)),
       st.integers(0, 2**32 - 1))
def test_einsum_contraction_matches_numpy(equation, sizes, seed):
    rng = np.random.default_rng(seed)
    data, weight = equation.split("->")[0].split(",")
    a = rng.integers(-99, 100, [sizes.get(l, 3) for l in data])
    w = rng.integers(-99, 100, [sizes.get(l, 3) for l in weight])
    a_pad, w_pad, _, (pa, pw), (va, vw) = run_contraction(equation, a, w, seed)
    assert np.array_equal(np.einsum(equation, a_pad, w_pad)[tuple(slice(0, n) for n in np.einsum(equation, a, w)
                                                                   .shape)], np.einsum(equation, a, w))
    for prover_claim, verifier_claim, operand in ((pa, va, a_pad), (pw, vw, w_pad)):
        assert np.array_equal(prover_claim.point, verifier_claim.point)
        assert F.ext_eq(mle_evaluate(table(operand), verifier_claim.point), verifier_claim.value)


def test_final_claims_against_the_naive_mle():
    rng = np.random.default_rng(3)
    a, w = rng.integers(-9, 9, (2, 2, 4)), rng.integers(-9, 9, (2, 4, 2))
    a_pad, w_pad, _, _, (va, vw) = run_contraction("bij,bjk->bik", a, w, 5)
    assert F.ext_eq(naive_mle(table(a_pad), va.point), va.value)
    assert F.ext_eq(naive_mle(table(w_pad), vw.point), vw.value)


@pytest.mark.parametrize("equation,a_shape,w_shape", [("bij,bjk->bik", (2, 4, 4), (2, 4, 2)),
                                                       ("bk,nk->bn", (3, 4), (2, 4))])
def test_wrong_output_entry_is_rejected(equation, a_shape, w_shape):
    rng = np.random.default_rng(7)
    a, w = rng.integers(-9, 9, a_shape), rng.integers(-9, 9, w_shape)
    y = off_by_one(np.einsum(equation, a, w), rng)
    with pytest.raises(ProofRejected, match="g\\(0\\) \\+ g\\(1\\)"):
        run_contraction(equation, a, w, 11, y=y)


@pytest.mark.parametrize("field", ["data_eval", "weight_eval"])
def test_wrong_operand_value_is_rejected(field):
    rng = np.random.default_rng(8)
    a, w = C.pad_operand(rng.integers(-9, 9, (2, 4, 4))), C.pad_operand(rng.integers(-9, 9, (2, 4, 2)))
    claim = output_claim(np.einsum("bij,bjk->bik", a, w), 1)
    proof, _, _ = C.contraction_claim_reduction("bij,bjk->bik", a, w, claim, Transcript("c"))
    bad = F.ext_add(getattr(proof, field), F.ext_one())
    tampered = C.ContractionProof(**{**proof.__dict__, field: bad})
    with pytest.raises(ProofRejected, match="final evaluation"):
        C.verify_contraction("bij,bjk->bik", a.shape, w.shape, claim, tampered, Transcript("c"))


def test_consistent_cheater_is_caught_at_the_final_check():
    rng = np.random.default_rng(9)
    a, w = rng.integers(-9, 9, (2, 4, 4)), rng.integers(-9, 9, (2, 4, 2))
    y = off_by_one(np.einsum("bij,bjk->bik", a, w), rng)
    with consistent_cheating("proofs.layers.contraction"), pytest.raises(ProofRejected, match="final evaluation"):
        run_contraction("bij,bjk->bik", a, w, 12, y=y)


def test_public_weight_must_match():
    a, w = np.arange(64).reshape(2, 2, 4, 4), np.ones((4, 4), dtype=np.int64)
    claim = output_claim(np.einsum("bchw,hw->bc", a, w), 2)
    proof, _, _ = C.contraction_claim_reduction("bchw,hw->bc", a, w, claim, Transcript("c"))
    C.verify_contraction("bchw,hw->bc", a.shape, w.shape, claim, proof, Transcript("c"), public_weight=w)
    with pytest.raises(ProofRejected, match="public operand"):
        C.verify_contraction("bchw,hw->bc", a.shape, w.shape, claim, proof, Transcript("c"), public_weight=2 * w)


@pytest.mark.parametrize("equation,shapes,message", [
    ("bk,nk", ((2, 2), (2, 2)), "'->'"), ("bk->bk", ((2, 2), (2, 2)), "two operands"),
    ("b...k,nk->bn", ((2, 2), (2, 2)), "letters only"), ("bkk,nk->bn", ((2, 2, 2), (2, 2)), "repeats"),
    ("bk,nk->bz", ((2, 2), (2, 2)), "on no operand"), ("bk,nk->bn", ((2, 3), (2, 3)), "power of two"),
    ("bk,nk->bn", ((2, 2), (2, 4)), "sizes 2 and 4"), ("bk,nk->bn", ((2, 2, 2), (2, 2)), "rank"),
])
def test_parser_refuses_with_a_clear_error(equation, shapes, message):
    with pytest.raises(ProofError, match=message):
        C.parse_einsum(equation, *shapes)


# ----------------------------------------------------------------------------------------- convolution
def run_patches(equation, x, w, window, seed, y=None, public=False):
    y = C.patch_output(equation, x, w, window) if y is None else y
    claim = output_claim(y, seed)
    proof, px, pw = C.patch_claim_reduction(equation, x, w, window, claim, Transcript("p"), strict=False)
    vx, vw = C.verify_patches(equation, x.shape, w.shape, window, claim, proof, Transcript("p"),
                              public_weight=w if public else None)
    return proof, (px, pw), (vx, vw)


windows = st.builds(lambda k, s, p, d: (k, s, p, d), st.tuples(st.integers(1, 3), st.integers(1, 3)),
                    st.tuples(st.integers(1, 2), st.integers(1, 2)), st.tuples(*[st.integers(0, 2)] * 4),
                    st.tuples(st.integers(1, 2), st.integers(1, 2)))


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2), st.integers(1, 3), windows,
       st.tuples(st.integers(3, 6), st.integers(3, 6)), st.integers(0, 2**32 - 1))
def test_conv_matches_the_direct_loop(batch, groups, in_per_group, out_per_group, window, hw, seed):
    kernel, stride, pads, dilation = window
    if any(n + lo + hi < d * (k - 1) + 1 for n, k, d, lo, hi in zip(hw, kernel, dilation, pads[:2], pads[2:])):
        assume(False)  # the window does not fit
    patches = Patches(kernel, stride, pads, dilation, groups)
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, (batch, groups * in_per_group, *hw))
    w = rng.integers(-50, 50, (groups, out_per_group, in_per_group, *kernel))
    y = C.patch_output("bgcuvij,gocuv->bgoij", x, w, patches)
    direct = naive_conv(x, w, patches)
    assert np.array_equal(y, pad_to(direct, y))
    assert np.array_equal(direct, np.einsum("bgcuvij,gocuv->bgoij", patches.apply(x), w))  # hezk.model's view
    _, (px, pw), (vx, vw) = run_patches("bgcuvij,gocuv->bgoij", x, w, patches, seed)
    assert np.array_equal(px.point, vx.point) and np.array_equal(pw.point, vw.point)
    assert F.ext_eq(mle_evaluate(table(C.pad_operand(x)), vx.point), vx.value)
    assert F.ext_eq(mle_evaluate(table(C.pad_operand(w)), vw.point), vw.value)


CONV = Patches((3, 3), (2, 1), (1, 0, 1, 2), (1, 2), 2)


def conv_case(seed=4):
    rng = np.random.default_rng(seed)
    return rng.integers(-20, 20, (2, 4, 5, 6)), rng.integers(-5, 5, (2, 3, 2, 3, 3))


def test_m_by_factor_groups_equals_the_whole_table():
    """The verifier's M~(sigma) by factor groups equals the MLE of the prover's whole M table (twin)."""
    x, w = conv_case()
    geometry = C.PatchGeometry.of(x.shape, CONV)
    spec = C._patch_spec("bgcuvij,gocuv->bgoij", geometry, w.shape)
    seeds = iter(range(100, 200))
    r = {l: F.ext_random((spec.bits(l),), seed=next(seeds)) for l in spec.output}
    rho = {l: F.ext_random((int(np.log2(C.padded_size(n))),), seed=next(seeds)) for l, n in zip("bchw", x.shape)}
    sigma = F.ext_random((sum(spec.bits(l) for l in spec.weight),), seed=7)
    whole = C._m_table(geometry, spec, r, rho)
    assert F.ext_eq(mle_evaluate(whole, sigma), C._m_evaluate(geometry, spec, r, rho, sigma))
    dense = C._arrange(C._contract_dense(C._m_factors(geometry, spec, r, rho), spec.weight, spec.size),
                       spec.weight, spec.weight[::-1], spec.size)
    assert np.array_equal(dense, whole)


def test_conv_wrong_output_is_rejected():
    x, w = conv_case()
    y = off_by_one(C.patch_output("bgcuvij,gocuv->bgoij", x, w, CONV), np.random.default_rng(1))
    with pytest.raises(ProofRejected, match="g\\(0\\) \\+ g\\(1\\)"):
        run_patches("bgcuvij,gocuv->bgoij", x, w, CONV, 3, y=y)


@pytest.mark.parametrize("field,where", [("x_eval", "patches.x"), ("gather_eval", "patches.x"),
                                         ("weight_eval", "patches.w")])
def test_conv_wrong_operand_value_is_rejected(field, where):
    x, w = conv_case()
    claim = output_claim(C.patch_output("bgcuvij,gocuv->bgoij", x, w, CONV), 3)
    proof, _, _ = C.patch_claim_reduction("bgcuvij,gocuv->bgoij", x, w, CONV, claim, Transcript("p"))
    tampered = C.PatchProof(**{**proof.__dict__, field: F.ext_add(getattr(proof, field), F.ext_one())})
    with pytest.raises(ProofRejected, match="final evaluation") as caught:
        C.verify_patches("bgcuvij,gocuv->bgoij", x.shape, w.shape, CONV, claim, tampered, Transcript("p"))
    assert caught.value.args and where in str(caught.value)


def test_conv_consistent_cheater_is_caught_at_the_final_check():
    x, w = conv_case()
    y = off_by_one(C.patch_output("bgcuvij,gocuv->bgoij", x, w, CONV), np.random.default_rng(2))
    with consistent_cheating("proofs.layers.contraction"), pytest.raises(ProofRejected, match="final evaluation"):
        run_patches("bgcuvij,gocuv->bgoij", x, w, CONV, 3, y=y)


def test_folded_batch_normalization_is_the_same_relation():
    """BatchNormalization folded into the conv: W' = W * scale[g, o], bias' = shift; proven as conv + bias."""
    x, w = conv_case(6)
    scale, shift = np.array([[2, -1, 3], [1, 4, -2]]), np.array([[5, -7, 1], [0, 2, 9]])
    folded = w * scale[:, :, None, None, None]
    y = C.patch_output("bgcuvij,gocuv->bgoij", x, folded, CONV)
    real = naive_conv(x, w, CONV) * scale[None, :, :, None, None] + shift[None, :, :, None, None]
    with_bias = np.zeros_like(y)
    with_bias[tuple(slice(0, n) for n in real.shape)] = real
    claim = output_claim(with_bias, 8)
    bias_table = C.pad_operand(shift)
    bias_letters, real_shape = "go", real.shape
    parts = C.split_point(claim.point, "bgoij", lambda l: int(np.log2(y.shape["bgoij".index(l)])))
    bias_eval = mle_evaluate(table(bias_table), C.join_point(parts, bias_letters))
    z_claim, b_claim = C.bias_claim_reduction(claim, "bgoij", real_shape, bias_letters, bias_eval)
    assert F.ext_eq(mle_evaluate(table(y), z_claim.point), z_claim.value)  # Z = the folded conv
    proof, _, _ = C.patch_claim_reduction("bgcuvij,gocuv->bgoij", x, folded, CONV, z_claim, Transcript("p"))
    C.verify_patches("bgcuvij,gocuv->bgoij", x.shape, folded.shape, CONV, z_claim, proof, Transcript("p"))
    wrong = F.ext_add(bias_eval, F.ext_one())
    z_wrong, _ = C.bias_claim_reduction(claim, "bgoij", real_shape, bias_letters, wrong)
    with pytest.raises(ProofRejected):
        C.verify_patches("bgcuvij,gocuv->bgoij", x.shape, folded.shape, CONV, z_wrong, proof, Transcript("p"))


# ----------------------------------------------------------------------------------------------- pools
@settings(max_examples=15, deadline=None)
@given(st.integers(1, 2), st.integers(1, 3), windows, st.integers(0, 2**32 - 1))
def test_average_pool_is_a_public_contraction(batch, channels, window, seed):
    kernel, stride, pads, dilation = window
    patches = Patches(kernel, stride, pads, (1, 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, (batch, channels, 5, 5))
    ones = np.ones(kernel, dtype=np.int64)  # the pool's numerator; the 1/(kh kw) scale is requantization's
    y = C.patch_output("bgcuvij,uv->bgcij", x, ones, patches)
    assert np.array_equal(y, pad_to(naive_pool_sum(x, patches), y))
    _, _, (vx, _) = run_patches("bgcuvij,uv->bgcij", x, ones, patches, seed, public=True)
    assert F.ext_eq(mle_evaluate(table(C.pad_operand(x)), vx.point), vx.value)


def test_average_pool_per_window_counts_and_wrong_public_weight():
    """'bgcuvij,uvij->bgcij' (count_include_pad=0 weights vary per window): W public, a wrong one rejected."""
    patches = Patches((3, 3), (2, 2), (1, 1, 1, 1))
    rng = np.random.default_rng(5)
    x = rng.integers(-20, 20, (1, 3, 4, 4))
    w = rng.integers(1, 9, (3, 3, 2, 2))
    y = C.patch_output("bgcuvij,uvij->bgcij", x, w, patches)
    assert np.array_equal(y[:, :, :3, :2, :2], np.einsum("bgcuvij,uvij->bgcij", patches.apply(x), w))
    run_patches("bgcuvij,uvij->bgcij", x, w, patches, 6, public=True)
    claim = output_claim(y, 6)
    proof, _, _ = C.patch_claim_reduction("bgcuvij,uvij->bgcij", x, w, patches, claim, Transcript("p"))
    with pytest.raises(ProofRejected, match="public operand"):
        C.verify_patches("bgcuvij,uvij->bgcij", x.shape, w.shape, patches, claim, proof, Transcript("p"),
                         public_weight=w + 1)


def test_global_average_pool_wrong_output_rejected():
    rng = np.random.default_rng(4)
    x, w = rng.integers(-9, 9, (2, 4, 4, 4)), np.ones((4, 4), dtype=np.int64)
    run_contraction("bchw,hw->bc", x, w, 1)
    with pytest.raises(ProofRejected):
        run_contraction("bchw,hw->bc", x, w, 1, y=off_by_one(np.einsum("bchw,hw->bc", x, w), rng))


# ---------------------------------------------------------------------------------------- bias, residual
@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_bias_add_claim(batch, channels, width, seed):
    rng = np.random.default_rng(seed)
    z, bias = rng.integers(-50, 50, (batch, channels, width)), rng.integers(-50, 50, channels)
    y_real = z + bias[None, :, None]
    y, z_pad = C.pad_operand(y_real), C.pad_operand(z)  # the bias only on the real region
    claim = output_claim(y, seed)
    parts = C.split_point(claim.point, "bcw", lambda l: int(np.log2(y.shape["bcw".index(l)])))
    bias_eval = mle_evaluate(table(C.pad_operand(bias)), C.join_point(parts, "c"))
    z_claim, b_claim = C.bias_claim_reduction(claim, "bcw", y_real.shape, "c", bias_eval)
    assert F.ext_eq(mle_evaluate(table(z_pad), z_claim.point), z_claim.value)
    assert F.ext_eq(mle_evaluate(table(C.pad_operand(bias)), b_claim.point), b_claim.value)
    z_bad, _ = C.bias_claim_reduction(Claim(claim.point, F.ext_add(claim.value, F.ext_one())), "bcw",
                                      y_real.shape, "c", bias_eval)
    assert not F.ext_eq(mle_evaluate(table(z_pad), z_bad.point), z_bad.value)


def test_residual_add_claim():
    rng = np.random.default_rng(2)
    z1, z2 = rng.integers(-50, 50, (2, 4, 4)), rng.integers(-50, 50, (2, 4, 4))
    claim = output_claim(z1 + z2, 4)
    first, second = C.residual_claim_reduction(claim, mle_evaluate(table(z1), claim.point))
    assert F.ext_eq(mle_evaluate(table(z2), second.point), second.value)
    _, second = C.residual_claim_reduction(claim, F.ext_add(mle_evaluate(table(z1), claim.point), F.ext_one()))
    assert not F.ext_eq(mle_evaluate(table(z2), second.point), second.value)


def test_soundness_bits():
    assert 115 < C.soundness_bits(20, 3) < F.EXT_BITS
