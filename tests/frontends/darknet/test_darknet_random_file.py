"""``--random-weights`` generates one ``.weights`` file per cfg, seed and options in a process: the
conversion streams it like any weights file (file slices, not arrays held in memory), and the
reference runtime loads the very same file instead of generating the weights again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir

from convert.frontends.darknet.loader import load
from convert.frontends.darknet.random_file import random_weights_file
from convert.frontends.darknet.random_weights import write_random_weights
from convert.ir import Options

ROOT = Path(__file__).resolve().parents[3]
CFG = ROOT / "models" / "darknet" / "yolov4-tiny.cfg"


def test_one_generated_file_is_shared_and_streamed(tmp_path: Path) -> None:
    options = Options(extra={"random_weights": True, "seed": 3})
    first = random_weights_file(CFG, options)
    assert random_weights_file(CFG, Options(extra={"random_weights": True, "seed": 3})) == first
    assert random_weights_file(CFG, Options(extra={"random_weights": True, "seed": 4})) != first
    # the same bytes as the random-weights command writes for that seed
    written = write_random_weights(CFG, tmp_path / "w.weights", seed=3)
    assert written.read_bytes() == first.read_bytes()
    model = load([CFG], options)
    inits = list(model.graph.initializers.values())
    assert inits and all(isinstance(v.const_value, ir.ExternalTensor) for v in inits if v.const_value.size > 64)
    assert {Path(v.const_value.location) for v in inits if isinstance(v.const_value, ir.ExternalTensor)} == {first}
    conv = next(v for v in inits if v.const_value.size > 1000)
    assert float(np.asarray(conv.const_value.numpy()).std()) > 0  # real random values, not placeholders
