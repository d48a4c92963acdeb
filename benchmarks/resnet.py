"""ResNet-20 for CIFAR-10 encrypted through the command line at 128-bit security (issue 32's acceptance).

    python benchmarks/resnet.py [--shortcut projection|padding] [--dynamo] [--samples 1] [--plan-only]
                                [--memory-budget 16GB] [--relu fit|composite|auto] [--folder DIR]

The network is the CIFAR ResNet of He et al. (2016, Sec. 4.2) as torchvision-style repositories write it: a
3x3 conv to 16 channels, 3 stages of 3 basic blocks (16/32/64 channels, BatchNorm, ReLU; the first block of
stages 2 and 3 strides by 2 with a 1x1 stride-2 projection shortcut, or option A's zero-padding shortcut with
``--shortcut padding``), global average pooling and fc 10: 272k parameters with projections. Random
initialisation (seed 0) with non-trivial BatchNorm statistics, exported by ``torch.onnx.export`` at opset 17
(TorchScript exporter, or the default one with ``--dynamo``), calibrated on 64 samples of ``randn``, then run
as a user would, each command under ``/usr/bin/time -v``, single thread (``HEZK_THREADS=1``):
``hezk plan --model M.onnx --calibration cal.npy --memory-budget B --out plan.json``, then ``hezk infer`` on the
same flags with ``--input x.npy``. Printed: planning time, infer wall time and peak RSS beside the plan's
estimate (the local-infer peak of the plan infer printed, and measured / estimate), the argmax against
onnxruntime and the max error relative to the largest logit, beside the FHE Benchmarking Suite's reference
ResNet-20 (OpenFHE: 32.1 min of compute, 50.4 GB of keys) and FHEON's published figures (403 s, 20.4 GB).
The issue's bounds: <= 1800 s and <= 16 GB (goal 300 s, 12 GB). ``--relu`` (passed to both commands): each ReLU's
degree-7 fit (default), the composite sign (10 levels each: more bootstraps) or the planner's choice per activation
(``Sequential.choose_relus``); the plan lists both options' errors per ReLU either way.

Measured (projection shortcuts, --relu fit, one thread, on 2 cores shared at load 5-7): plan 62.7 s (2.63 GB);
infer 1680 s, peak RSS 11.49 GB against the 10.76 GB estimated (x1.07), argmax 1/1, error 0.16 of the largest
logit. Before the server dropped the layers' maps: 12.12 GB against 11.65 GB, 743 s at load 1-3. By error alone
every one of its 19 ReLUs would take the composite sign (the degree-7 fit errs by 0.010-0.022 of each interval's
scale, the composite by 0.002), but its bootstraps (N16_BOOT) leave 6 levels, fewer than the composite's 10:
``--relu auto`` keeps every fit there, saying so in the plan, and ``--relu composite`` is refused.
"""
from __future__ import annotations

try:
    import _repo  # noqa: F401  (run as a script: the repository root on the import path)
except ImportError:
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.resnet)

import argparse
import os
import pathlib
import tempfile

import numpy as np

from benchmarks._timing import print_table
from benchmarks.cnn_exports import GB, estimate, export, local_estimate, reference, timed

#: published figures for ResNet-20 on CIFAR-10 (seconds, bytes of keys or peak memory)
PEERS = {"FHE Benchmarking Suite reference (OpenFHE)": (32.1 * 60, 50.4 * GB),
         "FHEON (published)": (403.0, 20.4 * GB)}
LIMIT_S, LIMIT_BYTES = 1800.0, 16 * GB


def resnet20(shortcut: str = "projection"):
    """The CIFAR ResNet-20 (``shortcut``: "projection", 1x1 stride-2 conv + BN; "padding", option A)."""
    import torch
    from torch import nn
    from torch.nn import functional

    class Padding(nn.Module):
        """Option A: x[:, :, ::2, ::2] with planes/4 zero channels on each side (a public selection)."""

        def __init__(self, planes):
            super().__init__()
            self.extra = planes // 4

        def forward(self, x):
            return functional.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.extra, self.extra))

    class BasicBlock(nn.Module):
        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.shortcut = nn.Identity()
            if stride != 1 or cin != planes:
                self.shortcut = Padding(planes) if shortcut == "padding" else nn.Sequential(
                    nn.Conv2d(cin, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

        def forward(self, x):
            out = functional.relu(self.bn1(self.conv1(x)))
            return functional.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for block in range(3):
            layers.append(BasicBlock(cin, planes, stride if block == 0 else 1))
            cin = planes
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    for layer in model.modules():
        if isinstance(layer, nn.BatchNorm2d):
            layer.running_mean.uniform_(-0.1, 0.1)
            layer.running_var.uniform_(0.5, 1.5)
    return model.eval()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shortcut", choices=("projection", "padding"), default="projection")
    parser.add_argument("--dynamo", action="store_true", help="the default (dynamo) exporter instead of TorchScript")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--memory-budget", default=str(LIMIT_BYTES))
    parser.add_argument("--plan-only", action="store_true")
    parser.add_argument("--relu", choices=("fit", "composite", "auto"), default="fit")
    parser.add_argument("--folder", default=None)
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.folder or tempfile.mkdtemp(prefix="hezk_resnet_"))
    folder.mkdir(parents=True, exist_ok=True)
    model = resnet20(args.shortcut)
    print(f"ResNet-20 ({args.shortcut} shortcuts): {sum(p.numel() for p in model.parameters())} parameters; "
          f"files in {folder}", flush=True)
    export(model, (3, 32, 32), folder / "model.onnx", args.dynamo)
    rng = np.random.default_rng(0)
    np.save(folder / "cal.npy", rng.standard_normal((64, 3, 32, 32)))
    x = np.clip(rng.standard_normal((args.samples, 3, 32, 32)), -2.5, 2.5)
    np.save(folder / "x.npy", x)
    common = ["--model", "model.onnx", "--calibration", "cal.npy", "--memory-budget", args.memory_budget,
              "--relu", args.relu]
    plan_s, plan_rss, plan_text = timed(["plan", *common, "--out", "plan.json"], folder)
    print(plan_text[-4000:], flush=True)
    rows = [["hezk plan", f"{plan_s:.1f}", f"{plan_rss / GB:.2f}", f"{estimate(folder) / GB:.2f} (infer)", "", ""]]
    if not args.plan_only:
        wall, rss, text = timed(["infer", *common, "--input", "x.npy", "--out", "y.npy", "--no-progress"], folder)
        local = local_estimate(text)     # the plan infer ran (it may trade keys for its own role's budget)
        print(next((line.strip() for line in text.splitlines() if "peak memory (estimated" in line), ""))
        print(f"infer peak RSS {rss / GB:.2f} GB against its plan's local-infer estimate {local / GB:.2f} GB: "
              f"measured / estimate {rss / local:.2f}", flush=True)
        y = np.load(folder / "y.npy").reshape(args.samples, -1)
        want = reference(folder / "model.onnx", x).reshape(args.samples, -1)
        error = np.max(np.abs(y - want)) / np.max(np.abs(want))
        agree = int(np.sum(y.argmax(1) == want.argmax(1)))
        within = "yes" if wall <= LIMIT_S and rss <= LIMIT_BYTES else "NO"
        rows.append(["hezk infer (keygen, encrypt, evaluate, decrypt)", f"{wall:.0f}", f"{rss / GB:.2f}",
                     f"{local / GB:.2f} (x{rss / local:.2f})", f"{agree}/{args.samples}, rel. error {error:.2g}",
                     f"{within} (<= {LIMIT_S:.0f} s, {LIMIT_BYTES / GB:.0f} GB)"])
    for name, (seconds, size) in PEERS.items():
        rows.append([name, f"{seconds:.0f}", f"{size / GB:.1f}", "", "", ""])
    print_table("ResNet-20, one 32x32x3 image, single thread, 128-bit", ["run", "seconds", "peak/keys GB",
                "estimate GB", "argmax vs onnxruntime", "issue bound"], rows)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HEZK_THREADS", "1")
    main()
