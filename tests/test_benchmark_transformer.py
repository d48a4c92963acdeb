"""benchmarks/transformer.py (issue 34's encrypted benchmark): its plan mode on a tiny encoder layer prints the
128-bit plan's bootstraps, keys, time and memory estimates and the approximations' errors beside the peers'
figures; bad sizes are refused naming the option."""
import pytest


def test_a_bad_size_is_refused_naming_the_option(capsys):
    from benchmarks import transformer

    for bad in ("8,3,16,4", "8,2,16", "8,2,x,4", "0,2,16,4"):
        with pytest.raises(SystemExit) as stop:
            transformer.main(["--size", bad, "--proof", "none"])
        assert stop.value.code == 2 and "--size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        transformer.main(["--threads", "0", "--proof", "none"])
    assert stop.value.code == 2 and "--threads 0 must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_plan_mode_on_a_tiny_layer_states_the_figures(capsys, monkeypatch):
    """Width 8, 2 heads, MLP 16, sequence 4 at 128 bits (no key made; ~15 s under load): N16_BOOT, bootstraps,
    keys, the estimated time and peak memory (whose parts add up to it), every approximation's error, the peers;
    --run with less memory available than RUN_MARGIN times the estimate is refused before any key."""
    pytest.importorskip("torch")
    from benchmarks import transformer

    monkeypatch.setattr(transformer, "_available_gb", lambda: 1.0)
    transformer.main(["--size", "8,2,16,4", "--proof", "none", "--calibration", "16", "--run"])
    out = capsys.readouterr().out
    assert "--run refused: 1 GB available" in out and "encrypted run:" not in out
    assert "N=2^16" in out and "security 128-bit" in out and "ciphertext bootstraps at" in out
    seconds = float(out.split("estimated server time: ")[1].split(" s")[0])
    assert seconds > 0 and f"{seconds:.0f} s" in out.split("hezk (this plan, estimated)")[1].splitlines()[0]
    memory = out.split("peak memory (estimate): ")[1].splitlines()[0]
    total, parts = float(memory.split(" GiB")[0]), memory.split(" = ")[1].split(", ")
    assert abs(total - sum(float(p.rsplit(" ", 1)[1]) for p in parts)) < 0.01 * len(parts)
    assert "Galois keys:" in out and "Softmax" in out and "LayerNormalization" in out and "gelu" in out
    # where the time goes: a row per node (operations and bootstraps), the operation counts priced
    assert "estimated time by node" in out and "constants encoded" in out and "rescales" in out
    rows = out.split("estimated time by node")[1].split("  operations:")[0].splitlines()[1:]
    assert rows and all(" s (" in row and "bootstraps" in row for row in rows if "other nodes" not in row)
    assert "THOR" in out and "5,777 s" in out and "21.4 GB" in out and "2.36 min" in out and "<= 120 s" in out


@pytest.mark.slow
def test_memory_estimate_counts_the_keys_and_the_bootstrap_constants():
    """memory_estimate of a bootstrapping plan: keys at least the Galois keys, bootstrap constants present, the
    working set growing with the widest bootstrapped tensor (the toy ring's bootstrap plan: ~6 s under load)."""
    import dataclasses

    from crypto import CKKSParameters
    from crypto.ckks.bootstrap import BootstrapConfig
    from benchmarks import transformer
    from tensor_ops.attention_plan import AttentionPlan, BootstrapSite

    params = CKKSParameters.from_literal(transformer.TOY_RING)
    config = BootstrapConfig(**transformer.TOY_BOOTSTRAP)
    plan = AttentionPlan((1, 4, 8), (1, 4, 8), (), (), 0.0, 1.0, 30, (1, 2), params.slots, params, None, (-1.0, 1.0),
                         8, config, (BootstrapSite("n", None, 1, 0),), params.max_level)
    parts = transformer.memory_estimate(plan)
    assert parts["keys"] > plan.galois_key_bytes > 0 and parts["bootstrap constants"] > 0
    wide = dataclasses.replace(plan, bootstraps=(BootstrapSite("n", None, 1, 0, spread=4),))
    assert transformer.memory_estimate(wide)["working ciphertexts"] > parts["working ciphertexts"]
