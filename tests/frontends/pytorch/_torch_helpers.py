"""Shared helpers of the PyTorch frontend tests: the test nets, conversion and the oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sample_models

ROOT = Path(__file__).resolve().parents[3]

# Error relative to the output's scale: max|ours - ref| / max|ref| (fp32).
REL_TO_SCALE = 1e-4
# The reference must not be degenerate: its spread at least this, relative to its scale.
MIN_SPREAD = 1e-3


def nets() -> object:
    """Import models/pytorch/nets.py once as module 'pytorch_test_nets' (so pickles can find it)."""
    return sample_models.nets()


def rel_to_scale(ours: np.ndarray, ref: np.ndarray) -> float:
    """Return max|ours - ref| / max|ref| after checking the reference is not degenerate."""
    ref = np.asarray(ref, dtype=np.float64)
    ours = np.asarray(ours, dtype=np.float64).reshape(ref.shape)
    scale = float(np.abs(ref).max())
    assert scale > 0, "reference output is all zeros"
    assert float(ref.std()) > MIN_SPREAD * scale or ref.size == 1, "reference output is (nearly) constant"
    return float(np.abs(ours - ref).max()) / scale


def run_onnx(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run an ONNX file in ONNX Runtime on the CPU."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def to_onnx(model: object, path: Path) -> Path:
    """Run the standard passes (validating) and write ``model`` with the ONNX exporter."""
    from convert.exporters.onnx import EXPORTER
    from convert.ir import Options, passes

    passes.standard_pipeline(validate=True)(model)  # type: ignore[arg-type]
    EXPORTER.save(model, path, Options())  # type: ignore[arg-type]
    return path
