"""``.npz`` archives are read with every member's declared shape and dtype bounded before its array is
allocated: a small compressed file declaring a huge array (a zip bomb: 3 MB on disk, 3.2 GB declared) is
refused by every loader (hezk.model, tensor_ops Sequential.load, proofs load_model) with the loader's own
error naming the array and the limit, and the peak memory stays small."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from hypothesis import given, strategies as st

from crypto.errors import ParameterError
import hezk.model
from hezk.model import ModelFileError, read_archive
from hezk.model.graph import MAX_ELEMENTS
from proofs.errors import ModelError
from proofs.model import load_model
from tensor_ops.nn import Sequential

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bomb(path, shape=(6000, 6000), data_bytes=None, name="w0.npy"):
    """An .npz whose one member declares ``shape`` float64 and holds ``data_bytes`` zero bytes of data (all
    of them by default), deflated: zeros compress about 1000 to 1."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    left = int(np.prod(shape)) * 8 if data_bytes is None else data_bytes
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(name, "w", force_zip64=True) as member:
            member.write(header.getvalue())
            chunk = bytes(1 << 22)
            while left:
                member.write(chunk[:min(left, len(chunk))])
                left -= min(left, len(chunk))
    return path


def test_a_zip_bomb_is_refused_by_every_loader_naming_the_array_and_the_limit(tmp_path):
    path = bomb(tmp_path / "bomb.npz")
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ModelFileError, match=rf"array 'w0'.*\(6000, 6000\).*limit of {MAX_ELEMENTS}"):
        read_archive(path)
    with pytest.raises(ParameterError, match="array 'w0'.*limit"):
        Sequential.load(path)
    with pytest.raises(ModelError, match="array 'w0'.*limit"):
        load_model(path)


def test_the_bomb_is_refused_with_little_memory(tmp_path):
    """ru_maxrss in a fresh process: the 288 MB array declared is never allocated (the old reader peaked at
    twice its size)."""
    path = bomb(tmp_path / "bomb.npz")
    script = ("import resource, sys, hezk.model\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "try:\n    hezk.model.read_archive(sys.argv[1])\nexcept hezk.model.ModelFileError:\n    pass\n"
              "else:\n    sys.exit('accepted')\n"
              "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) < 32  # MB


def test_a_member_declaring_more_than_it_holds_is_refused_before_reading(tmp_path):
    path = bomb(tmp_path / "short.npz", shape=(100, 100), data_bytes=80)
    with pytest.raises(ModelFileError, match="array 'w0'.*holds 80 bytes of data"):
        read_archive(path)


def test_object_arrays_and_too_many_bytes_in_all_are_refused(tmp_path, monkeypatch):
    np.savez(tmp_path / "o.npz", w0=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ModelFileError, match="array 'w0'.*Python objects"):
        read_archive(tmp_path / "o.npz")
    np.savez(tmp_path / "two.npz", a=np.zeros(600), b=np.zeros(600))
    monkeypatch.setattr(hezk.model.npz, "MAX_ARCHIVE_BYTES", 8000)
    with pytest.raises(ModelFileError, match="up to 'b' declare 9600 bytes.*limit of 8000"):
        read_archive(tmp_path / "two.npz")


def test_genuine_archives_still_read(tmp_path):
    """Positive control: every array comes back equal (dtypes, strings, Fortran order, empty arrays)."""
    arrays = {"w0": np.arange(12.0).reshape(3, 4), "b0": np.arange(3, dtype=np.int32), "activation": np.array("relu"),
              "f": np.asfortranarray(np.ones((2, 3))), "e": np.zeros((0, 4))}
    np.savez_compressed(tmp_path / "m.npz", **arrays)
    got = read_archive(tmp_path / "m.npz")
    assert sorted(got) == sorted(arrays)
    for key, value in arrays.items():
        assert got[key].dtype == value.dtype and np.array_equal(got[key], value)


def _valid_archive() -> bytes:
    handle = io.BytesIO()
    np.savez(handle, w0=np.ones((3, 2)), b0=np.zeros(3), activation=np.array("relu"))
    return handle.getvalue()


VALID = _valid_archive()


@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_archives_give_arrays_or_the_readers_error(tmp_path_factory, edits):
    data = bytearray(VALID)
    for offset, value in edits:
        data[offset] = value
    path = tmp_path_factory.mktemp("npz") / "m.npz"
    path.write_bytes(bytes(data))
    try:
        arrays = read_archive(path)
    except ModelFileError:
        return
    assert all(isinstance(value, np.ndarray) and value.nbytes <= 8 * MAX_ELEMENTS for value in arrays.values())
