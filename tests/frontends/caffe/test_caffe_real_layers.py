"""Caffe layers the frontend reads, checked against real Caffe running the very net.

Each case is a small net after an input ``data`` (1, 4, 6, 5). Real Caffe (``scripts/build_caffe``)
runs it and is the reference; the converted ONNX runs in ONNX Runtime. Bound: 1e-5 of the
output's scale (exact for indices), after checking the reference has spread.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from convert import api
from convert.parity.runtimes.caffe_runtime import RealCaffeRuntime, find_caffe

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "models" / "caffe"))

from build_nets import NetBuilder  # noqa: E402

SHAPE = (1, 4, 6, 5)

CASES: dict[str, Callable[[NetBuilder], None]] = {
    "tile-channels": lambda b: b.layer("Tile", "t", ["data"], ["t"], tile_param={"axis": 1, "tiles": 3}),
    "tile-width": lambda b: b.layer("Tile", "t", ["data"], ["t"], tile_param={"axis": -1, "tiles": 2}),
    "reduction-sum": lambda b: b.layer("Reduction", "r", ["data"], ["r"], reduction_param={"operation": 1, "axis": 1}),
    "reduction-asum-coeff": lambda b: b.layer("Reduction", "r", ["data"], ["r"],
                                              reduction_param={"operation": 2, "axis": 2, "coeff": 0.5}),
    "reduction-sumsq": lambda b: b.layer("Reduction", "r", ["data"], ["r"],
                                         reduction_param={"operation": 3, "axis": 3}),
    "reduction-mean-all": lambda b: b.layer("Reduction", "r", ["data"], ["r"], reduction_param={"operation": 4}),
    "argmax-axis": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={"axis": 1}),
    "argmax-axis-max": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={"axis": 2, "out_max_val": True}),
    "argmax-flat": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={}),
    "argmax-flat-max": lambda b: b.layer("ArgMax", "a", ["data"], ["a"], argmax_param={"out_max_val": True}),
    "mvn": lambda b: b.layer("MVN", "m", ["data"], ["m"], mvn_param={}),
    "mvn-across": lambda b: b.layer("MVN", "m", ["data"], ["m"], mvn_param={"across_channels": True}),
    "mvn-mean-only": lambda b: b.layer("MVN", "m", ["data"], ["m"], mvn_param={"normalize_variance": False}),
}


@pytest.fixture(scope="module")
def caffe_dir() -> Path:
    found = find_caffe()
    if found is None:
        pytest.skip("real Caffe is not built here: run scripts/build_caffe")
    return found


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_layer_matches_real_caffe(case: str, caffe_dir: Path, tmp_path: Path) -> None:
    b = NetBuilder("net", 0)
    b.input("data", SHAPE)
    CASES[case](b)
    proto, model = b.save(tmp_path)
    x = (np.random.default_rng(4).standard_normal(SHAPE) * 2 + 0.5).astype(np.float32)
    ref = RealCaffeRuntime(proto, model, caffe_dir).run({"data": x})
    result = api.convert([proto, model], to="onnx", out=tmp_path / "net.onnx", check=False)
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    for name, r in ref.items():
        g = np.asarray(got[name])
        assert g.shape == r.shape, (name, g.shape, r.shape)
        scale = float(np.abs(r).max())
        assert scale > 0 and (r.size == 1 or float(r.std()) > 1e-3 * scale), f"degenerate reference {name}"
        assert float(np.abs(g - r).max()) <= 1e-5 * scale, name
