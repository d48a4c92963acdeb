"""Keeping freed memory in the process: an explicit, process-wide allocator setting for long computations.

hezk's engines allocate whole ciphertext parts and proof tables (25-250 MB each) per operation. glibc's
malloc serves blocks above its mmap threshold (128 KB, raised on the fly up to 32 MB) with fresh mmap'd pages
and returns them on free (and trims the heap's free top), so every such array is zeroed by the kernel again on
first touch: a bootstrap at N = 2^16 takes 0.4-0.6 million page faults, 1-2 s of system time on top of 12.5 s
of computation (measured, ``benchmarks/bootstrap.py``). :func:`reuse_freed_memory` makes malloc serve every
block from its heap and keep what is freed (``mallopt(M_MMAP_MAX, 0)``, ``mallopt(M_TRIM_THRESHOLD, max)``),
so the next array of that size reuses pages already faulted in: about 0.1 million faults and 0.2-0.6 s. The
peak RSS is unchanged (measured); the RSS no longer drops after a computation, until
``reuse_freed_memory(False)`` sets glibc's default values back (mmap'd blocks again, a 128 KB trim
threshold, no longer raised on the fly) and trims.

Opt-in: a library must not change its host process's allocator, so nothing hezk imports calls it; applications,
servers and benchmarks do (the same as the environment variables ``MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=...`` set before the process starts), and so do hezk's own programs (the ``hezk`` command,
``python -m hezk|tensor_ops|proofs``) through :func:`for_a_program`, unless ``HEZK_KEEP_FREED_MEMORY=0``. Not
glibc (macOS, Windows, musl): a no-op. The programs also turn numpy's transparent huge page hint off
(:func:`numpy_huge_pages`, unless ``HEZK_HUGE_PAGES=1``): on a kernel that compacts memory synchronously for
hinted regions, every fresh proof table paid a compaction at its first touch.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4          # mallopt parameters (malloc.h)
_DEFAULT_TRIM, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_KEEP_ALL = 2 ** 31 - 1


@functools.cache
def _glibc():
    """The C library when it is glibc (it has mallopt and malloc_trim), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):
        return None


def reuse_freed_memory(enable: bool = True) -> bool:
    """Serve every allocation from malloc's heap and keep freed blocks for reuse (``enable``), or restore
    glibc's default values (``enable=False``: M_MMAP_MAX 65536, M_TRIM_THRESHOLD 128 KB, fixed from then on) and
    return the free heap to the system. True when applied (glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    if enable:
        return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_ALL))
    applied = bool(libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)) and bool(libc.mallopt(_M_TRIM_THRESHOLD,
                                                                                      _DEFAULT_TRIM))
    libc.malloc_trim(0)
    return applied


#: set to 0, hezk's programs keep glibc's default allocator
PROGRAM_SETTING = "HEZK_KEEP_FREED_MEMORY"
#: set to 1, hezk's programs leave numpy's huge page hint on (:func:`numpy_huge_pages`)
HUGE_PAGES_SETTING = "HEZK_HUGE_PAGES"


def for_a_program() -> bool:
    """:func:`reuse_freed_memory` for a process that is one of hezk's programs, unless the environment variable
    ``HEZK_KEEP_FREED_MEMORY`` is ``0``: two prover threads faulting fresh pages at once contend in the kernel
    (a 1M-parameter MLP proof at 2 threads took 0.92x its one-thread time with the default allocator, 1.74x
    faster with freed memory kept; an N16_BOOT bootstrap 15.1 -> 13.9 s on one thread). Also numpy's huge page
    hint off (:func:`numpy_huge_pages`), unless ``HEZK_HUGE_PAGES`` is ``1``. True when freed memory is kept."""
    if os.environ.get(HUGE_PAGES_SETTING, "0").strip() != "1":
        if "numpy" in sys.modules:
            numpy_huge_pages(False)
        else:  # numpy reads it at import (importing numpy here would slow every command's start)
            os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    if os.environ.get(PROGRAM_SETTING, "1").strip() == "0":
        return False
    return reuse_freed_memory()


def numpy_huge_pages(enable: bool) -> bool | None:
    """Turn numpy's ``madvise(MADV_HUGEPAGE)`` hint on its large arrays (4 MB and up) on or off, process-wide;
    the previous setting (None where this numpy has no such setting). Where the kernel's transparent huge pages
    are in ``madvise`` mode with ``defrag=madvise`` (this project's machines), each first touch of a hinted
    array's 2 MB page is served by a synchronous compaction: the hiding Basefold proof of a GPT-2-small block,
    the first in its process (its 128-256 MB tables all fresh pages), took 12.2 s with the hint (3.3 s of it
    system time) and 9.3 s without (0.8 s system); CKKS keygen and operations at N16 measured the same either way
    (their arrays are reused), and so did the BERT-tiny layer's encrypted run (386.7 s with, 388.0 s without).
    Off, pages are the kernel's default 4 KB ones. Before numpy is imported, its environment variable
    ``NUMPY_MADVISE_HUGEPAGE=0`` does the same (:func:`for_a_program`)."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    return None if setter is None else bool(setter(bool(enable)))


def release_freed_memory() -> bool:
    """Return the free memory of malloc's heap to the system now (glibc's ``malloc_trim(0)``, which also gives
    back free pages inside the heap, not only at its top): for a process done with a large transient phase
    before it holds its keys, e.g. the planner of a ResNet-20, whose sparse maps leave 1.3 GB free in the heap,
    resident until later arrays reuse it (measured: 2.43 GB resident after planning, 1.17 GB after this call;
    the local infer's peak moved little, 12.17 -> 12.12 GB, as the server's packed maps refill most of it).
    True when applied (glibc); elsewhere a no-op."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def available_memory() -> int | None:
    """Bytes of ``MemAvailable`` in /proc/meminfo, read now (None where there is no such file): what a command may
    plan to use (``tensor_ops.model_plan``'s budget, the hiding Basefold copies of ``proofs.layers.reusable``)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
