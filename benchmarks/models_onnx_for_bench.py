"""A small ONNX model for the start-up measurement (the test suite's conv net)."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import models_onnx


def write_small(path: Path) -> None:
    onnx.save(models_onnx.conv_net(), str(path))
