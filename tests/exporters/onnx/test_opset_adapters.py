"""Opset adapters (registry entries keyed by the opset where an op changed), through the CLI.

Clip min/max (opset 11), Pad pads/value (11) and Slice starts/ends/axes (10) moved from
attributes to inputs: an opset-9 model written at 17 carries them as constant inputs, and an
opset-17 model written at 9 as attributes. ONNX Runtime runs what was written; numpy is the oracle.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import parser

OLD = """<ir_version: 4, opset_import: ["" : 9]>
g (float[1, 3, 6, 6] x) => (float[1, 3, 6, 6] y, float[1, 2, 4, 3] z) {
    y = Clip <min = -0.5, max = 0.25> (x)
    p = Pad <pads = [0, 0, 1, 2, 0, 0, 1, 0], value = 1.5> (x)
    z = Slice <starts = [1, 2, 1], ends = [3, 6, 4], axes = [1, 2, 3]> (p)
}"""

NEW = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 6, 6] x) => (float[1, 3, 6, 6] y) <float lo = {-0.5}, float hi = {0.25}> {
    y = Clip (x, lo, hi)
}"""

COMPUTED = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 6, 6] x, float lo) => (float[1, 3, 6, 6] y) {
    y = Clip (x, lo)
}"""


def _convert(tmp_path: Path, text: str, opset: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    src, out = tmp_path / "src.onnx", tmp_path / "out.onnx"
    onnx.save(parser.parse_model(text), src)
    result = subprocess.run([sys.executable, "-m", "convert", "onnx:onnx", str(src), "-o", str(out),
                             "--opset", str(opset)], capture_output=True, text=True, timeout=120)
    return result, out


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)


def test_opset9_attribute_operands_written_at_17(tmp_path: Path) -> None:
    result, out = _convert(tmp_path, OLD, 17)
    assert result.returncode == 0, result.stderr
    written = onnx.load(out)
    assert {o.domain: o.version for o in written.opset_import}[""] == 17
    onnx.checker.check_model(written, full_check=True)
    for node in written.graph.node:
        assert not node.attribute, node  # every operand is an input now
    assert [len(n.input) for n in written.graph.node] == [3, 3, 4]
    dims = {t.name: list(t.dims) for t in written.graph.initializer}
    assert dims[written.graph.node[0].input[1]] == [] == dims[written.graph.node[0].input[2]]  # scalar bounds
    x = _x()
    y, z = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ref_y = np.clip(x.astype(np.float64), -0.5, 0.25)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (2, 0)), constant_values=1.5)
    ref_z = padded[:, 1:3, 2:6, 1:4]
    assert float(np.abs(y - ref_y).max() / np.abs(ref_y).max()) < 1e-7
    assert float(np.abs(z - ref_z).max() / np.abs(ref_z).max()) < 1e-7
    assert np.ptp(ref_y) > 0.7 and np.ptp(ref_z) > 1.0  # the references have spread


def test_opset17_clip_written_at_9_takes_attributes(tmp_path: Path) -> None:
    result, out = _convert(tmp_path, NEW, 9)
    assert result.returncode == 0, result.stderr
    written = onnx.load(out)
    (clip,) = written.graph.node
    assert len(clip.input) == 1
    assert {a.name: onnx.helper.get_attribute_value(a) for a in clip.attribute} == {"min": -0.5, "max": 0.25}
    x = _x()
    (y,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ref = np.clip(x.astype(np.float64), -0.5, 0.25)
    assert float(np.abs(y - ref).max() / np.abs(ref).max()) < 1e-7


def test_computed_clip_bound_refused_below_11(tmp_path: Path) -> None:
    result, out = _convert(tmp_path, COMPUTED, 9)
    assert result.returncode == 2, result.stderr
    assert "Clip" in result.stderr and "min is computed" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
