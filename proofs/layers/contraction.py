"""Any two-operand einsum contraction by one sumcheck; convolutions by their patch index map (issue 13, item 1).

Layout: a tensor with subscripts l_0 .. l_{m-1}, every axis zero-padded to a power of two, is the row-major
table of :mod:`proofs.mle`, so its point is concat(r_{l_{m-1}}, ..., r_{l_0}) (last axis least significant).

Contraction (Thaler, CRYPTO 2013, section 5, generalized): for Y[out] = sum_c A[a] W[w], with S the
*shared* output letters (in A, W and the output) and C the contracted letters,

    Y~(r) = sum_{s, c} eq(r_S, s) A~(r_{A free}, s, c) W~(r_{W free}, s, c),

the free (output-only) letters of each operand fixed at their coordinates of r. One sumcheck of degree 2
(3 with shared letters) over the bits of S and C reduces the claim to A~ and W~ at one point each.

Convolution (Patches, hezk.model.graph): the view P[b,g,c,u,v,i,j] = X[b, gC/G + c, s0 i + d0 u - top,
s1 j + d1 v - left] (zero outside) is linear in X, so for Y = einsum(eq, P, W)

    Y~(r) = sum_{p in X} X[p] G_r[p],   G_r[p] = sum_{v real, gather(v) = p} R_r[v],
    R_r[v] = sum_{W-only letters} prod_{l in out} eq(r_l, l) W[...],

a degree-2 sumcheck over X's bits (no im2col copy is committed; the prover builds G_r in O(|view|)).
It leaves X~(rho) and G_r~(rho); the second is linear in W: G_r~(rho) = sum_q W[q] M[q] with the public
M[q] = sum_v eq(rho, gather(v)) prod_{l in out} eq(r_l, l) (restricted to W's letters q), a second degree-2
sumcheck over W's bits leaving W~(sigma). M is an outer product over the connected groups of its factors,
eq(rho, gather(v)) = Zb[b] Zc[g, c] Zh[u, i] Zw[v, j] and the eq(r_l, l), so the verifier evaluates M~(sigma)
as the product of the groups' MLEs: O(B + C + kh Ho + kw Wo + O) for a Conv, never the view nor M.
Why not a sumcheck over (c, u, v) with X~ at the gathered point: X~(s i + d u - pad) is not multilinear in
the bits of u (the index map is not), so the sum runs over X's own bits; zkCNN's FFT route would need
stride 1 and a committed transform, the patch map handles stride, padding, dilation and groups directly.
The prover's work is O(|view| / B) (R_r per sample, scattered once; the batch factor eq(r_b, b) splits off)
plus the two sumchecks, linear in |X| + |W|. Pools are the same relation with a public W (the verifier checks
W~(sigma) itself). Bias and residual Add are linear: Y~(r) = Z~(r) + b~(r_b) valid~(r_rest).

Non-zero-knowledge (plain sumcheck over F_p4). Soundness: a false claim survives one sumcheck of degree d
over k variables with probability <= d k / p^4 ~ d k 2^-123.6, so >= 123.6 - log2(d k) bits per relation
(:func:`soundness_bits`), given a uniformly random output point r.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..errors import ProofError, ProofRejected
from ..mle import eq_eval, eq_table, mle_evaluate
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from .common import Claim, check_ext, prefix_sum_of_eq, require

_LETTER = re.compile(r"^[A-Za-z]*$")


# --------------------------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class Einsum:
    """A parsed two-operand einsum 'A,W->Y' with each letter's (power of two) size."""

    data: str
    weight: str
    output: str
    sizes: tuple  # ((letter, size), ...)

    @property
    def size(self) -> dict:
        return dict(self.sizes)

    def bits(self, letter: str) -> int:
        return self.size[letter].bit_length() - 1

    @property
    def shared(self) -> str:
        """Output letters on both operands (an eq factor in the sumcheck)."""
        return "".join(l for l in self.output if l in self.data and l in self.weight)

    @property
    def contracted(self) -> str:
        return "".join(dict.fromkeys(l for l in self.data + self.weight if l not in self.output))

    @property
    def summed(self) -> str:
        """The sumcheck's letters, lowest bits first: shared, then contracted."""
        return self.shared + self.contracted

    @property
    def num_vars(self) -> int:
        return sum(self.bits(l) for l in self.summed)

    def shape(self, letters: str) -> tuple:
        return tuple(self.size[l] for l in letters)


def einsum_subscripts(equation: str) -> tuple:
    if not isinstance(equation, str) or equation.count("->") != 1:
        raise ProofError(f"einsum {equation!r}: needs exactly one explicit '->'")
    operands, output = equation.replace(" ", "").split("->")
    parts = operands.split(",")
    if len(parts) != 2:
        raise ProofError(f"einsum {equation!r}: needs exactly two operands, got {len(parts)}")
    for part in parts + [output]:
        if not _LETTER.match(part):
            raise ProofError(f"einsum {equation!r}: subscript {part!r} must be letters only (no '...')")
        if len(set(part)) != len(part):
            raise ProofError(f"einsum {equation!r}: subscript {part!r} repeats a letter (diagonals unsupported)")
    missing = set(output) - set(parts[0] + parts[1])
    if missing:
        raise ProofError(f"einsum {equation!r}: output letters {sorted(missing)} are on no operand")
    return parts[0], parts[1], output


def parse_einsum(equation: str, data_shape, weight_shape, *, pow2: bool = True) -> Einsum:
    """Parse 'A,W->Y' against the operand shapes; every letter's size must agree (and be a power of two)."""
    data, weight, output = einsum_subscripts(equation)
    sizes = {}
    for letters, shape, name in ((data, data_shape, "data"), (weight, weight_shape, "weight")):
        shape = tuple(int(n) for n in shape)
        if len(shape) != len(letters):
            raise ProofError(f"einsum {equation!r}: {name} operand of shape {shape} has rank {len(shape)}, "
                             f"subscript {letters!r} needs {len(letters)}")
        for letter, n in zip(letters, shape):
            if sizes.setdefault(letter, n) != n:
                raise ProofError(f"einsum {equation!r}: index {letter!r} has sizes {sizes[letter]} and {n}")
            if n < 1 or (pow2 and n & (n - 1)):
                raise ProofError(f"einsum {equation!r}: index {letter!r} has size {n}; every index must be "
                                 "a power of two (pad the operands with pad_operand)")
    return Einsum(data, weight, output, tuple(sorted(sizes.items())))


def pad_operand(tensor) -> np.ndarray:
    """Zero-pad every axis of an integer tensor to the next power of two (int64)."""
    tensor = np.asarray(tensor, dtype=np.int64)
    target = tuple(1 << max(n - 1, 0).bit_length() for n in tensor.shape)
    return np.pad(tensor, [(0, t - n) for n, t in zip(tensor.shape, target)])


# ------------------------------------------------------------------------------------ points and tables
def split_point(point, letters: str, bits) -> dict:
    """{letter: its (k_l, 4) slice} of a tensor's point (last letter's bits first)."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    out, start = {}, 0
    for letter in reversed(letters):
        out[letter] = point[start:start + bits(letter)]
        start += bits(letter)
    if start != point.shape[0]:
        raise ProofRejected(f"a point of {point.shape[0]} coordinates for subscript {letters!r} needs {start}",
                            "contraction")
    return out


def join_point(parts: dict, letters: str) -> np.ndarray:
    """Inverse of :func:`split_point`."""
    chunks = [np.asarray(parts[l], dtype=np.uint64).reshape(-1, F.EXT_DEGREE) for l in reversed(letters)]
    return np.concatenate(chunks) if chunks else np.zeros((0, F.EXT_DEGREE), dtype=np.uint64)


def _field(tensor) -> np.ndarray:
    tensor = np.asarray(tensor)
    return tensor if tensor.dtype == np.uint64 and F.is_canonical(tensor) else F.to_field(tensor)


def _as_ext(array: np.ndarray, ndim: int) -> np.ndarray:
    return array if array.ndim == ndim + 1 else F.ext_from_base(array)


def _contract_dense(factors, keep: str, sizes: dict) -> np.ndarray:
    """sum over letters not in ``keep`` of prod factors, as an ext array over ``keep`` (size 1 broadcast to
    ``sizes``). ``factors``: (array, letters), base or ext (trailing 4). Dense broadcasting over all letters."""
    letters = "".join(dict.fromkeys("".join(l for _, l in factors) + keep))
    result = F.ext_one((1,) * len(letters))
    for array, sub in factors:
        ext = _as_ext(np.asarray(array), len(sub))
        perm = [sub.index(l) for l in letters if l in sub] + [len(sub)]
        shape = [ext.shape[sub.index(l)] if l in sub else 1 for l in letters] + [F.EXT_DEGREE]
        result = F.ext_mul(result, np.transpose(ext, perm).reshape(shape))
    summed = tuple(a for a, l in enumerate(letters) if l not in keep)
    if summed:
        result = F.sum_(result, axis=summed)
    kept = [l for l in letters if l in keep]
    result = np.transpose(result, [kept.index(l) for l in keep] + [len(keep)])
    return np.ascontiguousarray(np.broadcast_to(result, tuple(sizes[l] for l in keep) + (F.EXT_DEGREE,)))


def _contract_parts(factors, keep: str, sizes: dict) -> list:
    """The contraction split by connected components (factors linked by a shared letter): [(ext table, kept
    letters)], whose outer product is the whole result; each component is contracted densely on its own."""
    groups = []  # (letters, factors)
    for factor in factors:
        letters = set(factor[1])
        linked = [g for g in groups if g[0] & letters]
        groups = [g for g in groups if not g[0] & letters]
        groups.append((letters.union(*[g[0] for g in linked]), [f for g in linked for f in g[1]] + [factor]))
    parts = []
    for letters, group in groups:
        kept = "".join(l for l in keep if l in letters)
        parts.append((_contract_dense(group, kept, sizes), kept))
    return parts


def _contract(factors, keep: str, sizes: dict) -> np.ndarray:
    """:func:`_contract_dense` by components, then their outer product (dense work only within a component)."""
    return _contract_dense(_contract_parts(factors, keep, sizes), keep, sizes)


def _parts_evaluate(parts, point_parts: dict) -> np.ndarray:
    """The MLE of the outer product of ``parts`` at a point: the product of each part's MLE at its letters."""
    value = F.ext_one()
    for table, letters in parts:
        value = F.ext_mul(value, mle_evaluate(table.reshape(-1, F.EXT_DEGREE), join_point(point_parts, letters)))
    return value


def _arrange(table: np.ndarray, letters: str, target: str, sizes: dict) -> np.ndarray:
    """A tensor over ``letters`` (base or ext) as the flat sumcheck table over ``target`` (broadcast on the
    letters it lacks; ``target``'s first letter least significant)."""
    ext = table.ndim == len(letters) + 1
    order = target[::-1]
    perm = [letters.index(l) for l in order if l in letters] + ([len(letters)] if ext else [])
    shape = [sizes[l] if l in letters else 1 for l in order] + ([F.EXT_DEGREE] if ext else [])
    full = [sizes[l] for l in order] + ([F.EXT_DEGREE] if ext else [])
    arranged = np.broadcast_to(np.transpose(table, perm).reshape(shape), full)
    return np.ascontiguousarray(arranged).reshape((-1, F.EXT_DEGREE) if ext else (-1,))


# ------------------------------------------------------------------------------------------ contraction
@dataclass(frozen=True, eq=False)
class ContractionProof:
    """The sumcheck over the shared and contracted bits, then A~ and W~ at its point."""

    sumcheck: SumcheckProof
    data_eval: np.ndarray
    weight_eval: np.ndarray


def soundness_bits(num_vars: int, degree: int) -> float:
    """-log2 of the sumcheck's soundness error d k / p^4 (k = num_vars; at least one variable counted)."""
    return F.EXT_BITS - math.log2(max(1, degree * num_vars))


def _degree(spec: Einsum) -> int:
    return 3 if spec.shared else 2


def _operand_table(tensor, letters: str, spec: Einsum, r: dict) -> np.ndarray:
    free = [l for l in letters if l not in spec.summed]
    if free:
        keep = "".join(l for l in letters if l in spec.summed)
        tensor = _contract([(tensor, letters)] + [(eq_table(r[l]), l) for l in free], keep, spec.size)
        letters = keep
    return _arrange(tensor, letters, spec.summed, spec.size)


def _claims(spec: Einsum, r: dict, rho, data_eval, weight_eval) -> tuple:
    parts = dict(r)
    parts.update(split_point(rho, spec.summed[::-1], spec.bits))  # summed[0] lowest bits
    return (Claim(join_point(parts, spec.data), data_eval), Claim(join_point(parts, spec.weight), weight_eval))


def contraction_claim_reduction(equation: str, data, weight, claim: Claim, transcript, label: str = "contraction",
                                *, strict: bool = True):
    """Prove Y~(claim.point) = claim.value for Y = einsum(equation, data, weight) (padded operands).

    Returns (ContractionProof, data Claim, weight Claim): A~ and W~ at the sumcheck's point, for the caller
    to settle (previous layer, commitment opening, or the verifier's own evaluation of a public operand).
    """
    data, weight = _field(data), _field(weight)
    spec = parse_einsum(equation, data.shape, weight.shape)
    r = split_point(claim.point, spec.output, spec.bits)
    factors = [_operand_table(data, spec.data, spec, r), _operand_table(weight, spec.weight, spec, r)]
    if spec.shared:
        factors.append(_arrange(_contract([(eq_table(r[l]), l) for l in spec.shared], spec.shared, spec.size),
                                spec.shared, spec.summed, spec.size))
    sumcheck, rho, evals = prove_sumcheck([(1, factors)], claim.value, transcript, label, strict=strict)
    data_eval, weight_eval = evals[0][0], evals[0][1]
    transcript.absorb(f"{label}.evals", [data_eval, weight_eval])
    return (ContractionProof(sumcheck, data_eval, weight_eval),) + _claims(spec, r, rho, data_eval, weight_eval)


def verify_contraction(equation: str, data_shape, weight_shape, claim: Claim, proof: ContractionProof, transcript,
                       label: str = "contraction", *, public_weight=None):
    """Check a :class:`ContractionProof`; returns (data Claim, weight Claim) or raises ProofRejected.

    With ``public_weight`` (a pool's constant) the verifier settles the weight claim itself."""
    spec = parse_einsum(equation, data_shape, weight_shape)
    data_eval = check_ext(proof.data_eval, label, "data_eval")
    weight_eval = check_ext(proof.weight_eval, label, "weight_eval")
    r = split_point(claim.point, spec.output, spec.bits)
    sub = verify_sumcheck(proof.sumcheck, claim.value, spec.num_vars, _degree(spec), transcript, label)
    parts = split_point(sub.point, spec.summed[::-1], spec.bits)
    expected = F.ext_mul(data_eval, weight_eval)
    for letter in spec.shared:
        expected = F.ext_mul(expected, eq_eval(r[letter], parts[letter]))
    sub.check(expected, label)
    transcript.absorb(f"{label}.evals", [data_eval, weight_eval])
    data_claim, weight_claim = _claims(spec, r, sub.point, data_eval, weight_eval)
    if public_weight is not None:
        settle_public(weight_claim, public_weight, label)
    return data_claim, weight_claim


def settle_public(claim: Claim, table, where: str) -> None:
    """The verifier's own check of a claim on a public tensor's MLE (raises ProofRejected)."""
    value = mle_evaluate(_field(np.asarray(table)).reshape(-1), claim.point)
    require(F.ext_eq(value, claim.value), "claimed value differs from the public operand's MLE", where)


# ------------------------------------------------------------------------------------------ convolution
@dataclass(frozen=True)
class PatchGeometry:
    """Real sizes of a windowed contraction: x (B, C, H, W), the window (any object with hezk.model.Patches'
    kernel, stride, pads, dilation, groups), the view letters 'bgcuvij' and the weight's subscript."""

    x_shape: tuple
    kernel: tuple
    stride: tuple
    pads: tuple
    dilation: tuple
    groups: int

    @classmethod
    def of(cls, x_shape, window) -> "PatchGeometry":
        geometry = cls(tuple(int(n) for n in x_shape), tuple(window.kernel), tuple(window.stride),
                       tuple(window.pads), tuple(window.dilation), int(window.groups))
        b, c, h, w = geometry.x_shape if len(geometry.x_shape) == 4 else (None,) * 4
        if b is None or c % geometry.groups or min(geometry.out_hw) < 1:
            raise ProofError(f"patches: input shape {x_shape} must be (B, C, H, W) with C a multiple of "
                             f"groups={geometry.groups} and the window {geometry.kernel} fitting")
        return geometry

    @property
    def out_hw(self) -> tuple:
        h, w = self.x_shape[2:]
        return tuple((n + lo + hi - d * (k - 1) - 1) // s + 1 for n, k, s, d, lo, hi in
                     zip((h, w), self.kernel, self.stride, self.dilation, self.pads[:2], self.pads[2:]))

    @property
    def view_shape(self) -> tuple:
        b, c = self.x_shape[:2]
        return (b, self.groups, c // self.groups, *self.kernel, *self.out_hw)

    def positions(self, axis: int) -> np.ndarray:
        """(k, out) input row (axis 0) / column (axis 1) read by kernel offset u and output position i; -1 outside."""
        k, s, d, lo = self.kernel[axis], self.stride[axis], self.dilation[axis], self.pads[axis]
        pos = s * np.arange(self.out_hw[axis])[None, :] + d * np.arange(k)[:, None] - lo
        return np.where((pos >= 0) & (pos < self.x_shape[2 + axis]), pos, -1)


VIEW = "bgcuvij"


def padded_size(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _patch_spec(equation: str, geometry: PatchGeometry, weight_shape) -> Einsum:
    data, weight, output = einsum_subscripts(equation)
    if data != VIEW or not output.startswith("b") or "b" in weight:
        raise ProofError(f"patch contraction {equation!r}: must read '{VIEW},W->b...' with no 'b' in W")
    real = parse_einsum(equation, geometry.view_shape, weight_shape, pow2=False)
    padded = tuple((l, padded_size(n)) for l, n in real.sizes)
    return Einsum(data, weight, output, padded)


def patch_output(equation: str, x, weight, window) -> np.ndarray:
    """The padded integer output table einsum(equation, patches(x), weight) (the claim's tensor)."""
    geometry = PatchGeometry.of(np.shape(x), window)
    spec = _patch_spec(equation, geometry, np.shape(weight))
    x = np.asarray(x, dtype=np.int64)
    view = np.zeros(geometry.view_shape, dtype=np.int64)
    rows, cols = geometry.positions(0), geometry.positions(1)
    xg = x.reshape(x.shape[0], geometry.groups, -1, *x.shape[2:])
    for u in range(geometry.kernel[0]):
        for v in range(geometry.kernel[1]):
            i_ok, j_ok = np.flatnonzero(rows[u] >= 0), np.flatnonzero(cols[v] >= 0)
            view[:, :, :, u, v][:, :, :, i_ok[:, None], j_ok[None, :]] = \
                xg[:, :, :, rows[u][i_ok][:, None], cols[v][j_ok][None, :]]
    y = np.einsum(equation, view, np.asarray(weight, dtype=np.int64))
    return np.pad(y, [(0, spec.size[l] - n) for l, n in zip(spec.output, y.shape)])


def _x_padded_shape(geometry: PatchGeometry) -> tuple:
    return tuple(padded_size(n) for n in geometry.x_shape)


def _gather_table(geometry: PatchGeometry, r_view: np.ndarray, eq_b: np.ndarray) -> np.ndarray:
    """G[p] = sum_{real v, gather(v) = p} R[v] over X's padded shape, with R[b, ...] = eq_b[b] R'[...] and R' an
    ext tensor over the real (g, c, u, v, i, j): the scatter of R' (per kernel offset, i -> row is injective),
    then the outer product with eq_b (W has no batch letter, so the batch factor splits off)."""
    b, c, h, w = geometry.x_shape
    g, cg, kh, kw = geometry.view_shape[1:5]
    acc = np.zeros((g, cg, h, w, F.EXT_DEGREE), dtype=np.uint64)
    rows, cols = geometry.positions(0), geometry.positions(1)
    for u in range(kh):
        for v in range(kw):
            i_ok, j_ok = np.flatnonzero(rows[u] >= 0), np.flatnonzero(cols[v] >= 0)
            part = r_view[:, :, u, v][:, :, i_ok][:, :, :, j_ok]
            acc[:, :, rows[u][i_ok][:, None], cols[v][j_ok][None, :]] += part  # < kh kw 2^31: no overflow
    acc = (acc % np.uint64(F.P)).reshape(1, c, h, w, F.EXT_DEGREE)
    full = np.zeros(_x_padded_shape(geometry) + (F.EXT_DEGREE,), dtype=np.uint64)
    full[:b, :c, :h, :w] = F.ext_mul(acc, eq_b[:b, None, None, None, :])
    return full.reshape(-1, F.EXT_DEGREE)


def masked_eq(point, positions) -> np.ndarray:
    """eq(point, pos) for an integer array of positions (-1: zero)."""
    table = eq_table(point)
    out = table[np.maximum(positions, 0)]
    out[positions < 0] = 0
    return out


def _m_factors(geometry: PatchGeometry, spec: Einsum, r: dict, rho: dict) -> list:
    """Factors of M[q] = sum_{real v} eq(rho, gather(v)) prod_{l in out} eq(r_l, l) (summed to W's letters q):
    eq(rho, gather(v)) = Zb[b] Zc[g, c] Zh[u, i] Zw[v, j], each zero off the real view and the image."""
    size = spec.size
    vb, g, cg = geometry.view_shape[:3]

    def padded(array, letters):
        full = np.zeros(tuple(size[l] for l in letters) + (F.EXT_DEGREE,), dtype=np.uint64)
        full[tuple(slice(0, n) for n in array.shape[:-1])] = array
        return full

    zb = padded(eq_table(rho["b"])[:vb], "b")
    zc = padded(eq_table(rho["c"])[:g * cg].reshape(g, cg, F.EXT_DEGREE), "gc")
    zh = padded(masked_eq(rho["h"], geometry.positions(0)), "ui")
    zw = padded(masked_eq(rho["w"], geometry.positions(1)), "vj")
    return [(zb, "b"), (zc, "gc"), (zh, "ui"), (zw, "vj")] + [(eq_table(r[l]), l) for l in spec.output]


def _m_table(geometry: PatchGeometry, spec: Einsum, r: dict, rho: dict) -> np.ndarray:
    """M as the flat table over the padded weight's layout (the prover's factor)."""
    m = _contract(_m_factors(geometry, spec, r, rho), spec.weight, spec.size)
    return _arrange(m, spec.weight, spec.weight[::-1], spec.size)


def _m_evaluate(geometry: PatchGeometry, spec: Einsum, r: dict, rho: dict, sigma) -> np.ndarray:
    """M~(sigma) by components, O(|b| + |g||c| + kh Ho + kw Wo + sum of W's letter sizes) for a conv."""
    parts = _contract_parts(_m_factors(geometry, spec, r, rho), spec.weight, spec.size)
    return _parts_evaluate(parts, split_point(sigma, spec.weight, spec.bits))


@dataclass(frozen=True, eq=False)
class PatchProof:
    """Sumcheck over X's bits (X~ G_r~), then over W's bits (W~ M~)."""

    x_sumcheck: SumcheckProof
    x_eval: np.ndarray
    gather_eval: np.ndarray
    w_sumcheck: SumcheckProof
    weight_eval: np.ndarray


def _x_point_parts(geometry: PatchGeometry, point) -> dict:
    bits = dict(zip("bchw", (padded_size(n).bit_length() - 1 for n in geometry.x_shape)))
    return split_point(point, "bchw", bits.get)


def patch_claim_reduction(equation: str, x, weight, window, claim: Claim, transcript, label: str = "patches",
                          *, strict: bool = True):
    """Prove Y~(claim.point) = claim.value for Y = einsum(equation, patches(x), weight) (:func:`patch_output`).

    ``x`` (B, C, H, W) and ``weight`` are the real (unpadded) integer tensors. Returns (PatchProof,
    x Claim on the padded (B, C, H, W) table, weight Claim on the padded weight table)."""
    geometry = PatchGeometry.of(np.shape(x), window)
    spec = _patch_spec(equation, geometry, np.shape(weight))
    r = split_point(claim.point, spec.output, spec.bits)
    w_real = _field(weight)
    w_table = _field(pad_operand(weight))
    real = dict(zip(VIEW, geometry.view_shape))
    real.update(zip(spec.weight, w_real.shape))
    eqs = [(eq_table(r[l])[:real[l]], l) for l in spec.output if l != "b"]
    r_view = _contract([(w_real, spec.weight)] + eqs, VIEW[1:], real)  # R' over the real view, no batch
    gather = _gather_table(geometry, r_view, eq_table(r["b"]))
    x_table = _field(pad_operand(x)).reshape(-1)
    sc1, rho, evals = prove_sumcheck([(1, [x_table, gather])], claim.value, transcript, f"{label}.x", strict=strict)
    x_eval, gather_eval = evals[0]
    transcript.absorb(f"{label}.x_evals", [x_eval, gather_eval])
    m = _m_table(geometry, spec, r, _x_point_parts(geometry, rho))
    sc2, sigma, evals2 = prove_sumcheck([(1, [w_table.reshape(-1), m])], gather_eval, transcript, f"{label}.w",
                                        strict=strict)
    weight_eval = evals2[0][0]
    transcript.absorb(f"{label}.w_eval", weight_eval)
    proof = PatchProof(sc1, x_eval, gather_eval, sc2, weight_eval)
    return proof, Claim(rho, x_eval), Claim(sigma, weight_eval)


def verify_patches(equation: str, x_shape, weight_shape, window, claim: Claim, proof: PatchProof, transcript,
                   label: str = "patches", *, public_weight=None):
    """Check a :class:`PatchProof`; returns (x Claim, weight Claim) or raises ProofRejected. The verifier builds
    M~(sigma) by its factor groups (see the module docstring); ``public_weight`` settles W itself (pools)."""
    geometry = PatchGeometry.of(x_shape, window)
    spec = _patch_spec(equation, geometry, weight_shape)
    for name in ("x_eval", "gather_eval", "weight_eval"):
        check_ext(getattr(proof, name), label, name)
    r = split_point(claim.point, spec.output, spec.bits)
    x_vars = sum(padded_size(n).bit_length() - 1 for n in geometry.x_shape)
    sub1 = verify_sumcheck(proof.x_sumcheck, claim.value, x_vars, 2, transcript, f"{label}.x")
    sub1.check(F.ext_mul(proof.x_eval, proof.gather_eval), f"{label}.x")
    transcript.absorb(f"{label}.x_evals", [proof.x_eval, proof.gather_eval])
    w_vars = sum(spec.bits(l) for l in spec.weight)
    sub2 = verify_sumcheck(proof.w_sumcheck, proof.gather_eval, w_vars, 2, transcript, f"{label}.w")
    m_value = _m_evaluate(geometry, spec, r, _x_point_parts(geometry, sub1.point), sub2.point)
    sub2.check(F.ext_mul(proof.weight_eval, m_value), f"{label}.w")
    transcript.absorb(f"{label}.w_eval", proof.weight_eval)
    weight_claim = Claim(sub2.point, proof.weight_eval)
    if public_weight is not None:
        settle_public(weight_claim, pad_operand(public_weight), label)
    return Claim(sub1.point, proof.x_eval), weight_claim


# ---------------------------------------------------------------------------------------- bias, residual
def valid_eval(parts: dict, real: dict, letters: str) -> np.ndarray:
    """prod_{l in letters} sum_{i < real_l} eq(r_l, i): the MLE of the real region's indicator."""
    value = F.ext_one()
    for letter in letters:
        value = F.ext_mul(value, prefix_sum_of_eq(parts[letter], real[letter]))
    return value


def bias_claim_reduction(claim: Claim, output: str, real_shape, bias_letters: str, bias_eval) -> tuple:
    """Y = Z + bias broadcast over the real region: Y~(r) = Z~(r) + b~(r_bias) prod_{other l} valid_l~(r_l).

    Both prover and verifier call it (the prover with b~ computed, the verifier with the sent or own value).
    Returns (Z Claim, bias Claim)."""
    real = dict(zip(output, (int(n) for n in real_shape)))
    bits = {l: padded_size(n).bit_length() - 1 for l, n in real.items()}
    parts = split_point(claim.point, output, bits.get)
    other = "".join(l for l in output if l not in bias_letters)
    z_value = F.ext_sub(claim.value, F.ext_mul(check_ext(bias_eval, "bias", "bias_eval"),
                                               valid_eval(parts, real, other)))
    return Claim(claim.point, z_value), Claim(join_point(parts, bias_letters), np.asarray(bias_eval))


def residual_claim_reduction(claim: Claim, first_eval) -> tuple:
    """Y = Z1 + Z2: Y~(r) = Z1~(r) + Z2~(r); the prover sends Z1~(r), Z2~(r) is implied. Returns both Claims."""
    first_eval = check_ext(first_eval, "residual", "first_eval")
    return Claim(claim.point, first_eval), Claim(claim.point, F.ext_sub(claim.value, first_eval))


# ---------------------------------------------------------------------------------- reshape, claim merging
def padded_positions(shape) -> np.ndarray:
    """Index in the per-axis power-of-two padded layout of every real entry of ``shape``, in row-major order."""
    shape = tuple(int(n) for n in shape)
    padded_shape = tuple(padded_size(n) for n in shape)
    return np.ravel_multi_index(np.unravel_index(np.arange(math.prod(shape)), shape), padded_shape)


def _padded_size(shape) -> int:
    return math.prod(padded_size(n) for n in shape)


def reshape_is_free(x_shape, y_shape) -> bool:
    """Whether Y = reshape(X) has the same padded table as X (a claim passes through unchanged)."""
    return _padded_size(x_shape) == _padded_size(y_shape) and \
        np.array_equal(padded_positions(x_shape), padded_positions(y_shape))


@dataclass(frozen=True, eq=False)
class GatherProof:
    """Sumcheck over X's bits of X~ G_r~ (a reshape, or several claims merged into one), then X~(rho)."""

    sumcheck: SumcheckProof
    x_eval: np.ndarray


def _gather_weights(x_shape, y_shape, point) -> np.ndarray:
    """G_r over X's padded layout: G[pos_x(n)] = eq(r, pos_y(n)) for the n-th real entry (row-major)."""
    table = F.ext_zero(_padded_size(x_shape))
    table[padded_positions(x_shape)] = eq_table(point)[padded_positions(y_shape)]
    return table


def reshape_claim_reduction(x_table, x_shape, y_shape, claim: Claim, transcript, label: str = "reshape",
                            *, strict: bool = True):
    """Y = reshape(X) (row-major, both per-axis padded): Y~(r) = sum_p X[p] G_r[p] with
    G_r[pos_x(n)] = eq(r, pos_y(n)), one degree-2 sumcheck over X's bits. Returns (GatherProof or None when
    the layouts coincide, Claim on X)."""
    if reshape_is_free(x_shape, y_shape):
        return None, claim
    gather = _gather_weights(x_shape, y_shape, claim.point)
    sumcheck, rho, evals = prove_sumcheck([(1, [_field(x_table).reshape(-1), gather])], claim.value, transcript,
                                          label, strict=strict)
    transcript.absorb(f"{label}.x_eval", evals[0][0])
    return GatherProof(sumcheck, evals[0][0]), Claim(rho, evals[0][0])


def verify_reshape(x_shape, y_shape, claim: Claim, proof, transcript, label: str = "reshape") -> Claim:
    """Check a reshape's :class:`GatherProof` (None when free); the verifier sums eq(rho, pos_x) eq(r, pos_y)
    over the real entries (O(|X|)). Returns the claim on X."""
    if reshape_is_free(x_shape, y_shape):
        require(proof is None, "a reshape of the same padded layout carries no proof", label)
        return claim
    require(isinstance(proof, GatherProof), "reshape proof missing", label)
    x_eval = check_ext(proof.x_eval, label, "x_eval")
    k = int(math.log2(_padded_size(x_shape)))
    sub = verify_sumcheck(proof.sumcheck, claim.value, k, 2, transcript, label)
    g_value = F.ext_sum(F.ext_mul(eq_table(sub.point)[padded_positions(x_shape)],
                                  eq_table(claim.point)[padded_positions(y_shape)]), axis=0)
    sub.check(F.ext_mul(x_eval, g_value), label)
    transcript.absorb(f"{label}.x_eval", x_eval)
    return Claim(sub.point, x_eval)


def square_claim_reduction(x_table, claim: Claim, transcript, label: str = "square", *, strict: bool = True):
    """Z = X * X entrywise (same padded layout): Z~(r) = sum_p eq(r, p) X[p]^2, one degree-3 sumcheck over X's
    bits (error <= 3k / p^4). Returns (GatherProof, Claim on X at the sumcheck's point)."""
    x = _field(x_table).reshape(-1)
    sumcheck, rho, evals = prove_sumcheck([(1, [eq_table(claim.point), x, x])], claim.value, transcript, label,
                                          strict=strict)
    transcript.absorb(f"{label}.x_eval", evals[0][1])
    return GatherProof(sumcheck, evals[0][1]), Claim(rho, evals[0][1])


def verify_square(claim: Claim, proof, transcript, label: str = "square") -> Claim:
    """Check :func:`square_claim_reduction`: the sumcheck's last value must be eq(r, rho) X~(rho)^2."""
    require(isinstance(proof, GatherProof), "square proof missing", label)
    x_eval = check_ext(proof.x_eval, label, "x_eval")
    point = np.asarray(claim.point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    sub = verify_sumcheck(proof.sumcheck, claim.value, point.shape[0], 3, transcript, label)
    sub.check(F.ext_mul(eq_eval(point, sub.point), F.ext_mul(x_eval, x_eval)), label)
    transcript.absorb(f"{label}.x_eval", x_eval)
    return Claim(sub.point, x_eval)


def merge_claims(table, claims, transcript, label: str = "merge", *, strict: bool = True, blocks=None):
    """Several claims T~(r_i) = v_i on one table as one: with alpha_i drawn after the claims,
    sum_p T[p] sum_i alpha_i eq(r_i, p) = sum_i alpha_i v_i, a degree-2 sumcheck ending at T~(rho)
    (error <= (2k + 1) / p^4). ``blocks`` (prover speed only): per claim (offset, k_i) when r_i is a packed
    point (:meth:`Packing.point`: its first k_i coordinates local, the rest the Boolean block selector), so
    eq(r_i, .) is eq(local, .) at the block and zero elsewhere. Returns (GatherProof, Claim)."""
    alphas = _merge_challenges(claims, transcript, label)
    weights = F.ext_zero(np.asarray(table).reshape(-1).shape[0])
    total = F.ext_zero()
    for i, (alpha, claim) in enumerate(zip(alphas, claims)):
        if blocks is None:
            weights = F.ext_add(weights, F.ext_mul(eq_table(claim.point), alpha))
        else:
            offset, k = blocks[i]
            part = weights[offset:offset + (1 << k)]
            part[:] = F.ext_add(part, F.ext_mul(eq_table(claim.point[:k]), alpha))
        total = F.ext_add(total, F.ext_mul(alpha, claim.value))
    sumcheck, rho, evals = prove_sumcheck([(1, [_field(table).reshape(-1), weights])], total, transcript, label,
                                          strict=strict)
    transcript.absorb(f"{label}.x_eval", evals[0][0])
    return GatherProof(sumcheck, evals[0][0]), Claim(rho, evals[0][0])


def _merge_challenges(claims, transcript, label):
    transcript.absorb(f"{label}.claims", [np.concatenate([np.asarray(c.point).reshape(-1),
                                                          np.asarray(c.value).reshape(-1)]) for c in claims])
    return transcript.challenge_ext_vector(f"{label}.alpha", len(claims))


def verify_merge(claims, proof, transcript, label: str = "merge") -> Claim:
    """Check :func:`merge_claims`' proof; returns the one claim (raises ProofRejected)."""
    require(isinstance(proof, GatherProof), "merge proof missing", label)
    x_eval = check_ext(proof.x_eval, label, "x_eval")
    alphas = _merge_challenges(claims, transcript, label)
    total, k = F.ext_zero(), claims[0].point.shape[0]
    for alpha, claim in zip(alphas, claims):
        total = F.ext_add(total, F.ext_mul(alpha, claim.value))
    sub = verify_sumcheck(proof.sumcheck, total, k, 2, transcript, label)
    g_value = F.ext_zero()
    for alpha, claim in zip(alphas, claims):
        g_value = F.ext_add(g_value, F.ext_mul(alpha, eq_eval(claim.point, sub.point)))
    sub.check(F.ext_mul(x_eval, g_value), label)
    transcript.absorb(f"{label}.x_eval", x_eval)
    return Claim(sub.point, x_eval)
