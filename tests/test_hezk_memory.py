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
