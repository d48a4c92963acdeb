"""benchmarks/ckks.py compares like for like: the same N, levels, scale and rotation keys for every library,
every difference a peer forces printed as a note, and no tuning for one side (issue 11). No peer needed."""
import importlib
import inspect
import os

import pytest

from benchmarks import ckks
from crypto import CKKSParameters

PRESETS = ["N14", "N15", "N16"]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_library_gets_the_same_n_levels_scale_and_rotation_keys(preset):
    s = ckks.settings(preset)
    params = CKKSParameters.preset(preset)
    assert (s.n, s.levels, s.log_scale) == (params.n, params.max_level, round(params.log_scale))
    assert set(s.libraries) == {"hezk", "SEAL", "desilofhe"}
    for name, lib in s.libraries.items():
        assert (lib.n, lib.levels, lib.rotations) == (s.n, s.levels, s.rotations), name
        if lib.log_scale is None:  # a library that cannot take the scale must say so
            assert any(note.startswith(f"{name}:") and "scale" in note for note in s.notes), name
        else:
            assert lib.log_scale == s.log_scale, name
    assert s.libraries["hezk"].log_scale == s.libraries["SEAL"].log_scale == 50
    assert s.rotations == tuple(range(1, 9))


@pytest.mark.parametrize("preset", PRESETS)
def test_seal_moduli_are_hezks_up_to_its_prime_cap_and_the_difference_is_noted(preset):
    s = ckks.settings(preset)
    hezk, seal = s.libraries["hezk"].moduli_bits, s.libraries["SEAL"].moduli_bits
    assert len(seal) == len(hezk) == s.levels + 2
    assert seal[1:-1] == hezk[1:-1] == (s.log_scale,) * s.levels  # one scale-sized prime per level
    assert seal == tuple(min(b, ckks.SEAL_MAX_PRIME_BITS) for b in hezk)
    # q0 and P rounded to whole bits (0.5 each), every level within 0.03 bit of the scale
    assert abs(sum(hezk) - CKKSParameters.preset(preset).log_qp) <= 1 + 0.03 * s.levels
    noted = any(note.startswith("SEAL:") and "moduli" in note for note in s.notes)
    assert noted == (seal != hezk)


def test_settings_table_names_every_setting(capsys):
    ckks.print_settings(ckks.settings("N14"))
    out = capsys.readouterr().out
    for text in ("hezk", "SEAL", "desilofhe", "2^14", "2^50", "[60, 50 x 6,", "8 rotation keys (steps 1..8)",
                 "not settable", "note: SEAL", "note: desilofhe"):
        assert text in out, text


def test_nothing_is_tuned_for_one_side():
    """No process-wide allocator tuning, and importing the module changes no environment variable."""
    source = inspect.getsource(ckks)
    assert "mallopt" not in source and "MALLOC_" not in source
    before = dict(os.environ)
    importlib.reload(ckks)
    assert dict(os.environ) == before


def test_a_missing_peer_is_a_skipped_column_with_a_note(capsys):
    assert ckks._peer("SEAL", lambda: None) is None
    assert "SEAL skipped: not installed" in capsys.readouterr().out

    def fails():
        raise RuntimeError("no such N")
    assert ckks._peer("desilofhe", fails) is None
    assert "desilofhe skipped: RuntimeError: no such N" in capsys.readouterr().out


@pytest.mark.parametrize("module", ["benchmarks._repo", "benchmarks.inference", "benchmarks.einsum"])
def test_importing_a_benchmark_leaves_the_thread_settings_alone(module, monkeypatch):
    """Rule: a benchmark imported into a running process (the tests import several) does not set
    NUMBA_NUM_THREADS / OMP_NUM_THREADS: numba re-reads its settings at each compilation and raises once its
    pool runs at another count, which failed the thread tests of a whole run."""
    import sys

    import numba  # noqa: F401  (loaded, as in any process that has run a kernel)

    for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, module, raising=False)
    importlib.import_module(module)
    assert "NUMBA_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ
