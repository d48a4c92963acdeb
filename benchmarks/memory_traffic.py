"""Memory traffic per CKKS operation: bytes the ring-level kernels read and write, against this machine's bandwidth.

For one operation (ct×ct + relinearize + rescale, one rotation, 8 hoisted rotations, one key switch, one
bootstrap) the arrays passed to and returned by the ring-level kernels are counted while the operation runs: the
kernels are wrapped at run time by counting proxies (``counting()``, a context manager that replaces the names in
the modules that call them and puts the originals back; ``crypto`` itself is not changed).  Kernels and kinds:

* NTT/INTT: ``RingContext.ntt`` and ``intt`` (reads the input limbs, writes the output);
* basis conversion: ``RingContext.convert``, ``keyswitch.CenteredConversion`` (ModUp), the mixed-radix
  correction of an exact divide-and-round (``divide_round_correction``: ModDown and rescale);
* mul/add/Barrett: the element-wise kernels (add, sub, neg, products, the tensor, fused multiply-adds, the
  double-hoisted plaintext products ``muladd_pair``);
* automorphism: ``permute_rows``, the permuted sums and the fused ModDown + permutation of a rotation;
* key-switch inner products: ``keyswitch`` 's Σ_j digit_j·key_j; digit rows and the key rows actually read
  (``src`` and ``key_rows``; uint32 keys), the lifted sums added and the two sums written;
* copies: ``RNSPoly.keep`` where it copies, ``np.concatenate`` and ``np.repeat`` in ``crypto.ring``,
  ``crypto.ckks.evaluator`` and ``crypto.ckks.bootstrap`` (their ``np`` replaced by a counting proxy);
* encode: residues of integer polynomials (``small_residues``, ``wide_residues_rows``).

A call's bytes are the memory its array arguments span (a broadcast column counts its k words, not k×N) plus the
bytes of the arrays it writes (its results and its in-place or ``out`` arguments); an in-place accumulator counts
twice (read and written).  Only the outermost wrapped call counts (``Traffic.nested`` records any call made inside
another, which would double count; the tests require none).  The bandwidth is one thread's streaming copy and
add of 256 MB arrays (best of 10, STREAM's convention: a copy moves 2×, an add 3× the array), and for each
operation the table prints bytes, bytes / bandwidth (the time a bandwidth-bound run would need), the measured
one-thread CPU time (best of N, counting off) and the fraction of it the bound explains.

Limits: API-level bytes are a lower bound.  A kernel's internal passes (the log N stages of a radix-2 NTT over
limbs larger than the cache, the running sums of an inner product re-read per digit), its constants (twiddle
tables, the keys' full rows where a kernel gathers a subset), write-allocate reads, cache misses and page faults
of fresh arrays are not counted, and numpy expressions outside the kernels (the encoder's float FFT, a
constant's ``repeat`` method, ``astype``) are not seen.  The bound is also optimistic in the other direction:
an array small enough to stay in cache between two kernels is counted twice though it never reaches DRAM (at
N = 2^14 one limb is 128 kB).  So the fraction says how far the operation is from streaming its arrays once per
kernel, not a measured DRAM traffic (use ``perf stat -e`` uncore counters for that).

    python benchmarks/memory_traffic.py [--preset N14] [--bootstrap] [--no-ops] [--repeats 3] [--kernels] [--smoke]

Measured 2026-12-06, one thread (HEZK_THREADS=1), two-core machine shared with other jobs.  Bytes are exact
and repeatable; the bandwidth is not (10.6-16.5 GB/s best-of-5 at load 4-8, other jobs streaming too), so the
bound's fraction moves with it.  N14 (top level, 7 Q levels + 3 P primes, dnum 5), at 16.44 GB/s (load 4.1) and
10.61 GB/s (load 5.4): ct×ct + relin + rescale 135.1 MB (NTT 31.2, conversion 15.6, mul/add 22.3, key-switch
inner products 66.1): bound 8.2 / 12.7 ms, measured 14.0 / 15.2 ms CPU, 0.59 / 0.84 of it; one rotation 122.3 MB
(automorphism 13.1, inner product 62.4): 0.50 / 0.78; 8 hoisted rotations 459.2 MB (inner products 213.9,
automorphism 104.9): 27.9 ms bound against 63.0 ms (0.44 / 0.62); one key switch 120.2 MB: 0.54 / 0.78; the
N = 2^12 toy bootstrap 4.52 GB: 0.54 / 0.79.  N16_BOOT (``--bootstrap``, load 4.8, 16.46 GB/s): one bootstrap
moves 140.6 GB (NTT/INTT 22.3, conversion 11.1, mul/add 64.5 of which the double-hoisted plaintext products
``muladd_pair`` 42.7 (their two accumulators read and written per diagonal), key-switch inner products 32.4,
automorphisms 9.6, copies 0.66): bound 8.54 s against 14.58 s CPU measured (best of 2): 0.59; peak RSS 9.8 GB.
Where the bound explains ~60% of the time, the rest is compute and the passes the count does not see; the largest
item to cut is the accumulators' traffic of the plaintext products: each reads and writes both accumulators (4 of
its 6.5 rows of traffic per limb, with the two baby parts and a uint32 diagonal), so k diagonals summed in one pass
would move 4/k + 2.5 rows per diagonal (k = 4: 46% less).  Done since (``keyswitch.muladd_pairs``: a giant step's
products in one pass, its sums written once; a Chebyshev leaf in one pass, ``mul_int_sum_rows``; the product's
factor, tensor and added part in one pass, ``tensor_add_rows``): the figures above are from before it; the smoke
bootstrap's table (``--smoke --kernels``) lists the new kernels.

Default: the N14 operations and a bootstrap of the insecure N = 2^12 literal of ``benchmarks/bootstrap.py``
(``--toy``); ``--bootstrap``: the N16_BOOT bootstrap instead (keys ~7.5 GB, peak ~10-11 GB: refused below 14 GB
available).  ``--smoke``: the TOY preset and an N = 2^10 bootstrap, one repeat (the tests' size).
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
import threading
import time
import types

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "HEZK_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

try:                                            # numpy >= 2
    from numpy.lib.array_utils import byte_bounds  # noqa: E402
except ImportError:                             # pragma: no cover
    byte_bounds = np.byte_bounds

KINDS = ("NTT/INTT", "basis conversion", "mul/add/Barrett", "automorphism", "key-switch inner product", "copies",
         "encode")


def spanned(a) -> int:
    """Bytes of memory an array argument spans: ``nbytes``, or less for a broadcast view (a (k, 1) column
    broadcast to (k, N) spans k words)."""
    if not isinstance(a, np.ndarray) or a.size == 0:
        return 0
    lo, hi = byte_bounds(a)
    return min(a.nbytes, hi - lo)


def _arrays(value):
    """The ndarrays in a result (an array, or a tuple/list of them)."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, np.ndarray)]
    data = getattr(value, "data", None)          # an RNSPoly (``keep``)
    return [data] if isinstance(data, np.ndarray) else []


class Traffic:
    """Bytes read and written per kernel kind (and per kernel name), thread-safe; ``nested`` counts wrapped calls
    made inside another wrapped call (not counted: they would count bytes twice)."""

    def __init__(self):
        self.read = dict.fromkeys(KINDS, 0)
        self.written = dict.fromkeys(KINDS, 0)
        self.calls = dict.fromkeys(KINDS, 0)
        self.by_kernel: dict[str, int] = {}
        self.nested: list[str] = []
        self._lock = threading.Lock()

    def add(self, kind: str, name: str, read: int, written: int) -> None:
        with self._lock:
            self.read[kind] += read
            self.written[kind] += written
            self.calls[kind] += 1
            self.by_kernel[name] = self.by_kernel.get(name, 0) + read + written

    def bytes(self, kind: str | None = None) -> int:
        """Bytes moved (read + written) of one kind, or of all."""
        kinds = KINDS if kind is None else (kind,)
        return sum(self.read[k] + self.written[k] for k in kinds)


class KernelSpec:
    """How a kernel's bytes are counted: its kind, its in-place arguments (read and written), its write-only
    arguments (``out``), or a function of the bound arguments and the result giving (read, written)."""

    def __init__(self, kind, inout=(), out=(), custom=None, copy_only=False):
        self.kind, self.inout, self.out, self.custom, self.copy_only = kind, tuple(inout), tuple(out), custom, copy_only


def _generic(spec: KernelSpec, bound: inspect.BoundArguments, result) -> tuple[int, int]:
    args = bound.arguments
    out_names = set(spec.out)
    if isinstance(args.get("init"), bool) and args["init"]:     # muladd_pair(init=True): accumulators only written
        out_names |= set(spec.inout)
    read = written = 0
    seen = set()

    def key(a):
        return (byte_bounds(a), a.dtype.str) if a.size else None

    for name, value in args.items():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for a in values:
            if not isinstance(a, np.ndarray) or a.size == 0:
                continue
            if name in out_names:
                written += spanned(a)
                seen.add(key(a))
            elif name in spec.inout:
                read += spanned(a)
                written += spanned(a)
                seen.add(key(a))
            else:
                read += spanned(a)
    for a in _arrays(result):
        if a.size and key(a) not in seen:        # an ``out`` argument returned is written once
            written += spanned(a)
            seen.add(key(a))
    return read, written


def _inner_product_bytes(bound: inspect.BoundArguments, result) -> tuple[int, int]:
    """The key-switching inner product: each digit's rows it reads (``src``: J × |ext| rows of N words, from the
    polynomial's own rows or the lifted ones), the key rows of its digits (``key_rows``, both parts), the lifted
    sums added (``add_b``, ``add_a``), the two sums written."""
    a = bound.arguments
    n = a["base"].shape[1]
    digit_rows = a["src"].size * n * a["base"].itemsize
    key_rows = 2 * len(a["digit_ids"]) * len(a["key_rows"]) * n * a["key_b"].itemsize
    added = spanned(a["add_b"]) + spanned(a["add_a"])
    written = spanned(a["out_b"]) + spanned(a["out_a"])
    return digit_rows + key_rows + added, written


def _int_sum_bytes(bound: inspect.BoundArguments, result) -> tuple[int, int]:
    """``mul_int_sum_rows``: the rows of each term it reads (the first rows of a term at a higher level), the sum
    written once."""
    a = bound.arguments
    out = a["out"]
    return len(a["xs"]) * out.nbytes, out.nbytes


def _keep_bytes(bound: inspect.BoundArguments, result) -> tuple[int, int]:
    """``RNSPoly.keep``: a view costs nothing, a copy reads and writes the kept rows."""
    src = bound.arguments["self"].data
    if np.shares_memory(result.data, src):
        return 0, 0
    return result.data.nbytes, result.data.nbytes


# (module, attribute) -> spec; a dotted attribute is a class method
KERNELS = {
    ("crypto.ring", "RingContext.ntt"): KernelSpec("NTT/INTT", out=("out",)),
    ("crypto.ring", "RingContext.intt"): KernelSpec("NTT/INTT", out=("out",)),
    ("crypto.ring", "RingContext.convert"): KernelSpec("basis conversion"),
    ("crypto.keyswitch", "CenteredConversion.__call__"): KernelSpec("basis conversion", out=("out",)),
    ("crypto.ring", "divide_round_correction"): KernelSpec("basis conversion", out=("out",)),
    ("crypto.ring", "addmod_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "submod_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "negmod_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "mulmod_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "mulmod_scalar_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "muladd_scalar_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "tensor_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ring", "tensor_add_rows"): KernelSpec("mul/add/Barrett", out=("d0", "d1", "d2")),
    ("crypto.ring", "muladd_rows"): KernelSpec("mul/add/Barrett", inout=("acc",)),
    ("crypto.ring", "permute_rows"): KernelSpec("automorphism"),
    ("crypto.ring", "muladd_permute_rows"): KernelSpec("automorphism"),
    ("crypto.ring", "wide_residues_rows"): KernelSpec("encode", out=("out",)),
    ("crypto.ring", "small_residues"): KernelSpec("encode", out=("out",)),
    ("crypto.ring", "RNSPoly.keep"): KernelSpec("copies", custom=_keep_bytes),
    ("crypto.keyswitch", "_inner_product"): KernelSpec("key-switch inner product", custom=_inner_product_bytes),
    ("crypto.keyswitch", "small_residues"): KernelSpec("encode", out=("out",)),
    ("crypto.keyswitch", "muladd_pair"): KernelSpec("mul/add/Barrett", inout=("acc_b", "acc_a")),
    ("crypto.keyswitch", "muladd_pairs"): KernelSpec("mul/add/Barrett", out=("acc_b", "acc_a")),
    ("crypto.keyswitch", "add_permuted_pair_into"): KernelSpec("automorphism", inout=("acc",)),
    ("crypto.ckks.evaluator", "mulmod_scalar_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ckks.evaluator", "muladd_scalar_rows"): KernelSpec("mul/add/Barrett"),
    ("crypto.ckks.evaluator", "muladd_pair"): KernelSpec("mul/add/Barrett", inout=("acc_b", "acc_a")),
    ("crypto.ckks.evaluator", "muladd_pairs"): KernelSpec("mul/add/Barrett", out=("acc_b", "acc_a")),
    ("crypto.ckks.evaluator", "mul_int_sum_rows"): KernelSpec("mul/add/Barrett", custom=_int_sum_bytes),
    ("crypto.ckks.evaluator", "permute_rows"): KernelSpec("automorphism"),
    ("crypto.ckks.evaluator", "add_permuted_into"): KernelSpec("automorphism", inout=("acc",)),
    ("crypto.ckks.evaluator", "add_permuted_pair_into"): KernelSpec("automorphism", inout=("acc",)),
}
#: modules whose ``np`` is replaced by a proxy counting these functions as copies
COPY_MODULES = ("crypto.ring", "crypto.ckks.evaluator", "crypto.ckks.bootstrap")
COPY_FUNCTIONS = ("concatenate", "repeat")
#: callables of the kernel modules seen in the calling modules that are deliberately not wrapped, with the reason
NOT_KERNELS = {
    "crypto.keyswitch": {"mulshoup": "numba-internal (called from compiled code only)",
                         "reduce_small": "numba-internal", "make_switching_key": "keygen",
                         "uniform_part": "keygen", "galois_element": "no arrays", "conjugation_element": "no arrays",
                         "expand_uniform": "keygen", "shoup_precompute": "constants",
                         "inv_mod": "constants", "parallel": "thread pool (the kernels it runs are counted)",
                         "read_only": "a view (no data moved)"},
    "crypto.ring": {"shoup_precompute": "constants", "crt_compose": "reference view (to_ints)",
                    "centered": "reference view", "inv_mod": "constants", "parallel": "thread pool",
                    "bit_reverse_indices": "constants", "get_backend": "no arrays", "int_residues":
                    "calls small_residues / wide_residues_rows (counted)"},
    "crypto.ckks.evaluator": {"shoup_precompute": "constants", "parallel": "thread pool",
                              "galois_element": "no arrays", "conjugation_element": "no arrays",
                              "int_residues": "calls the ring's residue kernels (counted)",
                              "as_slot_vector": "encoder (floats)", "subring_period": "encoder (floats)",
                              "align": "calls the evaluator", "plan_for": "planning", "as_config": "planning",
                              "check_level": "no arrays", "check_same_context": "no arrays"},
    "crypto.ckks.encapsulation": {"make_switching_key": "keygen"},
}


def resolve(module_name: str, attr: str):
    """(owner object, attribute name, current value) of a KERNELS entry; a clear error where it is gone."""
    import importlib
    module = importlib.import_module(module_name)
    owner, name = module, attr
    if "." in attr:
        cls, name = attr.split(".")
        owner = getattr(module, cls, None)
        if owner is None:
            raise LookupError(f"memory_traffic: {module_name}.{cls} is gone: update KERNELS")
    if name not in vars(owner):
        raise LookupError(f"memory_traffic: {module_name}.{attr} is gone: update KERNELS")
    return owner, name, vars(owner)[name]


def _signature(fn):
    return inspect.signature(getattr(fn, "py_func", fn))


class _CountingNumpy(types.ModuleType):
    """``numpy`` for one module, with ``COPY_FUNCTIONS`` counted as copies."""

    def __init__(self, wrap):
        super().__init__("numpy")
        for name in COPY_FUNCTIONS:
            setattr(self, name, wrap(getattr(np, name), f"np.{name}"))

    def __getattr__(self, name):
        return getattr(np, name)


@contextlib.contextmanager
def counting(traffic: Traffic | None = None):
    """Count the bytes of every kernel call into ``traffic`` (a new ``Traffic`` if None) while the block runs; the
    originals are put back on exit (also on an error)."""
    traffic = Traffic() if traffic is None else traffic
    depth = threading.local()

    def wrap(fn, label, spec=None, is_method=False):
        sig = _signature(fn)
        kind = spec.kind if spec is not None else "copies"

        def counted(*args, **kwargs):
            level = getattr(depth, "level", 0)
            if level:
                traffic.nested.append(label)
                return fn(*args, **kwargs)
            depth.level = 1
            try:
                result = fn(*args, **kwargs)
            finally:
                depth.level = 0
            if spec is None:             # np.concatenate / np.repeat: the inputs read, the result written
                sources = args[0] if label == "np.concatenate" else args[:1]
                read = sum(spanned(a) for a in sources if isinstance(a, np.ndarray))
                traffic.add(kind, label, read, spanned(result))
                return result
            bound = sig.bind(*args, **kwargs)
            read, written = (spec.custom or (lambda b, r: _generic(spec, b, r)))(bound, result)
            traffic.add(kind, label, read, written)
            return result

        counted.__wrapped__ = fn
        return counted

    import importlib
    restore = []
    try:
        for (module_name, attr), spec in KERNELS.items():
            owner, name, fn = resolve(module_name, attr)
            restore.append((owner, name, fn))
            setattr(owner, name, wrap(fn, f"{module_name}.{attr}", spec))
        for module_name in COPY_MODULES:
            module = importlib.import_module(module_name)
            if module.__dict__.get("np") is np and not _compiles(module):
                restore.append((module, "np", np))
                module.np = _CountingNumpy(lambda fn, label: wrap(fn, label))
        yield traffic
    finally:
        for owner, name, fn in reversed(restore):
            setattr(owner, name, fn)


def _compiles(module) -> bool:
    """Whether a module defines numba-compiled functions (they read its ``np`` when they compile: not proxied)."""
    return any(hasattr(v, "py_func") and getattr(v.py_func, "__module__", None) == module.__name__
               for v in vars(module).values())


def unwrapped_kernels() -> list[str]:
    """Callables from the kernel modules (``crypto._ntt_kernels``, ``crypto._cross_kernels``, ``crypto.keyswitch``'s
    own functions) visible in the modules that call them and neither wrapped by ``KERNELS`` nor listed in
    ``NOT_KERNELS``: a kernel the count would miss."""
    import importlib
    kernel_modules = ("crypto._ntt_kernels", "crypto._cross_kernels", "crypto.keyswitch")
    wrapped = {(m, a) for m, a in KERNELS}
    missing = []
    for module_name in ("crypto.ring", "crypto.keyswitch", "crypto.ckks.evaluator", "crypto.ckks.bootstrap",
                        "crypto.ckks.encapsulation", "crypto.ckks.linear"):
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            fn = getattr(value, "py_func", value)
            if not callable(value) or isinstance(value, type) or not hasattr(fn, "__module__"):
                continue
            if fn.__module__ not in kernel_modules or name.startswith("__"):
                continue
            if module_name == "crypto.keyswitch" and hasattr(value, "py_func"):
                continue            # compiled: called from the keyswitch's Python kernels, which are wrapped
            if (module_name, name) in wrapped or name in NOT_KERNELS.get(module_name, {}):
                continue
            if name.startswith("_") and module_name != "crypto.keyswitch":
                continue
            if name in ("_anonymous", "_frozen", "_barrett_constants", "_key_rows"):
                continue            # allocation, views, compiled helpers
            missing.append(f"{module_name}.{name}")
    return sorted(missing)


# --- bandwidth ---------------------------------------------------------------------------------------------------

def bandwidth(megabytes: int = 256, repeats: int = 5) -> dict:
    """One thread's streaming bandwidth (GB/s, 10^9 bytes) of a copy (2 × the array moved) and an add (3 ×) of
    ``megabytes`` MB uint64 arrays, the best of ``repeats`` (wall time)."""
    count = megabytes * 2**20 // 8
    a = np.arange(count, dtype=np.uint64)
    b = np.ones(count, dtype=np.uint64)
    c = np.zeros(count, dtype=np.uint64)          # all touched before timing
    best = {"copy": float("inf"), "add": float("inf")}
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(c, a)
        best["copy"] = min(best["copy"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        np.add(a, b, out=c)
        best["add"] = min(best["add"], time.perf_counter() - t0)
    return {"copy": 2 * a.nbytes / best["copy"] / 1e9, "add": 3 * a.nbytes / best["add"] / 1e9}


# --- operations ----------------------------------------------------------------------------------------------------

def operations(preset: str, seed: int = 1) -> dict:
    """({name: zero-argument callable}, params) for ct×ct + relin + rescale, a rotation, 8 hoisted rotations and a
    key switch at the top level of ``preset`` (a name or a literal dict)."""
    from crypto import CKKSContext, CKKSParameters
    params = CKKSParameters.from_literal(preset) if isinstance(preset, dict) else CKKSParameters.preset(preset)
    steps = list(range(1, 9))
    ctx = CKKSContext.keygen(params, rotations=steps, seed=seed)
    rng = np.random.default_rng(seed)
    a = ctx.encrypt(rng.uniform(-1, 1, params.slots))
    b = ctx.encrypt(rng.uniform(-1, 1, params.slots))
    ev = ctx.evaluator
    c1 = a.parts[1]
    return {"ct*ct+relin+rescale": lambda: ev.mul_rescale(a, b),
            "rotation": lambda: ev.rotate(a, 1),
            "8 hoisted rotations": lambda: ev.rotate_hoisted(a, steps),
            "key switch": lambda: ev.switcher.switch(c1, ev.relin_key)}, params


def bootstrap_operation(which: str, seed: int = 1):
    """(name, callable, params) of one bootstrap: ``which`` 'N16_BOOT' (the benchmark's settings: no arcsin,
    sparse-secret encapsulation) or 'toy' / 'smoke' (the insecure literal of ``benchmarks/bootstrap.py`` at N = 2^12
    or 2^10).  One untimed bootstrap is run first (the setup: it encodes and keeps the diagonals)."""
    from benchmarks.bootstrap import TOY
    from crypto import CKKSContext, CKKSParameters
    from crypto.ckks.bootstrap import BootstrapConfig
    if which == "N16_BOOT":
        params, config = CKKSParameters.preset("N16_BOOT"), BootstrapConfig(arcsin=False)
    else:
        literal = dict(TOY, log_n=12 if which == "toy" else 10)
        params, config = CKKSParameters.from_literal(literal), BootstrapConfig()
    ctx = CKKSContext.keygen(params, seed=seed, bootstrap=config)
    ct = ctx.encrypt(np.random.default_rng(seed).uniform(-1, 1, params.slots), level=0)
    ev = ctx.evaluator
    ev.bootstrap(ct)
    return f"bootstrap ({which}, N=2^{params.n.bit_length() - 1})", lambda: ev.bootstrap(ct), params


def measure(fn, repeats: int, warmup: bool = True) -> tuple[Traffic, float]:
    """(bytes counted over one call, best one-thread CPU seconds of ``repeats`` calls with counting off); one
    untimed call first with ``warmup``."""
    if warmup:
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    with counting() as traffic:
        fn()
    return traffic, best


def row(name: str, traffic: Traffic, seconds: float, gbps: float) -> list:
    moved = traffic.bytes()
    bound = moved / (gbps * 1e9)
    return [name, moved / 1e6] + [traffic.bytes(k) / 1e6 for k in KINDS] + [1e3 * bound, 1e3 * seconds,
                                                                            bound / seconds]


HEADERS = ["operation", "MB moved", "NTT", "conv", "mul/add", "autom", "KS inner", "copies", "encode",
           "bound ms", "measured ms", "bound/measured"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="N14")
    ap.add_argument("--bootstrap", action="store_true", help="the N16_BOOT bootstrap (needs ~11 GB)")
    ap.add_argument("--no-ops", action="store_true", help="the bootstrap only")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="TOY preset and an N = 2^10 bootstrap, one repeat")
    ap.add_argument("--min-available-gb", type=float, default=14.0)
    ap.add_argument("--kernels", action="store_true", help="also print each operation's MB by kernel")
    args = ap.parse_args(argv)
    import hezk
    from benchmarks._timing import print_table
    hezk.set_threads(1)
    if args.smoke:
        args.preset, args.repeats = "TOY", 1
    bw = bandwidth(64 if args.smoke else 256, 2 if args.smoke else 10)
    gbps = max(bw.values())
    print(f"bandwidth, one thread: copy {bw['copy']:.2f} GB/s, add {bw['add']:.2f} GB/s (bound uses {gbps:.2f})")
    rows, results = [], {}
    if not args.no_ops:
        ops, params = operations(args.preset)
        for name, fn in ops.items():
            traffic, seconds = measure(fn, args.repeats)
            results[f"{name} ({args.preset})"] = (traffic, seconds)
            rows.append(row(f"{name} ({args.preset})", traffic, seconds, gbps))
    which = "smoke" if args.smoke else "N16_BOOT" if args.bootstrap else "toy"
    if which == "N16_BOOT":
        from benchmarks.bootstrap import available_gb
        if available_gb() < args.min_available_gb:
            raise SystemExit(f"N16_BOOT needs ~11 GB: {available_gb():.1f} GB available, below "
                             f"--min-available-gb={args.min_available_gb}")
    name, fn, _ = bootstrap_operation(which)
    traffic, seconds = measure(fn, args.repeats, warmup=False)     # bootstrap_operation ran the setup bootstrap
    results[name] = (traffic, seconds)
    rows.append(row(name, traffic, seconds, gbps))
    print_table(f"bytes moved by the ring kernels (MB, 10^6), one thread, load {os.getloadavg()[0]:.1f}",
                HEADERS, rows)
    if args.kernels:
        for name, (traffic, _) in results.items():
            kernels = sorted(traffic.by_kernel.items(), key=lambda item: -item[1])
            print_table(f"{name}: MB by kernel", ["kernel", "MB"], [[k, v / 1e6] for k, v in kernels])
    return {"bandwidth": bw, "results": results}


if __name__ == "__main__":
    main()
