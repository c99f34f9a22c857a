"""A bug in convert is reported as one (exit 3), never as the user's bad input (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
from onnx import parser

# Fault injection: make the converter itself raise an exception that no input check produces.
_DRIVER = """
import sys
import convert.api
def broken(*args, **kwargs):
    raise ZeroDivisionError("division by zero inside convert")
convert.api.convert = broken
from convert.cli import main
main(sys.argv[1:])
"""


def _model(tmp_path: Path) -> Path:
    model = parser.parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1, 4] x) => (float[1, 4] y) '
                               "{ y = Relu (x) }")
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


def test_internal_error_has_its_own_exit_code_and_no_traceback(tmp_path: Path) -> None:
    src = _model(tmp_path)
    result = subprocess.run([sys.executable, "-c", _DRIVER, "onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert "internal error: ZeroDivisionError" in result.stderr
    assert "bug in convert" in result.stderr and "--debug" in result.stderr


def test_internal_error_traceback_with_debug(tmp_path: Path) -> None:
    src = _model(tmp_path)
    result = subprocess.run([sys.executable, "-c", _DRIVER, "onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"),
                             "--debug"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_bad_input_stays_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf model")
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(bad), "-o", str(tmp_path / "o.onnx")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
