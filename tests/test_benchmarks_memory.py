"""benchmarks/memory.py measures each library in a subprocess of its own with the like-for-like settings of
benchmarks/ckks.py (issue 14). No peer needed: hezk's child runs at the TOY preset."""
from benchmarks import ckks, memory


def test_spec_carries_every_librarys_settings_as_plain_values():
    spec = memory.spec_of("N14")
    s = ckks.settings("N14")
    assert spec["preset"] == "N14" and spec["rotations"] == list(s.rotations)
    for name, lib in s.libraries.items():
        assert spec[name]["n"] == lib.n and spec[name]["levels"] == lib.levels
        assert spec[name]["rotations"] == list(lib.rotations)


def test_hezk_child_reports_a_peak_per_stage():
    result = memory.measure("hezk", "TOY")
    stages = ["imports", "keygen", "encrypt", "ct*ct+relin+rescale", "rotate"]
    peaks = [result[stage] for stage in stages]
    assert all(p > 0 for p in peaks) and peaks == sorted(peaks)     # a high-water mark only grows
    assert result["peak"] >= result["rotate"] - 1 and result["imports rss"] > 0
