"""docs/new_frontend.md's example frontend, run as written: it converts, to ONNX and Caffe, what a formula says."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from convert import api, formats, ir
from convert.cli import ops_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "new_frontend.md"


@pytest.fixture
def npzmlp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    (tmp_path / "npzmlp_guide.py").write_text(code.group(1))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(formats._FRONTENDS, "npzmlp", "npzmlp_guide")
    yield "npzmlp"
    sys.modules.pop("npzmlp_guide", None)


def _mlp(path: Path, acts: list[str], rng: np.random.Generator) -> list[np.ndarray]:
    sizes = [6, 16, 8, 3]
    arrays: dict[str, np.ndarray] = {"activations": np.array(acts)}
    for i in range(len(acts)):
        arrays[f"W{i}"] = rng.standard_normal((sizes[i], sizes[i + 1])).astype(np.float32)
        arrays[f"b{i}"] = rng.standard_normal(sizes[i + 1]).astype(np.float32)
    np.savez(path, **arrays)
    return [arrays[f"W{i}"] for i in range(len(acts))] + [arrays[f"b{i}"] for i in range(len(acts))]


def _reference(x: np.ndarray, params: list[np.ndarray], acts: list[str]) -> np.ndarray:
    """The MLP's forward, written here: x W + b, then the named activation."""
    n = len(acts)
    y = x.astype(np.float64)
    for i, act in enumerate(acts):
        y = y @ params[i].astype(np.float64) + params[n + i].astype(np.float64)
        y = np.maximum(y, 0) if act == "relu" else np.tanh(y) if act == "tanh" else y
    return y


def test_the_guide_frontend_converts_to_onnx_and_caffe(tmp_path: Path, npzmlp: str) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    acts = ["relu", "tanh", "none"]
    params = _mlp(tmp_path / "mlp.npz", acts, rng)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = _reference(x, params, acts)
    assert want.std() > 0.1  # outputs with spread, not a degenerate comparison
    result = api.convert(tmp_path / "mlp.npz", to="onnx", out=tmp_path / "mlp.onnx", check=False)
    sess = ort.InferenceSession(str(result.outputs[0]), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x})[0]
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5
    caffe = api.convert(tmp_path / "mlp.npz", to="caffe", out=tmp_path / "mlp.prototxt", check=False,
                        input_shapes={"x": (4, 6)})
    assert [p.name for p in caffe.outputs] == ["mlp.prototxt", "mlp.caffemodel"]
    assert "InnerProduct" in caffe.outputs[0].read_text()
    rows = ops_table(npzmlp, markdown=True)
    assert "| `relu` | Relu |" in rows and "| `tanh` | Tanh |" in rows


def test_the_guide_frontend_lists_gaps_at_once_and_names_refusals(tmp_path: Path, npzmlp: str) -> None:
    rng = np.random.default_rng(4)
    _mlp(tmp_path / "odd.npz", ["gelu", "relu", "gelu"], rng)
    with pytest.raises(ir.UnsupportedOpsError, match=r"gelu x2 \(first at odd.npz layer 0\)"):
        api.convert(tmp_path / "odd.npz", to="onnx", out=tmp_path / "odd.onnx", check=False)
    assert not (tmp_path / "odd.onnx").exists()
    with np.load(tmp_path / "odd.npz") as f:
        arrays = {k: f[k] for k in f.files if k != "b1"}
    arrays["activations"] = np.array(["relu", "relu", "none"])
    np.savez(tmp_path / "short.npz", **arrays)
    with pytest.raises(ir.ConversionError, match=r"cannot convert short.npz layer 1: W1 or b1 is missing"):
        api.convert(tmp_path / "short.npz", to="onnx", out=tmp_path / "short.onnx", check=False)
