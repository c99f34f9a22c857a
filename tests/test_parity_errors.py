"""A runtime that cannot run a model gives one line and no verdict, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
from onnx import parser

HEAD = '<ir_version: 8, opset_import: ["" : 17]>'


def test_runtime_failure_on_converted_model_is_one_line(tmp_path: Path) -> None:
    good = parser.parse_model(HEAD + " g (float[1, 4] x) => (float[1, 4] y) { y = Relu (x) }")
    # Valid ONNX that ONNX Runtime loads but cannot run: 4 elements reshaped to 3.
    bad = parser.parse_model(HEAD + """ g (float[1, 4] x) => (float[1, 4] y) {
        s = Constant <value = int64[1] {3}> ()
        y = Reshape (x, s)
    }""")
    onnx.save(good, tmp_path / "good.onnx")
    onnx.save(bad, tmp_path / "bad.onnx")
    result = subprocess.run(
        [sys.executable, "-m", "convert", "check", "onnx:onnx", str(tmp_path / "good.onnx"),
         "--against", str(tmp_path / "bad.onnx")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "could not run the converted model" in result.stderr
    assert "PASS" not in result.stdout
