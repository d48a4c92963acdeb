"""hezk_memory: the opt-in allocator setting keeps freed blocks (a second array of the same size faults fewer
fresh pages in) and restores glibc's defaults."""
import resource
import sys

import numpy as np
import pytest

import hezk_memory


def _faults_of_second_array(nbytes: int) -> int:
    first = np.ones(nbytes // 8)
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = np.ones(nbytes // 8)          # touched: every page written
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del second
    return faults


@pytest.mark.skipif(hezk_memory._glibc() is None, reason="glibc only (elsewhere reuse_freed_memory is a no-op)")
def test_freed_blocks_are_reused_and_defaults_restored():
    size = 96 << 20                        # above glibc's largest mmap threshold (32 MB): mmap'd by default
    default = _faults_of_second_array(size)
    try:
        assert hezk_memory.reuse_freed_memory() is True
        kept = _faults_of_second_array(size)
    finally:
        assert hezk_memory.reuse_freed_memory(False) is True
    assert kept < default
    assert _faults_of_second_array(size) > kept     # restored: mmap'd and returned again


def test_no_op_without_glibc(monkeypatch):
    monkeypatch.setattr(hezk_memory, "_glibc", lambda: None)
    assert hezk_memory.reuse_freed_memory() is False and hezk_memory.reuse_freed_memory(False) is False
    assert sys.modules["hezk_memory"] is hezk_memory
