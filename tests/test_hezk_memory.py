"""hezk.memory: the opt-in allocator setting keeps freed blocks (a second array of the same size faults fewer
fresh pages in) and restores glibc's defaults. Measured in a fresh interpreter: other tests' libraries (JAX,
onnxruntime) may have tuned this process's allocator already."""
import json
import subprocess
import sys

import pytest

import hezk.memory

_PROBE = """
import json, resource
import numpy as np
import hezk.memory

def faults(nbytes):
    first = np.ones(nbytes // 8)
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = np.ones(nbytes // 8)          # every page written
    count = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del second
    return count

size = 96 << 20                            # above glibc's largest mmap threshold (32 MB): mmap'd by default
default = faults(size)
applied = hezk.memory.reuse_freed_memory()
kept = faults(size)
restored = hezk.memory.reuse_freed_memory(False)
print(json.dumps([default, applied, kept, restored, faults(size)]))
"""


@pytest.mark.skipif(hezk.memory._glibc() is None, reason="glibc only (elsewhere reuse_freed_memory is a no-op)")
def test_freed_blocks_are_reused_and_defaults_restored():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    default, applied, kept, restored, again = json.loads(out.stdout.strip().splitlines()[-1])
    assert applied is True and restored is True
    assert kept < default
    assert again > kept                    # restored: mmap'd and returned to the system again


def test_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(hezk.memory, "_glibc", lambda: None)
    assert hezk.memory.reuse_freed_memory() is False and hezk.memory.reuse_freed_memory(False) is False


_RELEASE = """
import json
import numpy as np
import hezk.memory

def resident():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))

blocks = [np.ones(12000) for _ in range(4000)]    # 96 KB each, under the mmap threshold: 384 MB of heap
top = blocks.pop()                                # the last one pins the heap's top: free() cannot trim it
del blocks
held = resident()
applied = hezk.memory.release_freed_memory()
print(json.dumps([held, resident(), applied, float(top.sum())]))
"""


@pytest.mark.skipif(hezk.memory._glibc() is None, reason="glibc only (elsewhere release_freed_memory is a no-op)")
def test_freed_heap_inside_is_given_back():
    """Free blocks below a live one stay resident after free() (glibc trims only the heap's top);
    ``release_freed_memory`` gives their pages back (the planner's transient maps before the keys are made)."""
    out = subprocess.run([sys.executable, "-c", _RELEASE], capture_output=True, text=True, timeout=120, check=True)
    held, released, applied, _ = json.loads(out.stdout.strip().splitlines()[-1])
    assert applied is True
    assert held - released > 300 << 20, (held, released)
