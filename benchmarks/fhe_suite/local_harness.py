"""Run hezk's entry the way the suite's ``harness/run_submission.py`` does, offline, on the stand-in data.

    python local_harness.py --root DIR [--num-runs 1] [--seed 3] SIZE [SIZE ...]   # sizes 0-3
    python local_harness.py --root DIR --table                                       # the per-stage table

``DIR`` is a harness root already holding the installed entry (``submission/``, ``scripts/``, built) and the
stand-in datasets (``standin.py``); ``run.sh`` prepares it. Per size, the steps are the harness's: (1) the
dataset is in place, (2) key generation, (3) model preprocessing, then per run (4) a random sample of the
instance's size drawn from the dataset into ``datasets/<size>/intermediate/test_{pixels,labels}.txt``, (5-9)
the stage executables from ``submission/build/`` with the size as argument, (10) the check: the label for
single, else the accuracy of the encrypted predictions and of the float model (the harness's cleartext step),
(11) ``measurements/<size>/results-<n>.json`` with the harness's keys: ``per_stage`` (seconds of each step,
the whole process each), ``bandwidth`` (bytes of the key, input and result folders, as ``du -sb``),
``mnist_model_quality`` and ``total_latency_ms`` (which the harness fills with the seconds' sum; kept so), and
ours under ``hezk_entry``: exact bytes, the load average, each stage's peak RSS (``/usr/bin/time``), the packing
and the server stage's own split of its time (``server_timings.json``: set-up, and ``server_compute_s``).
This file is our own driver, not the harness: the harness itself needs torchvision's MNIST download.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import standin  # noqa: E402

SIZES = ("single", "small", "medium", "large")
BATCH_SIZES = (1, 15, 1000, 10000)
STAGE_STEPS = (  # (step, the harness's step name, executable, passes the size)
    (2, "Client: Key Generation", "client_key_generation", True),
    (3, "Server: (Encrypted) model preprocessing", "server_preprocess_model", False),
    (5, "Client: Input preprocessing", "client_preprocess_input", True),
    (6, "Client: Input encryption", "client_encode_encrypt_input", True),
    (7, "Server: Encrypted ML Inference computation", "server_encrypted_compute", True),
    (8, "Client: Result decryption", "client_decrypt_decode", True),
    (9, "Client: Result postprocessing", "client_postprocess", True),
)
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None  # GNU time: -f %M, the peak RSS in KiB
SIZE_LOGS = {2: ("public_keys", "Client: Public and evaluation keys"),
             6: ("ciphertexts_upload", "Client: Encrypted input"),
             7: ("ciphertexts_download", "Client: Encrypted results")}


def human(n: float) -> str:
    """Bytes as the harness prints them (1024-based, one decimal, B/K/M/G/T)."""
    for unit in "BKMGT":
        if n < 1024:
            return f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}P"


def folder_bytes(path: pathlib.Path) -> int:
    """Bytes under ``path`` (files and the folders themselves, as ``du -sb``)."""
    if not path.exists():
        return 0
    return int(subprocess.run(["du", "-sb", str(path)], check=True, capture_output=True, text=True).stdout.split()[0])


class Run:
    """One run's log, in the harness's JSON layout."""

    def __init__(self):
        self.seconds, self.bandwidth, self.bytes, self.quality, self.peak_rss_kib = {}, {}, {}, {}, {}

    def timed(self, step, name, command, cwd):
        """Run one stage executable; its wall time, and its peak RSS where /usr/bin/time exists (run under it:
        the stage's own high-water mark, not the harness's, which a forked child would inherit)."""
        rss_file = pathlib.Path(cwd) / ".stage_rss"
        wrapped = [TIME, "-f", "%M", "-o", str(rss_file)] + command if TIME else command
        start = time.perf_counter()
        subprocess.run(wrapped, cwd=cwd, check=True)
        elapsed = time.perf_counter() - start
        if TIME:
            self.peak_rss_kib[name] = int(rss_file.read_text().split()[-1])
            rss_file.unlink()
        self.seconds[name] = elapsed
        print(f"{time.strftime('%H:%M:%S')} [harness] {step}: {name} completed (elapsed: {elapsed:.4f}s)", flush=True)

    def size(self, path, name):
        n = folder_bytes(path)
        self.bytes[name], self.bandwidth[name] = n, human(n)
        print(f"         [harness] {name} size: {human(n)}", flush=True)

    def accuracy(self, labels, predictions, tag):
        correct = int(np.sum(np.asarray(labels) == np.asarray(predictions)))
        self.quality[f"{tag} quality"] = {"correct_predictions": correct, "total_samples": len(labels),
                                          "accuracy": correct / len(labels)}
        print(f"[harness] {tag}: {correct / len(labels):.4f} ({correct}/{len(labels)} correct)")

    def save(self, path, size, extra):
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"total_latency_ms": round(sum(self.seconds.values()), 4),
                  "per_stage": {k: f"{round(v, 4)}s" for k, v in self.seconds.items()},
                  "bandwidth": self.bandwidth}
        if size:
            record["mnist_model_quality"] = self.quality
        record["hezk_entry"] = extra  # ours: raw bytes, the load average, the Dask setting
        path.write_text(json.dumps(record, indent=2))


def read_labels(path) -> list[int]:
    return [int(line) for line in pathlib.Path(path).read_text().split()]


def run_size(root: pathlib.Path, size: int, num_runs: int = 1, seed: int | None = None) -> list[dict]:
    """Steps 1-11 of the harness for one instance size; returns each run's record."""
    name, build = SIZES[size], root / "submission" / "build"
    io = root / "io" / name
    shutil.rmtree(io, ignore_errors=True)
    io.mkdir(parents=True)
    dataset = root / "datasets" / name
    pixels_file, labels_file = dataset / "dataset_pixels.txt", dataset / "dataset_labels.txt"
    if not pixels_file.exists():
        raise SystemExit(f"{pixels_file} missing: make the stand-in dataset first (standin.py --root {root})")
    setup = Run()
    for step, title, executable, sized in STAGE_STEPS[:2]:
        setup.timed(step, title, [str(build / executable)] + ([str(size)] if sized else []), root)
        if step in SIZE_LOGS:
            setup.size(io / SIZE_LOGS[step][0], SIZE_LOGS[step][1])
    pool_pixels = pixels_file.read_text().splitlines()
    pool_labels = read_labels(labels_file)
    records = []
    for run in range(num_runs):
        record = Run()
        record.seconds.update(setup.seconds)
        record.peak_rss_kib.update(setup.peak_rss_kib)
        record.bandwidth.update(setup.bandwidth)
        record.bytes.update(setup.bytes)
        rng = np.random.default_rng(None if seed is None else seed + run)
        start = time.perf_counter()
        picks = rng.permutation(len(pool_labels))[:BATCH_SIZES[size]]
        inter = dataset / "intermediate"
        inter.mkdir(parents=True, exist_ok=True)
        (inter / "test_pixels.txt").write_text("".join(pool_pixels[i] + "\n" for i in picks))
        standin.write_labels(inter / "test_labels.txt", [pool_labels[i] for i in picks])
        record.seconds["Harness: Input generation for MNIST"] = time.perf_counter() - start
        for step, title, executable, sized in STAGE_STEPS[2:]:
            record.timed(step, title, [str(build / executable)] + ([str(size)] if sized else []), root)
            if step in SIZE_LOGS:
                record.size(io / SIZE_LOGS[step][0], SIZE_LOGS[step][1])
        labels = read_labels(inter / "test_labels.txt")
        predictions = read_labels(io / "encrypted_model_predictions.txt")
        if len(predictions) != len(labels):
            raise SystemExit(f"{len(predictions)} predictions for {len(labels)} images")
        weights = dict(np.load(root / "standin" / "weights.npz"))
        pixels = np.array(" ".join(pool_pixels[i] for i in picks).split(), dtype=float).reshape(len(picks), -1)
        harness_predictions = standin.float_predict(weights, pixels)
        (io / "harness_model_predictions.txt").write_text("".join(f"{p}\n" for p in harness_predictions))
        if size == 0:
            verdict = "PASS" if predictions == labels else "FAIL"
            print(f"[harness] {verdict}  (expected={labels[0]}, got={predictions[0]})")
        record.accuracy(labels, predictions, "Encrypted model")
        record.accuracy(labels, harness_predictions, "Harness model")
        timings = io / "server_timings.json"  # the server stage's own split: set-up and compute
        server = json.loads(timings.read_text()) if timings.exists() else {}
        extra = {"bytes": record.bytes, "load_average": os.getloadavg(), "peak_rss_kib": record.peak_rss_kib,
                 "packing": server.get("packing"), "server_compute_s": server.get("compute_s"),
                 "server_setup_s": server.get("setup_s"), "server_threads": server.get("threads"),
                 "dask": os.environ.get("HEZK_FHE_DASK") or None,
                 "agreement_with_float_model": float(np.mean(np.asarray(predictions) == harness_predictions))}
        if size == 0:
            extra["label_check"] = verdict
        path = root / "measurements" / name / f"results-{run + 1}.json"
        record.save(path, size, extra)
        print(f"[total latency] {sum(record.seconds.values()):.4f}s  -> {path}")
        records.append(json.loads(path.read_text()))
    return records


def install(root: pathlib.Path, degree: int | None = None) -> None:
    """Install the entry in the harness root as a submitter does (``submission/`` and ``scripts/`` replaced by
    ours) and build it with the stand-in model of ``root/standin`` (``standin.py``)."""
    (root / "submission").mkdir(parents=True, exist_ok=True)
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    for name in ("hezk_entry.py", "stage.py", "README.md"):
        shutil.copy2(HERE / "submission" / name, root / "submission" / name)
    for name in ("get_openfhe.sh", "build_task.sh"):
        shutil.copy2(HERE / "scripts" / name, root / "scripts" / name)
    env = dict(os.environ, HEZK_FHE_WEIGHTS=str(root / "standin" / "weights.npz"),
               HEZK_FHE_CALIBRATION=str(root / "standin" / "calibration.npy"))
    if degree is not None:
        env["HEZK_FHE_DEGREE"] = str(degree)
    subprocess.run(["scripts/build_task.sh", "./submission"], cwd=root, env=env, check=True)


TABLE_ROWS = ("Client: Key Generation", "Server: (Encrypted) model preprocessing", "Client: Input preprocessing",
              "Client: Input encryption", "Server: Encrypted ML Inference computation", "Client: Result decryption",
              "Client: Result postprocessing")


def table(root: pathlib.Path) -> str:
    """The per-stage seconds and the byte sizes of every size measured under ``root`` (results-1.json)."""
    found = {}
    for name in SIZES:
        path = root / "measurements" / name / "results-1.json"
        if path.exists():
            found[name] = json.loads(path.read_text())
    if not found:
        return "no measurements yet"
    width = max(len(r) for r in TABLE_ROWS + tuple(SIZE_LOGS[s][1] for s in SIZE_LOGS)) + 2
    lines = [f"{'stage':<{width}}" + "".join(f"{name:>12}" for name in found)]
    for row in TABLE_ROWS:
        lines.append(f"{row:<{width}}" + "".join(f"{r['per_stage'].get(row, '-'):>12}" for r in found.values()))
    for _, label in SIZE_LOGS.values():
        lines.append(f"{label + ' size':<{width}}" + "".join(f"{r['bandwidth'].get(label, '-'):>12}"
                                                          for r in found.values()))
    lines.append(f"{'Encrypted model accuracy':<{width}}" + "".join(
        f"{_accuracy(r, 'Encrypted model quality', r.get('hezk_entry', {}).get('label_check', '-')):>12}"
        for r in found.values()))
    lines.append(f"{'Float (harness) model accuracy':<{width}}" + "".join(
        f"{_accuracy(r, 'Harness model quality', '-'):>12}" for r in found.values()))
    lines.append(f"{'Server compute (stage-reported)':<{width}}" + "".join(
        f"{_number(r.get('hezk_entry', {}).get('server_compute_s')):>12}" for r in found.values()))
    lines.append(f"{'Peak RSS of a stage':<{width}}" + "".join(
        f"{human(1024 * max(r.get('hezk_entry', {}).get('peak_rss_kib', {}).values(), default=0)):>12}"
        for r in found.values()))
    lines.append(f"{'packing':<{width}}" + "".join(f"{str(r.get('hezk_entry', {}).get('packing')):>12}"
                                                  for r in found.values()))
    lines.append(f"{'load average (1 min) at the end':<{width}}" + "".join(
        f"{r.get('hezk_entry', {}).get('load_average', [float('nan')])[0]:>12.2f}" for r in found.values()))
    return "\n".join(lines)


def _accuracy(record: dict, key: str, otherwise: str) -> str:
    """The accuracy under ``key`` of a record's quality (4 decimals), else ``otherwise`` (single: its label check)."""
    quality = record.get("mnist_model_quality", {}).get(key)
    return otherwise if quality is None else f"{quality['accuracy']:.4f}"


def _number(value) -> str:
    return "-" if value is None else f"{value:.4f}s"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, help="instance sizes: 0 single, 1 small, 2 medium, 3 large")
    parser.add_argument("--root", type=pathlib.Path, required=True)
    parser.add_argument("--num-runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--table", action="store_true", help="print the table of what is measured")
    parser.add_argument("--install", action="store_true", help="install and build the entry in ROOT first")
    args = parser.parse_args(argv)
    if any(size not in range(4) for size in args.sizes):
        parser.error(f"sizes {args.sizes} must be among 0, 1, 2, 3")
    if args.install:
        install(args.root.resolve())
    for size in args.sizes:
        print(f"\n[harness] Running submission for {SIZES[size]} inference")
        run_size(args.root.resolve(), size, args.num_runs, args.seed)
    if args.table or not args.sizes:
        print(table(args.root.resolve()))


if __name__ == "__main__":
    main()
