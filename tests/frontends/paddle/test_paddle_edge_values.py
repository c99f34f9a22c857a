"""Paddle's elementwise ops on edge values, against Paddle Inference.

The Paddle frontend lowers no op through a division or rounding formula (it has no mod, floor
division, round or atan2); its formulas are the activations' (hard_swish with non-default
parameters, swish with beta, GELU) and its namesakes can still part from Paddle's kernels at NaN,
infinities and ±3.4e38. Each op runs here on signed zeros, halves, 0.1, ±3.4e38, ±inf and NaN (every
pair for binary ops; ``tests/edge_values.py``), written by ``edge_programs.py`` in a Paddle process
of its own. Where Paddle's kernel is the one that departs (relu(NaN) is 0, sqrt(3.4e38) 2.77e19, an
overflow to inf in GELU and hardswish at 3.4e38), that element is left out here and said in
docs/paddle.md ("Edge values").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from edge_values import mismatches

pytestmark = pytest.mark.paddle
pytest.importorskip("paddle")

HERE = Path(__file__).resolve().parent
# op -> ulps allowed. sigmoid, swish and gelu: ONNX Runtime's sigmoid and erf are up to 7e-8 off in
# the tail (sigmoid(-7) 6e-6 relative, gelu(-2.5) 5e-6; an absolute allowance of 1e-7); divide and
# pow: Paddle flushes subnormal results to zero.
ULPS = {"divide": 1, "divide_int": 0, "pow": 2, "maximum": 0, "minimum": 0, "pow_factor": 2, "scale": 0,
        "clip": 0, "relu6": 0, "relu": 0, "leaky_relu": 0, "hardswish": 4, "hardsigmoid": 0, "swish": 4,
        "gelu": 4, "gelu_tanh": 4, "floor": 0, "sqrt": 1, "log": 2, "exp": 2, "erf": 4, "tanh": 4, "sigmoid": 4}
# Where Paddle's own kernel departs (input values left out, docs/paddle.md).
PADDLES_OWN = {"relu": [np.nan], "sqrt": [3.4e38], "gelu": [3.4e38], "hardswish": [3.4e38]}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("paddle_edge")
    r = subprocess.run([sys.executable, str(HERE / "edge_programs.py"), str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.mark.parametrize("op", list(ULPS))
def test_op_on_edge_values_matches_paddle_inference(op: str, written: Path, tmp_path: Path) -> None:
    from convert.exporters.onnx import EXPORTER
    from convert.frontends.paddle import FRONTEND
    from convert.ir import Options, passes
    from convert.parity.runtimes.onnxruntime import open_runtime as open_ort
    from convert.parity.runtimes.paddle import open_runtime as open_paddle

    folder = written / op
    with np.load(folder / "inputs.npz") as data:
        xs = [data[k] for k in data.files]
    model = FRONTEND.load([folder], Options())
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "m.onnx", Options())
    ours = open_ort([tmp_path / "m.onnx"], Options(extra={"device": "cpu"}))
    ref = open_paddle([folder], Options(extra={"device": "cpu"}))
    want = next(iter(ref.run({s.name: x for s, x in zip(ref.inputs(), xs, strict=True)}).values()))
    got = next(iter(ours.run({s.name: x for s, x in zip(ours.inputs(), xs, strict=True)}).values()))
    keep = np.ones(want.size, bool)
    for value in PADDLES_OWN.get(op, []):
        x = xs[0].ravel().astype(np.float64)
        keep &= ~(np.isnan(x) if np.isnan(value) else np.abs(x) == np.float32(value))
    atol = 1e-7 if op in ("sigmoid", "swish", "gelu") else 0.0
    bad = mismatches(want.ravel()[keep], got.ravel()[keep], ulps=ULPS[op], atol=atol, ftz=True)
    assert not bad, f"{op}: {len(bad)} of {int(keep.sum())} differ: {bad[:8]}"
