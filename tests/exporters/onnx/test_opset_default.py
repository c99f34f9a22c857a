"""Without --opset an ONNX source keeps its opset (an opset-22 model is not forced down to 17)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import parser

AP22 = """<ir_version: 10, opset_import: ["" : 22]>
g (float[1, 3, 9, 9] x) => (float[1, 3, 3, 3] y) {
    y = AveragePool <kernel_shape = [3, 3], strides = [2, 2], dilations = [2, 2]> (x)
}"""


def _dilated_avg_pool(x: np.ndarray) -> np.ndarray:
    """Independent oracle: 3x3 window, dilation 2, stride 2, no pads."""
    out = np.zeros((1, 3, 3, 3), np.float64)
    for i in range(3):
        for j in range(3):
            out[:, :, i, j] = x[:, :, 2 * i:2 * i + 5:2, 2 * j:2 * j + 5:2].mean(axis=(2, 3))
    return out


def test_onnx_source_keeps_its_opset(tmp_path: Path) -> None:
    src = tmp_path / "ap22.onnx"
    onnx.save(parser.parse_model(AP22), src)
    out = tmp_path / "o.onnx"
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    written = onnx.load(out)
    assert {o.domain: o.version for o in written.opset_import}[""] == 22
    x = np.random.default_rng(0).standard_normal((1, 3, 9, 9)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = _dilated_avg_pool(x.astype(np.float64))
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) < 1e-6


def test_explicit_lower_opset_that_cannot_express_it_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "ap22.onnx"
    onnx.save(parser.parse_model(AP22), src)
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(tmp_path / "o.onnx"),
                             "--opset", "17"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "dilations" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_opset_onnx_runtime_cannot_load_is_warned_before_writing(tmp_path: Path) -> None:
    """--opset 5 writes a file ONNX Runtime refuses (it runs opset 7 and later): said as a warning
    before the check reports NOT CHECKED; --opset 7 is silent."""
    src = tmp_path / "relu.onnx"
    onnx.save(parser.parse_model("""<ir_version: 8, opset_import: ["" : 13]>
        g (float[1, 4] x) => (float[1, 4] y) { y = Relu (x) }"""), src)
    for opset, warned in ((5, True), (7, False)):
        result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o",
                                 str(tmp_path / f"o{opset}.onnx"), "--opset", str(opset)],
                                capture_output=True, text=True, timeout=120)
        said = "ONNX Runtime runs opset 7 and later" in result.stderr
        assert said == warned, (opset, result.stderr)
