"""Sparse affine maps and the slot layouts of the packed server path.

``SparseMap``: an affine layer as a sorted COO matrix (never the dense ``n_out x n_in`` array: a CIFAR
convolution 3x32x32 -> 16x32x32 has 442k nonzeros of 50M entries); ``compose`` folds consecutive layers.

``packed_stages`` lowers a ``Sequential`` to what the server evaluates: each run of affine layers between
two activations is one ``PackedAffine`` stage on a slot vector where tensor element e of sample b sits at
slot ``b*block + pos[e]``. With positions in slot space the stage is the sparse matrix S[pos_out(r),
pos_in(c)] = M[r, c], and its nonzero diagonals d_k (k = pos_in(c) - pos_out(r)) are the rotations of the
diagonal method (Halevi and Shoup, CRYPTO 2014). A convolution's lowering picks its output layout:
- "rotations": each output pixel stays at the slot of the input pixel it is centred on (spatial strides
  times the conv stride) and the output channels fill the free slots (multiplexed packing, Lee et al.,
  ICML 2022), so only about (C_in + C_out) * kh * kw distinct offsets occur;
- "dense": the output flattened in C order (the dense matrix's nonzero diagonals, about n_in + n_out);
- "patches" (a convolution that reads the model input only): the client packs the im2col patches of its
  input, K = C*kh*kw rows of P = Ho*Wo pixels (slot k*P + p holds pixel k of patch p; a pixel in several
  patches is duplicated, free on the client; padding is zero), so the convolution is the matrix product
  out[o, p] = sum_k W[o, k] X[k, p]: its only offsets are (k - o) * P, K + O - 1 diagonals (the im2col
  encoding of Benaissa et al., "TenSEAL", 2021, as a slot layout), at K * P slots per sample.
An average pool with kernel = stride (and a global average pool) that starts a run is a window sum by
rotations (``presum``: v += rot(v, step), no level) read at the windows' anchors by the next map.

Residual blocks y = s(x) + f(x) (``walk_layers``: a ``Fork`` before f's layers, a ``Join`` after them, s affine)
become a ``PackedFork`` (the ciphertext of x is kept) and, where the run of affine layers after f's last
activation ends, a ``PackedJoin``: the kept ciphertext through the affine map T from it to that run's output
(the affine prefix of the run x was taken in, the shortcut s, and the affine layers after the join, all folded)
laid out at the run's output positions, added to the run's output. T runs on the skip at one level above the
branch's output, its diagonals encoded at the scale that makes its rescaled product land exactly on the
branch's scale (no scale alignment by rounding, no level of the main path), as in He et al., "Deep residual
learning", CVPR 2016, with the skip ciphertext level-aligned as in Lee et al., ICML 2022 (ResNet on CKKS).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from crypto.errors import ParameterError, ShapeError

PROBE_ENTRIES = 1 << 22  # basis entries probed at once when a layer has no sparse form of its own


@dataclass(frozen=True, eq=False)
class SparseMap:
    """An (n_out, n_in) matrix as canonical COO: sorted by (row, col), no duplicates, no zeros."""

    shape: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray

    @classmethod
    def from_coo(cls, shape, rows, cols, vals) -> "SparseMap":
        n_out, n_in = (int(s) for s in shape)
        rows, cols = np.asarray(rows, dtype=np.int64).ravel(), np.asarray(cols, dtype=np.int64).ravel()
        vals = np.asarray(vals, dtype=np.float64).ravel()
        unique, summed = _canonical(rows * n_in + cols, vals)
        keep = summed != 0
        unique, summed = unique[keep], summed[keep]
        r, c = unique // max(n_in, 1), unique % max(n_in, 1)
        return cls._frozen((n_out, n_in), r, c, summed)

    @classmethod
    def _frozen(cls, shape, rows, cols, vals) -> "SparseMap":
        for array in (rows, cols, vals):
            array.setflags(write=False)
        return cls(shape, rows, cols, vals)

    @classmethod
    def from_dense(cls, matrix) -> "SparseMap":
        matrix = np.asarray(matrix, dtype=np.float64)
        rows, cols = np.nonzero(matrix)
        return cls.from_coo(matrix.shape, rows, cols, matrix[rows, cols])

    @classmethod
    def diagonal(cls, values) -> "SparseMap":
        values = np.asarray(values, dtype=np.float64).ravel()
        index = np.arange(len(values))
        return cls.from_coo((len(values), len(values)), index, index, values)

    @property
    def nnz(self) -> int:
        return len(self.vals)

    def scaled(self, factor: float) -> "SparseMap":
        """factor * self: the entries stay sorted and distinct, so only the products that became 0 are dropped
        (``from_coo`` of the scaled entries gives the same map, the naive twin in the tests)."""
        vals = np.asarray(self.vals * factor, dtype=np.float64).ravel()
        keep = vals != 0
        if keep.all():
            return SparseMap._frozen(self.shape, self.rows, self.cols, vals)
        return SparseMap._frozen(self.shape, self.rows[keep], self.cols[keep], vals[keep])

    def compose(self, first: "SparseMap") -> "SparseMap":
        """self @ first (``first`` applied first)."""
        if first.shape[0] != self.shape[1]:
            raise ShapeError(f"cannot compose maps of shapes {self.shape} and {first.shape}")
        f_rows, f_cols, f_vals = first.rows, first.cols, first.vals    # canonical: already sorted by row
        start = np.searchsorted(f_rows, np.arange(first.shape[0]))
        count = np.bincount(f_rows, minlength=first.shape[0])
        repeats = count[self.cols]
        a = np.repeat(np.arange(self.nnz), repeats)
        offsets = np.arange(len(a)) - np.repeat(np.cumsum(repeats) - repeats, repeats)
        b = start[self.cols[a]] + offsets
        return SparseMap.from_coo((self.shape[0], first.shape[1]), self.rows[a], f_cols[b], self.vals[a] * f_vals[b])

    def apply(self, x) -> np.ndarray:
        """x (batch, n_in) -> x @ M.T, (batch, n_out): by scipy's CSR product where scipy is installed (the
        rows are already sorted), else in batch chunks of at most ``PROBE_ENTRIES`` products."""
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros((x.shape[0], self.shape[0]))
        if not self.nnz:
            return out
        try:
            from scipy.sparse import csr_matrix
        except ImportError:
            csr_matrix = None
        if csr_matrix is not None:
            indptr = np.searchsorted(self.rows, np.arange(self.shape[0] + 1))
            return np.asarray((csr_matrix((self.vals, self.cols, indptr), shape=self.shape) @ x.T).T)
        starts = np.flatnonzero(np.r_[True, self.rows[1:] != self.rows[:-1]])
        chunk = max(1, PROBE_ENTRIES // self.nnz)
        for first in range(0, x.shape[0], chunk):
            products = x[first:first + chunk, self.cols] * self.vals
            out[first:first + chunk, self.rows[starts]] = np.add.reduceat(products, starts, axis=1)
        return out

    def toarray(self) -> np.ndarray:
        dense = np.zeros(self.shape)
        dense[self.rows, self.cols] = self.vals
        return dense

    def plus(self, other: "SparseMap") -> "SparseMap":
        """self + other (same shape)."""
        if other.shape != self.shape:
            raise ShapeError(f"cannot add maps of shapes {self.shape} and {other.shape}")
        return SparseMap.from_coo(self.shape, np.r_[self.rows, other.rows], np.r_[self.cols, other.cols],
                                  np.r_[self.vals, other.vals])

    def is_identity(self) -> bool:
        return self.shape[0] == self.shape[1] and self.nnz == self.shape[0] \
            and np.array_equal(self.rows, self.cols) and np.all(self.vals == 1.0)


def _canonical(key, vals) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, the sum of ``vals`` per key) as ``np.unique(key, return_inverse=True)`` and
    ``np.bincount(inverse, weights=vals)`` give them, bit for bit, without their full sort and inverse: keys
    already strictly increasing (a convolution's or a scaled map's) are returned as they are; otherwise one
    stable sort, and the per-key sums (by ``bincount``, in the original order within a key: the same
    additions) only where a key repeats."""
    if len(key) > 1 and not np.all(key[1:] > key[:-1]):
        order = np.argsort(key, kind="stable")
        key, vals = key[order], vals[order]
        new = np.empty(len(key), dtype=bool)
        new[0], new[1:] = True, key[1:] != key[:-1]
        if not new.all():
            group = np.cumsum(new) - 1
            key, vals = key[new], np.bincount(group, weights=vals, minlength=int(group[-1]) + 1)
            return key, vals
    # bincount adds each single value to 0.0: the same value, with -0.0 as 0.0 (dropped as a zero anyway)
    return key, vals + 0.0


def distinct_ints(values) -> np.ndarray:
    """``np.unique`` of integers (sorted, distinct, int64) by a bincount over their range when that range is
    at most a few times their count (a stage's diagonal offsets span about its slots), else by np.unique."""
    values = np.asarray(values).ravel()
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    low, high = int(values.min()), int(values.max())
    if high - low > 4 * len(values) + 1024:
        return np.unique(values).astype(np.int64)
    return np.flatnonzero(np.bincount(values - low, minlength=high - low + 1)).astype(np.int64) + low


def probe_sparse(forward, input_shape, output_shape) -> tuple[SparseMap, np.ndarray]:
    """(M, b) of an affine ``forward`` on one sample, probed with basis vectors a chunk at a time."""
    n_in, n_out = math.prod(input_shape), math.prod(output_shape)
    zero = np.asarray(forward(np.zeros((1, *input_shape)))).reshape(-1)
    chunk = max(1, PROBE_ENTRIES // max(n_in, n_out))
    rows, cols, vals = [], [], []
    for first in range(0, n_in, chunk):
        count = min(chunk, n_in - first)
        basis = np.zeros((count, n_in))
        basis[np.arange(count), first + np.arange(count)] = 1.0
        columns = np.asarray(forward(basis.reshape(count, *input_shape))).reshape(count, -1) - zero
        c, r = np.nonzero(columns)
        rows.append(r)
        cols.append(c + first)
        vals.append(columns[c, r])
    return SparseMap.from_coo((n_out, n_in), np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)), zero


#: entries (the product of an einsum's index sizes) above which ``node_sparse`` leaves a node to probing
DIRECT_ENTRIES = 1 << 24


def einsum_sparse(equation, weight, view_shape) -> SparseMap:
    """The linear map x -> einsum(equation, x, weight) of one sample (``equation`` 'b...,W->b...', the batch
    b dropped) as a sparse (outputs, view entries) map, built from the weight itself: every assignment of the
    equation's indices contributes W[its weight indices] at (its output index, its data index), summed where
    they repeat (an index only on W is summed over; zeros are dropped). A convolution's map has exactly its
    nonzeros this way: O/G * C/G * kh * kw * Ho * Wo * G entries, never the dense n_out x n_in probe."""
    operands, result = equation.split("->")
    data, kernel = (part.replace("b", "", 1) if i == 0 else part for i, part in enumerate(operands.split(",")))
    result = result.replace("b", "", 1)
    weight = np.asarray(weight, dtype=np.float64)
    sizes = dict(zip(data, view_shape))
    sizes.update(zip(kernel, weight.shape))
    letters = list(dict.fromkeys(data + kernel + result))
    grids = np.meshgrid(*(np.arange(sizes[a]) for a in letters), indexing="ij", sparse=True)
    index = dict(zip(letters, grids))
    full = tuple(sizes[a] for a in letters)

    def flat(word, shape):
        if not word:
            return np.zeros(full, dtype=np.int64)
        return np.broadcast_to(np.ravel_multi_index(tuple(index[a] for a in word), shape) if len(word) > 1
                               else index[word[0]], full)

    vals = np.broadcast_to(weight[tuple(index[a] for a in kernel)], full) if kernel else np.broadcast_to(weight, full)
    keep = vals != 0
    n_out, n_in = math.prod(sizes[a] for a in result), math.prod(view_shape)
    return SparseMap.from_coo((n_out, n_in), flat(result, tuple(sizes[a] for a in result))[keep],
                              flat(data, tuple(view_shape))[keep], vals[keep])


def node_sparse(node, input_shape):
    """(M, b) of a model-description node that is affine on one sample of ``input_shape`` (a contraction over
    a ``Patches`` view or none, an elementwise affine, a reshape or a transpose), built directly from its
    constants: the einsum's map (``einsum_sparse``) composed with the view's gather (the input entry each
    window entry reads, padding read as zero); None for another node or one too large to build at once
    (the caller then probes it). The probing twin is ``probe_sparse(node.forward, ...)``."""
    shape = tuple(int(d) for d in input_shape)
    n_in = math.prod(shape)
    out_shape = tuple(node.output_shape((shape,)))
    if node.kind == "contraction":
        view = node.view_shape(shape)
        letters = set(node.equation.replace(",", "").replace("->", "").replace("b", ""))
        sizes = dict(zip(node.data_subscripts[1:], view))
        sizes.update(zip(node.equation.split(",")[1].split("->")[0], node.weight.shape))
        if math.prod(sizes[a] for a in letters) > DIRECT_ENTRIES:
            return None
        matrix = einsum_sparse(node.equation, node.weight, view)
        if node.patches is not None:        # the view's entry -> the input entry it reads (-1: padding)
            gather = node.patches.apply(np.arange(1, n_in + 1).reshape(1, *shape), fill=0).reshape(-1) - 1
            cols = gather[matrix.cols]
            inside = cols >= 0
            matrix = SparseMap.from_coo((matrix.shape[0], n_in), matrix.rows[inside], cols[inside],
                                        matrix.vals[inside])
        bias = np.zeros(matrix.shape[0]) if node.bias is None else \
            np.broadcast_to(node.bias, out_shape).reshape(-1).astype(np.float64)
        return matrix, np.array(bias)
    if node.kind == "affine":
        scale = np.ones(n_in) if node.scale is None else np.broadcast_to(node.scale, shape).reshape(-1)
        shift = np.zeros(n_in) if node.shift is None else np.broadcast_to(node.shift, shape).reshape(-1)
        return SparseMap.diagonal(scale), np.array(shift, dtype=np.float64)
    if node.kind in ("reshape", "transpose"):
        source = np.arange(n_in).reshape(shape)
        source = source.transpose(node.perm) if node.kind == "transpose" else source
        return SparseMap.from_coo((n_in, n_in), np.arange(n_in), source.reshape(-1), np.ones(n_in)), np.zeros(n_in)
    return None


def conv_sparse(weight, input_shape, stride, padding) -> SparseMap:
    """The cross-correlation of ``nn.Conv2d`` as a sparse (O*Ho*Wo, C*H*W) map."""
    o_, c_, kh, kw = weight.shape
    _, h, w = input_shape
    ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    o, c, u, v, i, j = np.meshgrid(*(np.arange(n) for n in (o_, c_, kh, kw, ho, wo)), indexing="ij", sparse=True)
    y, x = stride * i + u - padding, stride * j + v - padding
    valid = (y >= 0) & (y < h) & (x >= 0) & (x < w)
    shape = (o_, c_, kh, kw, ho, wo)
    valid = np.broadcast_to(valid, shape)
    rows = np.broadcast_to((o * ho + i) * wo + j, shape)[valid]
    cols = np.broadcast_to((c * h + y) * w + x, shape)[valid]
    vals = np.broadcast_to(weight[:, :, :, :, None, None], shape)[valid]
    return SparseMap.from_coo((o_ * ho * wo, c_ * h * w), rows, cols, vals)


def patch_gather(input_shape, kernel, stride, padding) -> np.ndarray:
    """The patches layout of a (C, H, W) sample for a kh x kw convolution: g[k*P + p] = the C-order index
    of pixel k = (c, u, v) of patch p = (i, j), i.e. (c, s i + u - pad, s j + v - pad), or -1 in the padding."""
    c_, h, w = (int(d) for d in input_shape)
    kh, kw = (int(d) for d in kernel)
    ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    c, u, v, i, j = np.meshgrid(*(np.arange(n) for n in (c_, kh, kw, ho, wo)), indexing="ij", sparse=True)
    y, x = stride * i + u - padding, stride * j + v - padding
    inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
    return np.where(inside, (c * h + y) * w + x, -1).reshape(-1)


def gather_patches(x, gather) -> np.ndarray:
    """Samples x (batch, *shape) in the patches layout ``gather`` (``patch_gather``): (batch, len(gather))."""
    flat = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return np.where(gather >= 0, flat[:, np.maximum(gather, 0)], 0.0)


def patches_sparse(weight, input_shape, stride, padding) -> SparseMap:
    """The convolution on the patches layout: the (O*P, K*P) map (o*P + p, k*P + p) -> W[o, k]."""
    o_ = weight.shape[0]
    k_ = math.prod(weight.shape[1:])
    _, h, w = input_shape
    kh, kw = weight.shape[2:]
    p_ = ((h + 2 * padding - kh) // stride + 1) * ((w + 2 * padding - kw) // stride + 1)
    o, k, p = np.meshgrid(np.arange(o_), np.arange(k_), np.arange(p_), indexing="ij", sparse=True)
    shape = (o_, k_, p_)
    vals = np.broadcast_to(weight.reshape(o_, k_)[:, :, None], shape)
    return SparseMap.from_coo((o_ * p_, k_ * p_), np.broadcast_to(o * p_ + p, shape), np.broadcast_to(k * p_ + p, shape),
                              vals)


def pool_sparse(kernel, stride, input_shape) -> SparseMap:
    """Average pooling (no padding) as a sparse map."""
    c_, h, w = input_shape
    ho, wo = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    c, u, v, i, j = np.meshgrid(*(np.arange(n) for n in (c_, kernel, kernel, ho, wo)), indexing="ij")
    rows = (c * ho + i) * wo + j
    cols = (c * h + stride * i + u) * w + stride * j + v
    return SparseMap.from_coo((c_ * ho * wo, c_ * h * w), rows, cols, np.full(rows.shape, 1.0 / kernel ** 2))


# ---------------------------------------------------------------------------------------------------------
# Packed stages.

@dataclass(frozen=True, eq=False)
class PackedAffine:
    """One affine stage in slot space: ``presum`` window-sum rotations, then y = sum_k d_k * rot(v, k) + bias.

    ``rows``/``offsets``/``vals``: the nonzeros of the slot-space matrix (output slot, k = input slot -
    output slot, value); ``bias``: (slot, value) pairs; positions are within one sample's block."""

    presum: tuple[int, ...]
    rows: np.ndarray
    offsets: np.ndarray
    vals: np.ndarray
    bias_slots: np.ndarray
    bias_vals: np.ndarray
    n_in: int
    n_out: int
    depth = 1

    @property
    def distinct_offsets(self) -> np.ndarray:
        return distinct_ints(self.offsets)

    def diagonals(self, block: int) -> dict[int, np.ndarray]:
        """{k: d_k} with d_k a vector of ``block`` slots."""
        return {k: make() for k, make in self.diagonal_makers(block).items()}

    def diagonal_makers(self, block: int) -> dict:
        """{k: a callable giving d_k}: the diagonals made one at a time (a stage's nonzeros, not its
        diagonals x block slots, are held)."""
        order = np.argsort(self.offsets, kind="stable")
        offsets, rows, vals = self.offsets[order], self.rows[order], self.vals[order]
        bounds = np.flatnonzero(np.r_[True, offsets[1:] != offsets[:-1], True])

        def make(start, stop):
            d = np.zeros(block)
            np.add.at(d, rows[start:stop], vals[start:stop])
            return d

        return {int(offsets[start]): (lambda a=start, b=stop: make(a, b))
                for start, stop in zip(bounds[:-1], bounds[1:])}

    def bias_vector(self, block: int) -> np.ndarray:
        bias = np.zeros(block)
        bias[self.bias_slots] = self.bias_vals
        return bias

    def apply_slots(self, v, block: int) -> np.ndarray:
        """The naive twin of the encrypted stage on plain slot vectors (rotations with np.roll)."""
        v = np.asarray(v, dtype=np.float64)
        for step in self.presum:
            v = v + np.roll(v, -step)
        out = np.zeros_like(v)
        for k, d in self.diagonals(block).items():
            out += np.tile(d, len(v) // block) * np.roll(v, -k)
        return out + np.tile(self.bias_vector(block), len(v) // block)


@dataclass(frozen=True, eq=False)
class PackedFork:
    """Keep the current ciphertext for a residual block's skip connection (no operation, no level)."""

    n: int
    depth = 0
    kind = "fork"


@dataclass(frozen=True, eq=False)
class PackedJoin(PackedAffine):
    """Add the ciphertext kept by the matching ``PackedFork`` (innermost first) through the affine map T of the
    ``PackedAffine`` fields (positions: T's input at the kept ciphertext's slots, its output at the current
    one's): v + T(skip). No level on the main path (T spends one of the skip's)."""

    depth = 0


@dataclass(frozen=True, eq=False)
class Fork:
    """Marker of ``walk_layers``: a residual block starts here (its input is kept)."""

    residual: object
    kind = "fork"
    affine_layer = False

    def output_shape(self, input_shape):
        return tuple(input_shape)

    def einsum_text(self, shape, out_shape):
        skip = "the identity" if not self.residual.shortcut else \
            "the affine shortcut " + " -> ".join(layer.kind for layer in self.residual.shortcut)
        return f"residual block: keep x for the skip connection ({skip})"


@dataclass(frozen=True, eq=False)
class Join:
    """Marker of ``walk_layers``: a residual block ends here, y = shortcut(x) + f(x)."""

    residual: object
    kind = "join"
    affine_layer = False

    def output_shape(self, input_shape):
        return tuple(input_shape)

    def einsum_text(self, shape, out_shape):
        return ("residual add y = s(x) + f(x): the kept x through the shortcut and the affine layers after it, "
                "re-laid out to f's output positions at one level above it and scale-matched exactly, then added")


def walk_layers(layers) -> tuple:
    """``layers`` with every residual block that is not affine (``layer.kind == "residual"``, with
    ``.layers`` and ``.shortcut``) expanded as ``Fork``, its branch's layers (walked), ``Join``; an affine
    residual block stays one layer (it folds: y = (S + F) x + b)."""
    out = []
    for layer in layers:
        if layer.kind == "residual" and not layer.affine_layer:
            out += [Fork(layer), *walk_layers(layer.layers), Join(layer)]
        else:
            out.append(layer)
    return tuple(out)


#: the attribute under which a layer memoises its sparse maps per input shape (``Conv2d.sparse``,
#: ``GraphNode.sparse``): planning packs each layer once per lowering tried, instead of once per plan
SPARSE_MEMO = "_sparse_memo"


def release_sparse_maps(layers) -> int:
    """Drop the sparse maps ``layers`` memoised for planning (``SPARSE_MEMO``; residual blocks' branches and
    shortcuts included) and return how many were dropped. A server calls it once its packed stages are built
    (``inference.EncryptedModel``): they hold the slot-space maps it evaluates, and the layers' maps were a
    second copy of the model's nonzeros (24 bytes each: 0.85 GB of a ResNet-20's). A later plan rebuilds them."""
    dropped = 0
    for layer in layers:
        memo = vars(layer).pop(SPARSE_MEMO, None) if hasattr(layer, "__dict__") else None
        dropped += len(memo) if memo else 0
        dropped += release_sparse_maps(getattr(layer, "layers", ()) or ())
        dropped += release_sparse_maps(getattr(layer, "shortcut", ()) or ())
    return dropped


def _regular(positions, shape):
    """(base per channel, R, Q) when positions of a (C, H, W) tensor are base[c] + i R + j Q, else None."""
    if len(shape) != 3:
        return None
    pos = positions.reshape(shape)
    c, h, w = shape
    base = pos[:, 0, 0]
    row = int(pos[0, 1, 0] - pos[0, 0, 0]) if h > 1 else 0
    col = int(pos[0, 0, 1] - pos[0, 0, 0]) if w > 1 else 0
    expect = base[:, None, None] + np.arange(h)[:, None] * row + np.arange(w)[None, :] * col
    return (base, row, col) if np.array_equal(expect, pos) else None


def _window_steps(extent, step):
    """Rotation steps summing ``extent`` consecutive positions ``step`` apart: doubling for a power of two
    (v += rot(v, step), then 2*step, ...), else one chain of extent - 1 steps of ``step`` each."""
    if extent <= 1 or step == 0:
        return ()
    if extent & (extent - 1) == 0:
        return tuple(step << e for e in range(extent.bit_length() - 1))
    return None


def pool_window(layer, shape):
    """(kh, kw, stride_h, stride_w) of an average pool without padding whose windows tile the input, or None."""
    if layer.kind == "avgpool2d" and layer.kernel_size == layer.stride and len(shape) == 3:
        return layer.kernel_size, layer.kernel_size, layer.stride, layer.stride
    node = getattr(layer, "node", None)
    if node is not None and node.op == "GlobalAveragePool" and len(shape) == 3:
        return shape[1], shape[2], shape[1], shape[2]
    return None


def _presum(positions, shape, window):
    """(steps, anchor positions of the pooled tensor) for a window sum by rotations, or None."""
    regular = _regular(positions, shape)
    if regular is None:
        return None
    base, row, col = regular
    kh, kw, sh, sw = window
    c, h, w = shape
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    cols, rows = _window_steps(kw, col), _window_steps(kh, row)
    if cols is None or rows is None:
        return None
    anchors = base[:, None, None] + (sh * np.arange(ho))[:, None] * row + (sw * np.arange(wo))[None, :] * col
    return cols + rows, anchors.reshape(-1), (c, ho, wo)


def _aligned(conv, in_positions, in_shape, out_shape, limit):
    """Output positions keeping each output pixel at the slot of its input pixel, channels in free slots."""
    regular = _regular(in_positions, in_shape)
    if regular is None:
        return None
    base, row, col = regular
    _, h, w = in_shape
    o_, ho, wo = out_shape
    kh, kw = conv.weight.shape[2:]
    s, p = conv.stride, conv.padding
    a0 = min(max((kh - 1) // 2 - p, 0), h - 1 - s * (ho - 1))
    a1 = min(max((kw - 1) // 2 - p, 0), w - 1 - s * (wo - 1))
    if a0 < 0 or a1 < 0:
        return None
    spatial = ((s * np.arange(ho) + a0)[:, None] * row + (s * np.arange(wo) + a1)[None, :] * col).reshape(-1)
    return place_copies(spatial - spatial.min(), o_, limit)


def place_copies(pattern, count, limit) -> np.ndarray | None:
    """``count`` copies c_0 < c_1 < ... of the slot ``pattern`` (non-negative) shifted into
    [0, limit) without overlap, each at the first shift after the previous that overlaps no copy placed (the
    first-fit scan of ``naive_place_copies`` in the tests, which tests every shift against the slots used):
    a shift c overlaps the copy at c' exactly when c - c' is a difference of two pattern slots, so each copy
    blocks c' + those differences and the next shift is the first unblocked one. None where they do not fit."""
    pattern = np.asarray(pattern, dtype=np.int64)
    span = int(pattern.max())
    top = int(limit) - span
    overlap = np.zeros(2 * span + 1, dtype=bool)        # d + span: pattern and pattern + d share a slot
    step = max(1, PROBE_ENTRIES // len(pattern))
    for first in range(0, len(pattern), step):
        overlap[(pattern[first:first + step, None] - pattern[None, :]).ravel() + span] = True
    differences = np.flatnonzero(overlap) - span
    blocked = np.zeros(max(top, 0), dtype=bool)
    out, candidate = [], 0
    for _ in range(int(count)):
        free = ~blocked[candidate:]
        if not len(free) or not free.any():
            return None
        candidate += int(free.argmax())
        shifts = candidate + differences
        blocked[shifts[(shifts >= 0) & (shifts < top)]] = True
        out.append(candidate + pattern)
    return np.concatenate(out)


def _pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


LOWERINGS = ("rotations", "dense", "patches")


def input_layout(model, input_shape, choices):
    """The patches layout's (kh, kw, stride, padding) when ``choices`` lowers the convolution that reads the
    model input by "patches", else None (samples travel flattened in C order)."""
    layers = walk_layers(model.layers)
    for index, lowering in (choices or {}).items():
        if lowering == "patches":
            layer = layers[index]
            return (*(int(d) for d in layer.weight.shape[2:]), int(layer.stride), int(layer.padding))
    return None


def _run_map(run, normalise=None, shift=True):
    """(M, b): the affine map of a run of layers from the slots ``run["run_in"]`` (after its window sums),
    normalised by an activation's (center, radius) (``shift``: subtract the center, once per sum)."""
    n_in = len(run["run_in"])
    pending = run["pending"]
    matrix, bias = pending if pending is not None else (SparseMap.diagonal(np.ones(n_in)), np.zeros(n_in))
    if run["scale"] is not None:
        matrix = matrix.compose(SparseMap.diagonal(run["scale"]))
    if normalise is not None:
        center, radius = normalise
        matrix, bias = matrix.scaled(1.0 / radius), (bias - (center if shift else 0.0)) / radius
    return matrix, bias


def _packed(cls, run, matrix, bias, out):
    """The ``cls`` (PackedAffine / PackedJoin) of (M, b) from ``run``'s input slots to the slots ``out``."""
    rows = out[matrix.rows]
    offsets = run["run_in"][matrix.cols] - rows
    nonzero = bias != 0
    return cls(tuple(run["presum"]), rows, offsets, matrix.vals, out[nonzero], bias[nonzero],
               len(run["run_in"]), matrix.shape[0])


def _compose(run, matrix, bias):
    """Fold the affine layer (matrix, bias) into ``run``'s pending map."""
    if run["pending"] is None:
        run["pending"] = (matrix, bias)
    else:
        old, old_bias = run["pending"]
        run["pending"] = (matrix.compose(old), matrix.apply(old_bias[None])[0] + bias)


def packed_stages(model, input_shape, choices, activation_stage):
    """(stages, block): ``PackedAffine`` / ``activation_stage(poly)`` / ``PackedFork`` / ``PackedJoin`` objects
    of ``model`` on samples of ``input_shape`` and the slots one sample needs; ``choices``: {index in
    ``walk_layers(model.layers)``: "rotations" | "dense" | "patches"} for the convolutions (default
    "rotations"; "patches" only for a convolution reading the model input: the samples then arrive in
    ``patch_gather``'s layout)."""
    choices = {} if choices is None else dict(choices)
    layers = walk_layers(model.layers)
    for index, lowering in choices.items():
        if lowering not in LOWERINGS or not 0 <= index < len(layers) or layers[index].kind != "conv2d":
            raise ParameterError(f"choices[{index!r}]={lowering!r}: a lowering of a conv2d layer must be one of "
                                 f"{LOWERINGS}")
    shape = tuple(input_shape)
    positions = np.arange(math.prod(shape))
    stages, state, forks = [], {}, []
    extent = [len(positions)]

    def start_run():
        state.update(presum=[], run_in=positions, scale=None, pending=None, aligned=None, joins=[])

    def emit(final, normalise=None):
        nonlocal positions
        matrix, bias = _run_map(state, normalise)
        elementwise = matrix.shape[0] == matrix.shape[1] and np.array_equal(matrix.rows, matrix.cols)
        if final:
            out = np.arange(matrix.shape[0])
        elif state["aligned"] is not None:
            out = state["aligned"]
        elif elementwise:
            out = state["run_in"]
        else:
            out = np.arange(matrix.shape[0])
        if final or state["presum"] or not matrix.is_identity() or np.any(bias) \
                or not np.array_equal(out, state["run_in"]):
            stages.append(_packed(PackedAffine, state, matrix, bias, out))
        for join in state["joins"]:  # innermost block first: the kept ciphertexts are a stack
            fork_index = join.pop("fork")
            if sum(stage.depth for stage in stages[fork_index + 1:]) < 1:
                raise ParameterError(f"a residual block whose branch uses no level (stages {fork_index + 1}.."
                                     f"{len(stages) - 1}) cannot be scale-matched: fold it as an affine block")
            skip, skip_bias = _run_map(join, normalise, shift=False)
            stages.append(_packed(PackedJoin, join, skip, skip_bias, out))
        state["joins"] = []
        positions = out
        extent.append(int(out.max()) + 1 if len(out) else 1)

    start_run()
    for index, layer in enumerate(layers):
        if layer.kind == "fork":
            if state["joins"]:  # the value here is a sum of kept ciphertexts: materialise it first
                emit(False)
                start_run()
            forks.append((dict(state, presum=list(state["presum"]), joins=None), len(stages), shape))
            stages.append(PackedFork(len(positions)))
            continue
        if layer.kind == "join":
            run, fork_index, fork_shape = forks.pop()
            for sub in layer.residual.shortcut:
                _compose(run, *sub.sparse(fork_shape))
                fork_shape = tuple(sub.output_shape(fork_shape))
            if fork_shape != shape:
                raise ShapeError(f"residual block: the shortcut gives {fork_shape}, the branch {shape}")
            run["fork"] = fork_index
            state["joins"].append(run)
            continue
        if layer.affine_layer:
            out_shape = tuple(layer.output_shape(shape))
            window = pool_window(layer, shape)
            if window is not None and state["pending"] is None and state["scale"] is None:
                summed = _presum(state["run_in"], shape, window)
                if summed is not None:
                    steps, anchors, _ = summed
                    state["presum"] += list(steps)
                    state["run_in"] = anchors
                    state["scale"] = np.full(len(anchors), 1.0 / (window[0] * window[1]))
                    if state["joins"]:  # the skips are pooled by their maps
                        matrix, bias = layer.sparse(shape)
                        for join in state["joins"]:
                            _compose(join, matrix, np.zeros_like(bias))
                    shape = out_shape
                    continue
            matrix, bias = layer.sparse(shape)
            for join in state["joins"]:  # the layer acts on the sum: its bias is added once, by the main path
                _compose(join, matrix, np.zeros_like(bias))
            if choices.get(index) == "patches":
                reads_input = not stages and state["pending"] is None and state["scale"] is None \
                    and not state["presum"] and shape == tuple(input_shape)
                if not reads_input:
                    raise ParameterError(f"choices[{index}]='patches': layer {index} does not read the model input "
                                         f"(only the first convolution's input can be packed as patches)")
                matrix = patches_sparse(layer.weight, shape, layer.stride, layer.padding)
                state["run_in"] = np.arange(matrix.shape[1])
                extent.append(matrix.shape[1])
            if state["pending"] is None:
                if layer.kind == "conv2d" and choices.get(index, "rotations") == "rotations":
                    limit = _pow2(max(int(state["run_in"].max()) + 1, math.prod(out_shape)))
                    state["aligned"] = _aligned(layer, state["run_in"], shape, out_shape, limit)
                state["pending"] = (matrix, bias)
            else:
                _compose(state, matrix, bias)
                if layer.kind not in ("batchnorm", "flatten"):
                    state["aligned"] = None
            shape = out_shape
            continue
        poly = layer.poly
        normalise = None if (poly.center, poly.radius) == (0.0, 1.0) else (poly.center, poly.radius)
        emit(False, normalise)
        stages.append(activation_stage(poly))
        start_run()
    emit(True)
    return tuple(stages), _pow2(max(extent))
