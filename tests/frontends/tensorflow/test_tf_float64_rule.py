"""The float64 rule of the verdict on the TensorFlow route (.keras sources).

A net whose float32 rounding alone exceeds the tolerance: two 600x dense layers that cancel to
a small result (``a - a' + S x``, after a sigmoid each runtime computes ulps apart). TensorFlow's
own float32 run and ours are 3e-4 and 5e-4 of the output's scale from the exact value; the source rebuilt in float64
(Keras' float64 dtype policy, the same weights) judges them: PASS by the float64 rule. Checked
against a source whose small term differs by 1 %, the same converted model FAILs even with the
float64 run. Both verdicts come from the CLI, against TensorFlow itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

pytestmark = [pytest.mark.tensorflow]

GAIN = 600.0


def _cancelling(path: Path, small: np.ndarray, big: np.ndarray) -> Path:
    x = keras.Input((256,), name="x")
    e = keras.layers.Activation("sigmoid", name="e")(x)  # each runtime's own sigmoid: ulps apart
    a = keras.layers.Dense(32, use_bias=False, name="a")(e)
    b = keras.layers.Dense(32, use_bias=False, name="b")(e)
    model = keras.Model(x, keras.layers.Add(name="y")([a, b]))
    model.get_layer("a").set_weights([big])
    model.get_layer("b").set_weights([-big + small])
    model.save(str(path))
    return path


def _run(*args: str) -> tuple[int, dict]:
    report = Path(args[-1])
    done = subprocess.run([sys.executable, "-m", "convert", *args[:-1], "--report", str(report)],
                          capture_output=True, text=True, timeout=600)
    assert report.exists(), done.stdout + done.stderr
    return done.returncode, json.loads(report.read_text())


def test_float32_rounding_passes_by_the_float64_run_and_a_wrong_model_fails(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    small = rng.standard_normal((256, 32)).astype(np.float32)
    big = (rng.standard_normal((256, 32)) * GAIN).astype(np.float32)
    src = _cancelling(tmp_path / "net.keras", small, big)
    rc, data = _run("tensorflow:onnx", str(src), "-o", str(tmp_path / "net.onnx"), str(tmp_path / "r.json"))
    out = data["outputs"][0]
    assert out["rel_to_scale"] > 1e-4, out  # float32 rounding alone misses tol: the rule must decide
    assert rc == 0 and data["verdict"] == "PASS" and out["by_float64"], out
    assert "float64 run of the source" in out["note"]
    print(f"TF-F64 {out['rel_to_scale']:.1e}: {out['note']}")

    wrong = _cancelling(tmp_path / "wrong.keras", small * 1.01, big)
    rc, data = _run("check", "tensorflow:onnx", str(wrong), "--against", str(tmp_path / "net.onnx"),
                    str(tmp_path / "w.json"))
    out = data["outputs"][0]
    assert rc == 1 and data["verdict"] == "FAIL" and not out["by_float64"], out
