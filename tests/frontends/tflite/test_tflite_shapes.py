"""The converted TFLite model declares its outputs' shapes from the file (a free batch named, as the
inputs' is), so ``convert inspect`` shows ``Nx5`` and not ONNX's inferred ``unk__0x5``."""

from __future__ import annotations

from pathlib import Path

from convert.frontends.tflite import FRONTEND
from convert.ir import Options

MODEL = Path(__file__).resolve().parents[3] / "models" / "tflite" / "small_cnn.tflite"


def test_outputs_carry_the_files_shapes_with_a_named_free_batch() -> None:
    model = FRONTEND.load([MODEL], Options())
    (inp,) = model.graph.inputs
    (out,) = model.graph.outputs
    dims = [str(d) for d in out.shape]
    assert dims == ["N", "5"], dims
    assert str(inp.shape[0]) == "N" and [int(d) for d in inp.shape[1:]] == [3, 32, 32], inp.shape
