"""What the acceptance tests share: networks exported as users export them (torch's default exporter,
``dynamo=True``, and the TorchScript one, ``dynamo=False``; skl2onnx), onnxruntime's outputs for them, and the
``hezk`` command line run in a child process whose peak resident memory is measured (``os.wait4``'s
``ru_maxrss``: the figure ``/usr/bin/time -v`` prints)."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PEAK_RSS_LIMIT = 6 << 30
"""No acceptance run may take more resident memory than this (6 GiB: a quarter of a shared 24 GB machine)."""


@dataclasses.dataclass
class Run:
    """One ``hezk`` command: its exit status, outputs and peak resident set size in bytes."""
    args: tuple
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int


def hezk(*args, cwd: Path, timeout: float = 1800) -> Run:
    """``python -m hezk ARGS`` in ``cwd``, its peak RSS taken from the kernel's rusage of that child alone."""
    out, err = cwd / ".hezk.stdout", cwd / ".hezk.stderr"
    env = dict(os.environ, PYTHONWARNINGS="ignore", HEZK_PROGRESS="0")
    with open(out, "w") as stdout, open(err, "w") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "hezk", *map(str, args)], cwd=cwd, stdout=stdout,
                                 stderr=stderr, env=env)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            child.kill()
            raise
        child.returncode = os.waitstatus_to_exitcode(status)
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    run = Run(tuple(map(str, args)), child.returncode, out.read_text(), err.read_text(), usage.ru_maxrss * scale)
    assert run.peak_rss <= PEAK_RSS_LIMIT, f"hezk {args[0]} took {run.peak_rss / 2**30:.2f} GiB"
    return run


def ok(run: Run) -> Run:
    assert run.returncode == 0, f"hezk {' '.join(run.args)} exited {run.returncode}:\n{run.stderr[-3000:]}"
    return run


def export_torch(module, sample, dynamo: bool):
    """``module`` exported on the example input ``sample`` (a torch tensor) as users do: the default exporter as
    it comes, or the TorchScript one at opset 17; input "x", output "y"."""
    torch = pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    import onnx

    buffer = io.BytesIO()
    options = {"dynamo": True} if dynamo else {"dynamo": False, "opset_version": 17}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(module.eval(), (sample,), buffer, input_names=["x"], output_names=["y"], **options)
    return onnx.load_from_string(buffer.getvalue())


def onnxruntime_run(model, x: np.ndarray, sample_shape: tuple) -> np.ndarray:
    """onnxruntime's first output for each sample of ``x`` (samples of ``sample_shape``, the file's whole input
    when its batch is fixed at 1), stacked."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    x = np.asarray(x, dtype=np.float32).reshape(-1, *sample_shape)
    declared = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    runs = [session.run(None, {name: x[i].reshape(declared if all(declared) else (1, *sample_shape))})[0]
            for i in range(len(x))]
    return np.stack(runs)


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| over onnxruntime's largest output magnitude."""
    got = np.asarray(got, dtype=np.float64).reshape(expected.shape)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def insecure_ring(levels: int, log_n: int = 11) -> dict:
    """An INSECURE test ring (tests only; ``--insecure``) of ``levels`` 30-bit levels at N = 2^log_n: a 128-bit
    ring for a transformer's depth needs bootstraps at N = 2^16 (10 GB of keys and bootstrap), beyond a test."""
    return dict(log_n=log_n, log_q=[[30, 30]] + [[30]] * levels, log_p=[31] * (levels // 4 + 2), log_scale=30,
                dnum=4, insecure=True)


def write_ring(path: Path, levels: int, log_n: int = 11) -> Path:
    path.write_text(json.dumps(insecure_ring(levels, log_n)))
    return path
