"""Ops newer than the opset asked for, written as their exact expression in older ops (#52 item 4).

Each case is a one-node model at the op's own opset (or later), run by ONNX Runtime: the oracle. The
same model written at lower opsets (`--opset`) must compute the same on edge values (signed zeros,
halves, values float32 cannot hold, the largest finite values, infinities, NaN), within a few
float32 units in the last place, and must hold no node newer than the opset it is written at.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edge_values import EDGE_F32, grid, mismatches

import convert

X = EDGE_F32.reshape(1, -1)
A, B = (v.reshape(1, -1) for v in grid())
RNG = np.random.default_rng(0)
ROWS = (RNG.standard_normal((2, 3, 8)) * np.array([1, 100, 1e-3], np.float32)[None, :, None]).astype(np.float32)


def _model(op: str, opset: int, inputs: dict[str, np.ndarray], attrs: dict[str, object] | None = None,
           consts: dict[str, np.ndarray] | None = None, out_type: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    consts = consts or {}
    node = helper.make_node(op, [*inputs, *consts], ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [onnx.numpy_helper.from_array(a, n) for n, a in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _run(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


# op, its opset, inputs, attributes, constant inputs, output type, the opsets to write it at, ulps
CASES = {
    "HardSwish": ("HardSwish", 14, {"x": X}, None, None, onnx.TensorProto.FLOAT, (13, 9, 7), 2),
    "Mish": ("Mish", 18, {"x": X}, None, None, onnx.TensorProto.FLOAT, (17, 13, 7), 4),
    "Celu": ("Celu", 12, {"x": X}, {"alpha": 0.7}, None, onnx.TensorProto.FLOAT, (11, 8), 4),
    "Swish": ("Swish", 24, {"x": X}, {"alpha": 1.5}, None, onnx.TensorProto.FLOAT, (23, 13, 7), 4),
    "Gelu": ("Gelu", 20, {"x": X}, None, None, onnx.TensorProto.FLOAT, (19, 13, 9), 4),
    "Gelu-tanh": ("Gelu", 20, {"x": X}, {"approximate": "tanh"}, None, onnx.TensorProto.FLOAT, (19, 13, 9), 8),
    "GreaterOrEqual": ("GreaterOrEqual", 12, {"a": A, "b": B}, None, None, onnx.TensorProto.BOOL, (11,), 0),
    "LessOrEqual": ("LessOrEqual", 12, {"a": A, "b": B}, None, None, onnx.TensorProto.BOOL, (11,), 0),
    "CastLike": ("CastLike", 15, {"x": X}, None, {"like": np.zeros(1, np.float16)}, onnx.TensorProto.FLOAT16,
                 (14, 7), 0),
    "Trilu": ("Trilu", 14, {"x": np.tile(X[:, :12], (3, 1)).reshape(3, 12)}, {"upper": 0},
              {"k": np.array(1, np.int64)}, onnx.TensorProto.FLOAT, (13, 9), 0),
    "LayerNormalization": ("LayerNormalization", 17, {"x": ROWS}, {"epsilon": 1e-5},
                           {"s": RNG.uniform(0.5, 1.5, 8).astype(np.float32),
                            "b": RNG.standard_normal(8).astype(np.float32)}, onnx.TensorProto.FLOAT, (16, 13, 7), 64),
    "RMSNormalization": ("RMSNormalization", 23, {"x": ROWS}, {"epsilon": 1e-5},
                         {"s": RNG.uniform(0.5, 1.5, 8).astype(np.float32)}, onnx.TensorProto.FLOAT, (22, 17, 7), 8),
}


def _layer_norm(x: np.ndarray, s: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * s + b


def _rms_norm(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * s


#: The normalisations, judged against their float64 value (ONNX Runtime's kernel sums differently).
EXACT = {"LayerNormalization": _layer_norm, "RMSNormalization": _rms_norm}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_lowered_op_computes_as_onnx_runtime_at_its_opset(case: str, tmp_path: Path) -> None:
    op, opset, inputs, attrs, consts, out_type, targets, ulps = CASES[case]
    src = tmp_path / "src.onnx"
    onnx.save(_model(op, opset, inputs, attrs, consts, out_type), str(src))
    want = _run(src, inputs)
    for target in targets:
        out = tmp_path / f"at{target}.onnx"
        convert.convert(src, to="onnx", out=out, opset=target, check=False)
        written = onnx.load(str(out))
        assert {o.domain: o.version for o in written.opset_import}[""] == target
        newer = [n.op_type for n in written.graph.node
                 if onnx.defs.get_schema(n.op_type, target).since_version > target]
        assert not newer and op not in {n.op_type for n in written.graph.node}, (target, newer)
        got = _run(out, inputs)
        assert got.dtype == want.dtype and got.shape == want.shape, (target, got.dtype, want.dtype)
        if want.dtype == bool:
            assert np.array_equal(got, want), (target, np.flatnonzero(got != want))
        elif case in EXACT:  # a normalisation: no farther from the float64 value than ONNX Runtime's own kernel
            exact = EXACT[case](inputs["x"].astype(np.float64), *(c.astype(np.float64) for c in consts.values()))
            ort_err = float(np.abs(want - exact).max())
            ours = float(np.abs(got - exact).max())
            assert ours <= max(ort_err, ulps * float(np.spacing(np.float32(np.abs(exact).max())))), (target, ours,
                                                                                                     ort_err)
        else:
            bad = mismatches(want.astype(np.float32), got.astype(np.float32), ulps=ulps)
            assert not bad, (target, bad[:8])


def test_no_lowering_is_refused_naming_the_op_and_the_opset(tmp_path: Path) -> None:
    """An op with no expression at the opset asked for (Einsum before 12) is refused with the op named."""
    src = tmp_path / "e.onnx"
    onnx.save(_model("Einsum", 12, {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 4), np.float32)},
                     {"equation": "ij,jk->ik"}), str(src))
    with pytest.raises(convert.UnsupportedOpsError, match=r"Einsum .*it does not exist before opset 12"):
        convert.convert(src, to="onnx", out=tmp_path / "o.onnx", opset=11, check=False)
    assert not (tmp_path / "o.onnx").exists()


def test_mobilenet_v3_block_at_opset_13(tmp_path: Path) -> None:
    """The issue's case: torchvision's MobileNetV3 uses HardSwish; written at --opset 13 it converts."""
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Hardswish(), torch.nn.Conv2d(8, 4, 1),
                              torch.nn.Hardsigmoid()).eval()
    result = convert.convert(net, torch.rand(1, 3, 16, 16), to="onnx", out=tmp_path / "m.onnx", opset=13)
    assert result.report is not None and result.report.passed, result.report.table() if result.report else ""
    ops = {n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node}
    assert "HardSwish" not in ops and "HardSigmoid" in ops
