"""Small sample models and manifests for the batch tests, and a worker function that gets killed.

The models are real and tiny: two ONNX CNNs from ``tests/models_onnx.py`` (references: ONNX
Runtime; converted to ONNX and to Caffe, whose runtime is real Caffe or OpenCV) and the committed
TorchScript sample ``models/pytorch/sample.pt`` (reference: PyTorch eager).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import models_onnx  # noqa: E402

from convert.batch import ModelResult, run_model  # noqa: E402

MANIFEST = """\
output = "out"

[defaults]
tol = 1e-4
seed = 0

[[models]]
name = "cnn"
to = "onnx"                 # the source format is guessed from the file
files = "cnn.onnx"
inputs = "x.npz"

[[models]]
name = "simple-caffe"
route = "onnx->caffe"
files = ["simple.onnx"]
input_shape = {x = [1, 3, 32, 32]}
options = { caffe-flavor = "bvlc" }

[[models]]
name = "sample"
route = "pytorch:onnx"
files = "sample.pt"

[[models]]
name = "missing"
to = "onnx"
files = "no-such-model.onnx"

[[models]]
name = "nocheck"
to = "onnx"
files = "cnn.onnx"
check = false

[[models]]
name = "tight"
route = "onnx:caffe"
files = "simple.onnx"
tol = 1e-12
"""


def write_zoo(folder: Path, manifest: str = MANIFEST) -> Path:
    """Write the sample models and ``models.toml`` into ``folder``; return the manifest's path."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(models_onnx.conv_net(), str(folder / "cnn.onnx"))
    onnx.save(models_onnx.simple_cnn(), str(folder / "simple.onnx"))
    shutil.copy(ROOT / "models" / "pytorch" / "sample.pt", folder / "sample.pt")
    np.savez(folder / "x.npz", x=np.random.default_rng(7).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32))
    path = folder / "models.toml"
    path.write_text(manifest)
    return path


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run this checkout's ``convert`` command (``python -m convert``) with ``args``."""
    full_env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}  # only when a test sets it
    full_env.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run([sys.executable, "-m", "convert", *args], cwd=cwd, capture_output=True, text=True,
                          env=full_env, timeout=600)


# Two models for the retry tests: kill_once lets 'cnn' through on its second attempt and kills
# 'always-killed' on both.
KILLED = """\
[[models]]
name = "cnn"
route = "onnx:onnx"
files = "cnn.onnx"

[[models]]
name = "always-killed"
route = "onnx:onnx"
files = "cnn.onnx"
"""


def kill_once(spec: object, out_dir: str, progress: object) -> ModelResult:
    """Die by SIGKILL the first time a model is run (every time for a name starting 'always'), then convert it."""
    marker = Path(out_dir) / f".killed-{spec.name}"  # type: ignore[attr-defined]
    if spec.name.startswith("always") or not marker.exists():  # type: ignore[attr-defined]
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return run_model(spec, out_dir, progress)  # type: ignore[arg-type]
